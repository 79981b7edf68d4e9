package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestRunServesAndStops drives the whole program: start-up, the API with the admin token, a
// purchase, and a SIGTERM-style shutdown that ends run with nil.
func TestRunServesAndStops(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t) // deletes the instance's keys when the test ends
	env := serveEnv(t, prefix, nil)
	token := env["STOCKSVC_ADMIN_TOKEN"]
	in := startRun(t, env)

	if res := in.call(t, http.MethodGet, "/healthz", nil, nil); res.Status != http.StatusOK {
		t.Errorf("GET /healthz: status %d, want %d: %s", res.Status, http.StatusOK, res.Body)
	}
	if res := in.call(t, http.MethodGet, "/readyz", nil, nil); res.Status != http.StatusOK {
		t.Errorf("GET /readyz: status %d, want %d: %s", res.Status, http.StatusOK, res.Body)
	}
	if res := in.call(t, http.MethodPost, "/v1/products", map[string]any{"sku": "no-token", "name": "x", "stock": 1}, nil); res.Status != http.StatusUnauthorized {
		t.Errorf("create product without the token: status %d, want %d: %s", res.Status, http.StatusUnauthorized, res.Body)
	}
	if res := in.call(t, http.MethodPost, "/v1/products", map[string]any{"sku": "bad-token", "name": "x", "stock": 1},
		http.Header{"Authorization": {"Bearer not-" + token}}); res.Status != http.StatusUnauthorized {
		t.Errorf("create product with a wrong token: status %d, want %d: %s", res.Status, http.StatusUnauthorized, res.Body)
	}

	id := in.createProduct(t, token, "e2e-widget", 3)
	order := map[string]any{"customer_id": "alice", "items": []map[string]any{{"product_id": id, "quantity": 2}}}
	res := in.call(t, http.MethodPost, "/v1/orders", order, nil)
	if res.Status != http.StatusCreated {
		t.Fatalf("place order: status %d, want %d: %s", res.Status, http.StatusCreated, res.Body)
	}
	res = in.call(t, http.MethodGet, "/v1/products/"+strconv.FormatInt(id, 10), nil, nil)
	var p struct {
		Stock int64 `json:"stock"`
	}
	if err := json.Unmarshal(res.Body, &p); res.Status != http.StatusOK || err != nil {
		t.Fatalf("get product: status %d, err %v: %s", res.Status, err, res.Body)
	}
	if got, want := p.Stock, int64(1); got != want {
		t.Errorf("stock after buying 2 of 3 = %d, want %d", got, want)
	}
	// Two more than is left: the service refuses rather than overselling.
	if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusConflict {
		t.Errorf("order beyond the stock: status %d, want %d: %s", res.Status, http.StatusConflict, res.Body)
	}

	// /metrics on the only listener is the admin's: a scrape runs queries (issue #31).
	if res := in.call(t, http.MethodGet, "/metrics", nil, nil); res.Status != http.StatusUnauthorized {
		t.Errorf("GET /metrics without the admin token: status %d, want 401: %.300s", res.Status, res.Body)
	}
	// The idempotency keys are purged as the replica starts, and the metrics say when.
	eventually(t, 10*time.Second, func() (bool, string) {
		res := in.call(t, http.MethodGet, "/metrics", nil, http.Header{"Authorization": {"Bearer " + token}})
		const gauge = "stocksvc_idempotency_purge_last_success_timestamp_seconds "
		for line := range strings.Lines(string(res.Body)) {
			if v, ok := strings.CutPrefix(line, gauge); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				return err == nil && f > 0, "purge last success " + v
			}
		}
		return false, "no " + gauge + "in /metrics"
	})

	if err := in.stop(t); err != nil {
		t.Fatalf("run after cancellation = %v, want nil; logs:\n%s", err, in.Logs)
	}
	for _, msg := range []string{"starting", "listening", "ready", "purged idempotency keys", "shutting down", "stopped"} {
		if n := in.Logs.count(msg); n != 1 {
			t.Errorf("%q logged %d times, want once", msg, n)
		}
	}
	if got := in.stops.Load(); got != 1 {
		t.Errorf("stopSignals called %d times, want once (when shutdown begins)", got)
	}
	if start, _ := in.Logs.find("starting"); start["admin_token"] != "***" {
		t.Errorf("starting line admin_token = %v, want ***", start["admin_token"])
	}
	if strings.Contains(in.Logs.String(), token) {
		t.Errorf("the admin token appears in the logs:\n%s", in.Logs)
	}
	if len(in.Logs.bad) > 0 {
		t.Errorf("log lines that are not JSON: %q", in.Logs.bad)
	}
	if conn, err := net.Dial("tcp", in.Addr); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after run returned", in.Addr)
	}
}

