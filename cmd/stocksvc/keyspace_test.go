package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// startOrRefuse starts run with env and waits until it is ready, or has returned: refused is
// then what it returned.
func startOrRefuse(t *testing.T, env map[string]string) (in *instance, refused error) {
	t.Helper()
	in = launch(t, env)
	wctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	if _, err := in.Logs.wait(wctx, in.done, "ready"); err != nil {
		if in.returned() {
			if in.err == nil {
				t.Fatalf("run returned nil before ready; logs:\n%s", in.Logs)
			}
			return in, in.err
		}
		t.Fatalf("%v; logs:\n%s", err, in.Logs)
	}
	in.await(t, "ready")
	return in, nil
}

// productSKU reads product id through the instance and returns its SKU.
func (in *instance) productSKU(t *testing.T, id int64) string {
	t.Helper()
	res := in.call(t, http.MethodGet, "/v1/products/"+strconv.FormatInt(id, 10), nil, nil)
	var p struct {
		SKU string `json:"sku"`
	}
	if err := json.Unmarshal(res.Body, &p); res.Status != http.StatusOK || err != nil {
		t.Fatalf("get product %d: status %d, err %v: %s", id, res.Status, err, res.Body)
	}
	return p.SKU
}

// metric reads a gauge without labels from the instance's /metrics; ok is false when it is not
// there.
func (in *instance) metric(t *testing.T, env map[string]string, name string) (v float64, ok bool) {
	t.Helper()
	res := in.call(t, http.MethodGet, "/metrics", nil, http.Header{"Authorization": {"Bearer " + env["STOCKSVC_ADMIN_TOKEN"]}})
	for line := range strings.Lines(string(res.Body)) {
		if s, found := strings.CutPrefix(line, name+" "); found {
			f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
			return f, err == nil
		}
	}
	return 0, false
}

// awaitMetric waits until the instance's gauge name reads want.
func (in *instance) awaitMetric(t *testing.T, env map[string]string, name string, want float64) {
	t.Helper()
	eventually(t, startTimeout, func() (bool, string) {
		v, ok := in.metric(t, env, name)
		return ok && v == want, name + " = " + strconv.FormatFloat(v, 'g', -1, 64) + " (found " + strconv.FormatBool(ok) + "), want " + strconv.FormatFloat(want, 'g', -1, 64)
	})
}

// TestTwoDatabasesOnOnePrefix: two deployments with databases of their own, on one Redis and
// one key prefix. The second refuses to start, saying how to tell them apart; what it must
// never do is answer from the first one's views — its product 1 read as the other's (issue #31).
func TestTwoDatabasesOnOnePrefix(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	first := serveEnv(t, prefix, nil)
	a := startRun(t, first)
	idA := a.createProduct(t, first["STOCKSVC_ADMIN_TOKEN"], "first-deployment", 5)
	if got := a.productSKU(t, idA); got != "first-deployment" { // its view is now in Redis
		t.Fatalf("first deployment's product %d: sku %q", idA, got)
	}

	second := serveEnv(t, prefix, nil) // a database of its own, the same Redis and prefix
	b, refused := startOrRefuse(t, second)
	if refused != nil {
		for _, want := range []string{"STOCKSVC_REDIS_PREFIX", strconv.Quote(prefix), "another database"} {
			if !strings.Contains(refused.Error(), want) {
				t.Errorf("refusal %q does not say %s", refused, want)
			}
		}
		return
	}
	t.Errorf("the second deployment started on the first one's key prefix")
	idB := b.createProduct(t, second["STOCKSVC_ADMIN_TOKEN"], "second-deployment", 5)
	if idB != idA {
		t.Fatalf("product ids %d and %d: the test wants the same id in both databases", idA, idB)
	}
	if got := b.productSKU(t, idB); got != "second-deployment" {
		t.Errorf("second deployment's product %d read as sku %q: the other deployment's", idB, got)
	}
}

// TestRedisRestartedEmpty: a Redis that lost everything (a restart without persistence) is
// bound again by the first replica that reaches it, and the sale goes on.
func TestRedisRestartedEmpty(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	env := serveEnv(t, testenv.KeyPrefix(t), map[string]string{"REDIS_URL": "redis://" + srv.Addr() + "/0"})
	in := startRun(t, env)
	id := in.createProduct(t, env["STOCKSVC_ADMIN_TOKEN"], "restart", 5)
	order := map[string]any{"customer_id": "c", "items": []map[string]any{{"product_id": id, "quantity": 1}}}
	if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusCreated {
		t.Fatalf("order: status %d: %s", res.Status, res.Body)
	}
	rdb := srv.Client()
	before, err := rdb.Get(t.Context(), env["STOCKSVC_REDIS_PREFIX"]+"database").Result()
	if err != nil {
		t.Fatalf("the key space's binding: %v", err)
	}

	srv.Restart()
	if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusCreated {
		t.Errorf("order after redis restarted empty: status %d: %s", res.Status, res.Body)
	}
	after, err := rdb.Get(t.Context(), env["STOCKSVC_REDIS_PREFIX"]+"database").Result()
	if err != nil {
		t.Fatalf("the key space's binding after the restart: %v", err)
	}
	if owner(t, after) != owner(t, before) {
		t.Errorf("binding after the restart %s, want the same database as before, %s", after, before)
	}
	if v, ok := in.metric(t, env, "stocksvc_redis_key_space_conflict"); !ok || v != 0 {
		t.Errorf("stocksvc_redis_key_space_conflict = %v (found %v), want 0", v, ok)
	}
}