// TestRunSeparateAdminListener runs the service with STOCKSVC_ADMIN_ADDR: the public listener
// serves the public API only, the admin listener serves everything, both answer while
// starting, and both close on shutdown.
func TestRunSeparateAdminListener(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	env := serveEnv(t, prefix, map[string]string{"STOCKSVC_ADMIN_ADDR": "127.0.0.1:0", "STOCKSVC_SHUTDOWN_DELAY": "0s"})
	token := env["STOCKSVC_ADMIN_TOKEN"]
	in := startRun(t, env)
	if in.AdminURL == "" || in.AdminURL == in.URL {
		t.Fatalf("ready line names admin listener %q beside %q, want one of its own", in.AdminURL, in.URL)
	}
	admin := &instance{URL: in.AdminURL, client: in.client}

	auth := http.Header{"Authorization": {"Bearer " + token}}
	if res := in.call(t, http.MethodPost, "/v1/products", map[string]any{"sku": "public", "name": "x", "stock": 1}, auth); res.Status != http.StatusNotFound {
		t.Errorf("create product on the public listener: status %d, want 404: %s", res.Status, res.Body)
	}
	if res := in.call(t, http.MethodGet, "/metrics", nil, nil); res.Status != http.StatusNotFound {
		t.Errorf("GET /metrics on the public listener: status %d, want 404", res.Status)
	}
	id := admin.createProduct(t, token, "admin-listener", 3)
	order := map[string]any{"customer_id": "bob", "items": []map[string]any{{"product_id": id, "quantity": 1}}}
	if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusCreated {
		t.Fatalf("order on the public listener: status %d: %s", res.Status, res.Body)
	}
	res := admin.call(t, http.MethodGet, "/metrics", nil, nil)
	if res.Status != http.StatusOK || !strings.Contains(string(res.Body), `stocksvc_orders_total{outcome="confirmed"} 1`) {
		t.Errorf("GET /metrics on the admin listener: status %d, want 200 with the public order counted:\n%.3000s", res.Status, res.Body)
	}
	for _, on := range []*instance{in, admin} {
		if res := on.call(t, http.MethodGet, "/readyz", nil, nil); res.Status != http.StatusOK {
			t.Errorf("GET %s/readyz: status %d", on.URL, res.Status)
		}
	}

	if err := in.stop(t); err != nil {
		t.Fatalf("run after cancellation = %v; logs:\n%s", err, in.Logs)
	}
	for _, u := range []string{in.URL, in.AdminURL} {
		if conn, err := net.Dial("tcp", strings.TrimPrefix(u, "http://")); err == nil {
			conn.Close()
			t.Errorf("%s still accepts connections after run returned", u)
		}
	}
}

// TestRunAdminListenerBusy checks that an admin address already taken stops start-up, and
// releases the public listener it had opened.
func TestRunAdminListenerBusy(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { busy.Close() })
	public := fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	err = run(context.Background(), func() {}, nil, envOf(map[string]string{"STOCKSVC_ADDR": public, "STOCKSVC_ADMIN_ADDR": busy.Addr().String(), "STOCKSVC_CUSTOMER_AUTH": "body"}),
		stdio{stdout: io.Discard, stderr: io.Discard})
	if err == nil || !strings.Contains(err.Error(), "listen on "+busy.Addr().String()) {
		t.Fatalf("run = %v, want the busy admin address named", err)
	}
	ln, err := net.Listen("tcp", public)
	if err != nil {
		t.Fatalf("public address %s still held after run returned: %v", public, err)
	}
	ln.Close()
}

// TestRunShutdownDelayFailsReadiness checks that during STOCKSVC_SHUTDOWN_DELAY the server is
// still up but /readyz answers 503, so a load balancer can take the replica out first.
func TestRunShutdownDelayFailsReadiness(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	in := startRun(t, serveEnv(t, prefix, map[string]string{"STOCKSVC_SHUTDOWN_DELAY": "2s"}))

	if res := in.call(t, http.MethodGet, "/readyz", nil, nil); res.Status != http.StatusOK {
		t.Fatalf("GET /readyz before shutdown: status %d, want %d: %s", res.Status, http.StatusOK, res.Body)
	}
	in.cancel()
	var last response
	eventually(t, 5*time.Second, func() (bool, string) {
		if in.returned() {
			t.Fatalf("run returned (%v) before /readyz answered 503; logs:\n%s", in.err, in.Logs)
		}
		res, err := doRequest(t.Context(), in.client, http.MethodGet, in.URL+"/readyz", nil, nil)
		if err != nil {
			t.Fatalf("GET /readyz during the shutdown delay: %v", err)
		}
		last = res
		return res.Status == http.StatusServiceUnavailable, "GET /readyz: status " + strconv.Itoa(res.Status) + ": " + string(res.Body)
	})
	if !strings.Contains(string(last.Body), "shutting down") {
		t.Errorf("503 body = %s, want it to say shutting down", last.Body)
	}
	// Liveness is a different question: the process is healthy while it drains.
	if res := in.call(t, http.MethodGet, "/healthz", nil, nil); res.Status != http.StatusOK {
		t.Errorf("GET /healthz during the shutdown delay: status %d, want %d", res.Status, http.StatusOK)
	}
	if in.returned() {
		t.Errorf("run returned before the 2s shutdown delay was over")
	}
	if err := in.wait(t); err != nil {
		t.Fatalf("run = %v, want nil; logs:\n%s", err, in.Logs)
	}
	if _, ok := in.Logs.find("stopped"); !ok {
		t.Errorf("no stopped line; logs:\n%s", in.Logs)
	}
}

// TestRunShutdownFinishesInFlightRequest holds the product lock in Redis so that an order stays
// in its handler, shuts the server down, and checks that the listener closes but the order
// still completes and commits before run returns nil.
func TestRunShutdownFinishesInFlightRequest(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	env := serveEnv(t, prefix, map[string]string{
		// Generous bounds: the order waits for the test, not for a timer.
		"STOCKSVC_LOCK_WAIT":       "25s",
		"STOCKSVC_REQUEST_TIMEOUT": "25s",
		"STOCKSVC_SHUTDOWN_GRACE":  "25s",
	})
	in := startRun(t, env)
	id := in.createProduct(t, env["STOCKSVC_ADMIN_TOKEN"], "in-flight", 1)

	lockName := stocklock.Name(prefix, id)
	held, err := lock.New(rdb).Obtain(t.Context(), lockName, time.Minute, nil)
	if err != nil {
		t.Fatalf("hold the product lock: %v", err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			if err := held.Release(context.Background()); err != nil {
				t.Errorf("release the product lock: %v", err)
			}
		}
	}
	defer release() // lets the order finish if the test fails early

	const key = "in-flight-order-1"
	type result struct {
		res response
		err error
	}
	results := make(chan result, 1)
	ctx, cancelOrder := context.WithTimeout(context.Background(), startTimeout)
	defer cancelOrder()
	go func() {
		res, err := doRequest(ctx, in.client, http.MethodPost, in.URL+"/v1/orders",
			map[string]any{"customer_id": "bob", "items": []map[string]any{{"product_id": id, "quantity": 1}}},
			http.Header{"Idempotency-Key": {key}})
		results <- result{res, err}
	}()
	joined := false
	defer func() { // every path joins the request goroutine
		if !joined {
			release()
			<-results
		}
	}()

	// The order's batch waits for the product lock, which lists the replica among the lock's
	// waiters: proof that the request is inside the server.
	eventually(t, 10*time.Second, func() (bool, string) {
		n, err := rdb.LLen(t.Context(), lockName+":waiters").Result()
		if err != nil {
			t.Fatalf("look for the lock's waiters: %v", err)
		}
		return n == 1, "the order's batch is not waiting for " + lockName
	})

	in.cancel()
	// Shutdown has begun once the listener refuses connections.
	eventually(t, 10*time.Second, func() (bool, string) {
		conn, err := net.DialTimeout("tcp", in.Addr, time.Second)
		if err != nil {
			return true, ""
		}
		conn.Close()
		return false, in.Addr + " still accepts connections after cancellation"
	})
	if in.returned() {
		t.Fatalf("run returned (%v) while a request was in flight; logs:\n%s", in.err, in.Logs)
	}

	release()
	r := <-results
	joined = true
	if r.err != nil {
		t.Fatalf("in-flight order: %v", r.err)
	}
	if r.res.Status != http.StatusCreated {
		t.Fatalf("in-flight order: status %d, want %d: %s", r.res.Status, http.StatusCreated, r.res.Body)
	}
	if err := in.wait(t); err != nil {
		t.Fatalf("run = %v, want nil; logs:\n%s", err, in.Logs)
	}

	// The order committed: the stock is gone.
	conn, err := pgx.Connect(t.Context(), env["DATABASE_URL"])
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	var stock int64
	if err := conn.QueryRow(t.Context(), `SELECT stock FROM products WHERE id = $1`, id).Scan(&stock); err != nil {
		t.Fatalf("read stock: %v", err)
	}
	if stock != 0 {
		t.Errorf("stock after the in-flight order = %d, want 0", stock)
	}
}