// owner is the database a binding names.
func owner(t *testing.T, binding string) string {
	t.Helper()
	var b struct {
		Database string `json:"database"`
	}
	if err := json.Unmarshal([]byte(binding), &b); err != nil || b.Database == "" {
		t.Fatalf("binding %q: %v", binding, err)
	}
	return b.Database
}

// TestRedisBoundByAnotherDatabaseAfterAReconnect: a running replica whose Redis is bound to
// another database when it connects again — a restart without persistence that another
// deployment, on the same prefix by mistake, reached first — does not answer from that
// deployment's views: it reads its own products from Postgres, answers orders 503, and says why.
func TestRedisBoundByAnotherDatabaseAfterAReconnect(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	prefix := testenv.KeyPrefix(t)
	redisURL := "redis://" + srv.Addr() + "/0"
	rdb := srv.Client()

	// The other deployment first: its product 1 and its view, kept for a minute.
	other := serveEnv(t, prefix, map[string]string{"REDIS_URL": redisURL, "STOCKSVC_CACHE_TTL": "1m"})
	o := startRun(t, other)
	id := o.createProduct(t, other["STOCKSVC_ADMIN_TOKEN"], "other-deployment", 5)
	if got := o.productSKU(t, id); got != "other-deployment" {
		t.Fatalf("other deployment's product: sku %q", got)
	}
	if err := o.stop(t); err != nil {
		t.Fatalf("stop the other deployment: %v", err)
	}
	binding, err := rdb.Get(t.Context(), prefix+"database").Result()
	if err != nil {
		t.Fatalf("the other deployment's binding: %v", err)
	}
	// As if Redis had lost it: this deployment starts and binds the key space to its database.
	if err := rdb.Del(t.Context(), prefix+"database").Err(); err != nil {
		t.Fatal(err)
	}
	env := serveEnv(t, prefix, map[string]string{"REDIS_URL": redisURL})
	in := startRun(t, env)
	if got := in.createProduct(t, env["STOCKSVC_ADMIN_TOKEN"], "this-deployment", 5); got != id {
		t.Fatalf("product id %d, want %d as in the other database", got, id)
	}

	// The other deployment reached Redis first after it lost everything; every connection of
	// this replica is dropped, as a restart drops them.
	if err := rdb.Set(t.Context(), prefix+"database", binding, 0).Err(); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"normal", "pubsub"} {
		if err := rdb.Do(t.Context(), "CLIENT", "KILL", "TYPE", typ, "SKIPME", "yes").Err(); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("client kill type %s: %v", typ, err)
		}
	}
	if got := in.productSKU(t, id); got != "this-deployment" {
		t.Errorf("product %d read as sku %q: the other deployment's view", id, got)
	}
	order := map[string]any{"customer_id": "c", "items": []map[string]any{{"product_id": id, "quantity": 1}}}
	if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusServiceUnavailable {
		t.Errorf("order while redis holds another database's data: status %d, want 503: %s", res.Status, res.Body)
	}
	in.awaitMetric(t, env, "stocksvc_redis_key_space_conflict", 1)
	// Said at the watch's next beat.
	wctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	if rec, err := in.Logs.wait(wctx, in.done, "redis key space holds another database's data; this replica does not use it"); err != nil || rec["level"] != "ERROR" {
		t.Errorf("no error line saying why (%v, %v); logs:\n%s", rec, err, in.Logs)
	}
}

// TestReplicasOnTwoPrefixes: a replica of a database whose other replicas take their locks
// under another prefix would have fencing counters of its own, and one side's writes would be
// refused by the fence for ever (429 busy). It refuses to start, naming both prefixes.
func TestReplicasOnTwoPrefixes(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	first := serveEnv(t, prefix, nil)
	startRun(t, first)

	_, otherPrefix := testenv.Redis(t)
	second := serveEnv(t, otherPrefix, map[string]string{
		"DATABASE_URL":             first["DATABASE_URL"],
		"STOCKSVC_STARTUP_TIMEOUT": "3s", // how long it waits for the other lock space to go
	})
	_, refused := startOrRefuse(t, second)
	if refused == nil {
		t.Fatal("a replica started with another prefix than the running replicas of its database")
	}
	for _, want := range []string{"STOCKSVC_REDIS_PREFIX", strconv.Quote(prefix), strconv.Quote(otherPrefix), "fenc"} {
		if !strings.Contains(refused.Error(), want) {
			t.Errorf("refusal %q does not say %s", refused, want)
		}
	}
}

// TestReplicasOnTwoRedisServersAreReported: a replica that started while its Redis — another
// server than the other replicas' — was down could not be checked at start; once its Redis
// answers, every replica reports two lock spaces.
func TestReplicasOnTwoRedisServersAreReported(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	first := serveEnv(t, prefix, nil)
	a := startRun(t, first)

	srv := testenv.StartRedis(t)
	srv.Kill()
	second := serveEnv(t, prefix, map[string]string{
		"DATABASE_URL": first["DATABASE_URL"],
		"REDIS_URL":    "redis://" + srv.Addr() + "/0",
	})
	b := startRun(t, second)
	srv.Restart()
	for _, r := range []struct {
		in  *instance
		env map[string]string
	}{{a, first}, {b, second}} {
		r.in.awaitMetric(t, r.env, "stocksvc_lock_spaces", 2)
	}
	wctx, cancel := context.WithTimeout(t.Context(), startTimeout)
	defer cancel()
	if _, err := b.Logs.wait(wctx, b.done, "replicas of this database take their locks in more than one lock space"); err != nil {
		t.Errorf("%v; logs:\n%s", err, b.Logs)
	}
}