// TestRunStartupFailures checks that a dependency that is missing or unusable makes run return
// an error promptly instead of hanging or panicking.
func TestRunStartupFailures(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	t.Cleanup(func() { busy.Close() })

	tests := []struct {
		name  string
		extra map[string]string
		want  string
	}{
		// Not up yet: waited for, warned about once, and named in the final error. (Redis is
		// not waited for: TestRunStartsWithoutRedis.)
		{"unreachable postgres", map[string]string{"DATABASE_URL": "postgres://postgres@127.0.0.1:1/stocksvc?sslmode=disable"}, "postgres not reachable within 1s: connect to postgres: "},
		{"address in use", map[string]string{"STOCKSVC_ADDR": busy.Addr().String()}, "listen on " + busy.Addr().String()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, prefix := testenv.Redis(t)
			env := serveEnv(t, prefix, tt.extra)
			env["STOCKSVC_STARTUP_TIMEOUT"] = "1s"
			logs := newLogSink()
			done := make(chan error, 1)
			go func() {
				done <- run(context.Background(), func() {}, nil, envOf(env), stdio{stdout: &strings.Builder{}, stderr: logs})
			}()
			var err error
			select {
			case err = <-done:
				if err == nil || !strings.Contains(err.Error(), tt.want) {
					t.Errorf("run = %v, want an error containing %q; logs:\n%s", err, tt.want, logs)
				}
			case <-time.After(15 * time.Second):
				t.Errorf("run still starting after 15s with a 1s start-up timeout; logs:\n%s", logs)
				<-done // join it anyway; the test binary's timeout is the last resort
			}
			if _, ok := logs.find("ready"); ok {
				t.Errorf("run logged ready although start-up failed")
			}
			if strings.Contains(tt.name, "unreachable") {
				if n := logs.count("waiting for dependency"); n != 1 {
					t.Errorf("%d waiting lines for one unchanging cause, want 1; logs:\n%s", n, logs)
				}
				if err != nil && (!strings.Contains(err.Error(), "connection refused") || strings.Contains(err.Error(), "deadline exceeded")) {
					t.Errorf("run = %v, want the refused connection as the cause", err)
				}
			}
			// The reason is the log's last line, as JSON, and main does not print it again.
			if rec, ok := logs.find("exiting"); !ok || rec["level"] != "ERROR" || !strings.Contains(fmt.Sprint(rec["error"]), tt.want) {
				t.Errorf("exiting line = %v (found %v), want an ERROR line with the reason; logs:\n%s", rec, ok, logs)
			}
			if !errors.As(err, new(loggedError)) {
				t.Errorf("run's error %v is not marked as logged: main would print it again", err)
			}
			if len(logs.bad) > 0 {
				t.Errorf("log lines that are not JSON: %q", logs.bad)
			}
		})
	}
}

// TestRunCreatesItsDatabase checks the first-start path: the database does not exist, run
// creates it, migrates it and serves.
func TestRunCreatesItsDatabase(t *testing.T) {
	t.Parallel()
	db := newScratchDatabase(t)
	_, prefix := testenv.Redis(t)
	env := serveEnv(t, prefix, map[string]string{"DATABASE_URL": db.URL})
	in := startRun(t, env)
	if !db.exists(t) {
		t.Fatalf("database %s does not exist after start-up", db.Name)
	}
	if _, ok := in.Logs.find("database created"); !ok {
		t.Errorf("no database created line; logs:\n%s", in.Logs)
	}
	in.createProduct(t, env["STOCKSVC_ADMIN_TOKEN"], "fresh", 1) // the schema is there
	if err := in.stop(t); err != nil {
		t.Fatalf("run = %v, want nil", err)
	}
}

// TestRunAnswersWhileStarting: with its migrations held up at start (a transaction holds a
// table the next migration alters), the replica listens at once and says where it stands —
// /healthz 200 (alive: restarting it would not help), /readyz and the API 503 unavailable
// problems with Retry-After — and once the migration gets its lock it turns ready on the same
// address and sells.
func TestRunAnswersWhileStarting(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	env := serveEnv(t, prefix, nil)
	release := holdUpMigration(t, env["DATABASE_URL"])
	in := launch(t, env)
	in.await(t, "listening")

	get := func(method, path string) (*http.Response, []byte) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, in.URL+path, strings.NewReader(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/json")
		res, err := in.client.Do(req)
		if err != nil {
			t.Fatalf("%s %s while starting: %v", method, path, err)
		}
		defer res.Body.Close()
		body, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatalf("%s %s while starting: read body: %v", method, path, err)
		}
		return res, body
	}
	if res, body := get(http.MethodGet, "/healthz"); res.StatusCode != http.StatusOK {
		t.Errorf("GET /healthz while starting: status %d, want 200: %s", res.StatusCode, body)
	}
	for _, rt := range [][2]string{{http.MethodGet, "/readyz"}, {http.MethodPost, "/v1/orders"}, {http.MethodGet, "/v1/products/1"}} {
		res, body := get(rt[0], rt[1])
		var p struct {
			Status int    `json:"status"`
			Code   string `json:"code"`
			Detail string `json:"detail"`
		}
		_ = json.Unmarshal(body, &p)
		if res.StatusCode != http.StatusServiceUnavailable || p.Code != "unavailable" || p.Status != http.StatusServiceUnavailable ||
			!strings.Contains(p.Detail, "starting") {
			t.Errorf("%s %s while starting: status %d, body %s; want a 503 unavailable problem saying it is starting", rt[0], rt[1], res.StatusCode, body)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s %s while starting: Content-Type %q", rt[0], rt[1], ct)
		}
		if res.Header.Get("Retry-After") == "" || res.Header.Get("X-Request-ID") == "" {
			t.Errorf("%s %s while starting: Retry-After %q, X-Request-ID %q; want both", rt[0], rt[1],
				res.Header.Get("Retry-After"), res.Header.Get("X-Request-ID"))
		}
	}
	if _, ok := in.Logs.find("ready"); ok {
		t.Fatalf("ready logged while the migrations wait; logs:\n%s", in.Logs)
	}

	release()
	listening := in.Addr
	in.await(t, "ready")
	if in.Addr != listening {
		t.Errorf("ready on %s, but listened on %s", in.Addr, listening)
	}
	if res := in.call(t, http.MethodGet, "/readyz", nil, nil); res.Status != http.StatusOK {
		t.Errorf("GET /readyz once ready: status %d: %s", res.Status, res.Body)
	}
	id := in.createProduct(t, env["STOCKSVC_ADMIN_TOKEN"], "late-start", 1)
	order := map[string]any{"customer_id": "alice", "items": []map[string]any{{"product_id": id, "quantity": 1}}}
	if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusCreated {
		t.Errorf("order once ready: status %d: %s", res.Status, res.Body)
	}
	if err := in.stop(t); err != nil {
		t.Fatalf("run = %v, want nil", err)
	}
}

// TestRunStopsWhileStarting: a SIGTERM while the replica still waits for Postgres ends it at
// once and cleanly (nil, the listener closed), instead of after the start-up timeout.
func TestRunStopsWhileStarting(t *testing.T) {
	t.Parallel()
	_, prefix := testenv.Redis(t)
	env := serveEnv(t, prefix, map[string]string{
		"DATABASE_URL":             "postgres://postgres@127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)) + "/stocksvc?sslmode=disable",
		"STOCKSVC_STARTUP_TIMEOUT": "10m",
	})
	in := launch(t, env)
	in.await(t, "listening")
	if _, err := in.Logs.wait(t.Context(), in.done, "waiting for dependency"); err != nil {
		t.Fatalf("%v; logs:\n%s", err, in.Logs)
	}
	if err := in.stop(t); err != nil {
		t.Fatalf("run = %v, want nil; logs:\n%s", err, in.Logs)
	}
	if _, ok := in.Logs.find("stopped before ready"); !ok {
		t.Errorf("no stopped before ready line; logs:\n%s", in.Logs)
	}
	if got := in.stops.Load(); got != 1 {
		t.Errorf("stopSignals called %d times, want once", got)
	}
	if conn, err := net.Dial("tcp", in.Addr); err == nil {
		conn.Close()
		t.Errorf("%s still accepts connections after run returned", in.Addr)
	}
}
