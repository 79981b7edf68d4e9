package main

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// holdUpMigration rolls the database at databaseURL back to the version before
// asyncOrdersMigration and holds a lock on idempotency_keys, which that migration alters:
// migrating it again waits for the lock until release is called (or the test ends).
func holdUpMigration(t *testing.T, databaseURL string) (release func()) {
	t.Helper()
	for {
		if v, _ := schemaVersion(t, databaseURL); v < asyncOrdersMigration {
			break
		}
		if _, err := migrateCmd(t, databaseURL, "down", "1"); err != nil {
			t.Fatalf("migrate down 1: %v", err)
		}
	}
	conn, err := pgx.Connect(context.Background(), databaseURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	tx, err := conn.Begin(context.Background())
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(context.Background(), `LOCK TABLE idempotency_keys IN ACCESS SHARE MODE`); err != nil {
		t.Fatalf("lock idempotency_keys: %v", err)
	}
	released := false
	release = func() {
		if !released {
			released = true
			_ = tx.Rollback(context.Background())
			_ = conn.Close(context.Background())
		}
	}
	t.Cleanup(release)
	return release
}

// schemaVersion reads golang-migrate's record of the schema version.
func schemaVersion(t *testing.T, databaseURL string) (version int64, dirty bool) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), databaseURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(context.Background(), `SELECT version, dirty FROM schema_migrations`).Scan(&version, &dirty); err != nil {
		t.Fatalf("read the schema version: %v", err)
	}
	return version, dirty
}

// TestRunStartsWithoutRedis starts a replica while Redis — or a quorum of the Redlock's nodes
// — is down: it turns ready once Postgres answers and is migrated (readiness asks Postgres
// only), warns that it runs without Redis, answers orders 503, and sells once Redis answers.
func TestRunStartsWithoutRedis(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{"single", "redlock"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			servers := []*testenv.RedisServer{testenv.StartRedis(t)}
			if mode == "redlock" {
				servers = append(servers, testenv.StartRedis(t), testenv.StartRedis(t))
			}
			redisURL := "redis://" + servers[0].Addr() + "/0"
			for i, s := range servers[1:] {
				sep := "&"
				if i == 0 {
					sep = "?"
				}
				redisURL += sep + "addr=" + s.Addr()
			}
			down := servers[:len(servers)/2+1] // a quorum of the nodes, or the one server
			for _, s := range down {
				s.Kill()
			}
			env := serveEnv(t, testenv.KeyPrefix(t), map[string]string{
				"REDIS_URL":                redisURL,
				"STOCKSVC_REDIS_MODE":      mode,
				"STOCKSVC_STARTUP_TIMEOUT": "2s", // shorter than the test's wait for ready
			})
			in := launch(t, env)
			in.await(t, "ready")

			warning, ok := in.Logs.find("starting without redis: orders and restocks answer 503 until it answers, product reads come from postgres")
			if !ok || warning["level"] != "WARN" || warning["redis_mode"] != mode {
				t.Errorf("warning = %v (found %v), want a WARN line naming redis_mode %q; logs:\n%s", warning, ok, mode, in.Logs)
			}
			if res := in.call(t, http.MethodGet, "/readyz", nil, nil); res.Status != http.StatusOK {
				t.Errorf("GET /readyz without redis: status %d, want 200: %s", res.Status, res.Body)
			}
			var id int64
			conn, err := pgx.Connect(t.Context(), env["DATABASE_URL"])
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer conn.Close(context.Background())
			if err := conn.QueryRow(t.Context(), `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('no-redis', 'x', 5, 5) RETURNING id`).Scan(&id); err != nil {
				t.Fatalf("create product: %v", err)
			}
			order := map[string]any{"customer_id": "c", "items": []map[string]any{{"product_id": id, "quantity": 1}}}
			if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusServiceUnavailable {
				t.Errorf("order without redis: status %d, want 503: %s", res.Status, res.Body)
			}

			for _, s := range down {
				s.Restart()
			}
			if _, err := in.Logs.wait(t.Context(), in.done, "dependency answered"); err != nil {
				t.Fatalf("%v; logs:\n%s", err, in.Logs)
			}
			if res := in.call(t, http.MethodPost, "/v1/orders", order, nil); res.Status != http.StatusCreated {
				t.Errorf("order once redis answers: status %d, want 201: %s", res.Status, res.Body)
			}
			if err := in.stop(t); err != nil {
				t.Fatalf("run = %v, want nil; logs:\n%s", err, in.Logs)
			}
		})
	}
}

// TestRunMigrationsHonourStop holds a migration up on a lock: a stop signal ends start-up
// cleanly, and the start-up deadline ends it with an error naming the migrations, in either
// case within the migration's lock wait rather than whenever the lock is let go; and the
// schema is left as it was, not marked dirty.
func TestRunMigrationsHonourStop(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		timeout string
		stop    bool
		want    string // in run's error; "" for nil
	}{
		{"stop signal", "10m", true, ""},
		{"start-up deadline", "3s", false, "migrations not done within the start-up timeout (3s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, prefix := testenv.Redis(t)
			env := serveEnv(t, prefix, map[string]string{"STOCKSVC_STARTUP_TIMEOUT": tt.timeout})
			holdUpMigration(t, env["DATABASE_URL"])
			in := launch(t, env)
			if tt.stop {
				// The first attempt has waited out its lock_timeout: the migration is running.
				wctx, cancel := context.WithTimeout(t.Context(), startTimeout)
				_, err := in.Logs.wait(wctx, in.done, "migrations waited too long for a lock; trying again")
				cancel()
				if err != nil {
					t.Fatalf("%v; logs:\n%s", err, in.Logs)
				}
				in.cancel()
			}
			// Generous: the lock is never let go, so a run that does not honour its context
			// does not return at all.
			select {
			case <-in.done:
			case <-time.After(startTimeout):
				t.Fatalf("run did not return within %v while a migration waits for a lock; logs:\n%s", startTimeout, in.Logs)
			}
			switch {
			case tt.want == "" && in.err != nil:
				t.Errorf("run = %v, want nil; logs:\n%s", in.err, in.Logs)
			case tt.want != "" && (in.err == nil || !strings.Contains(in.err.Error(), tt.want) || !strings.Contains(in.err.Error(), "lock timeout")):
				t.Errorf("run = %v, want an error containing %q and the lock timeout; logs:\n%s", in.err, tt.want, in.Logs)
			}
			if tt.stop {
				if _, ok := in.Logs.find("stopped before ready"); !ok {
					t.Errorf("no stopped before ready line; logs:\n%s", in.Logs)
				}
			}
			if v, dirty := schemaVersion(t, env["DATABASE_URL"]); v != asyncOrdersMigration-1 || dirty {
				t.Errorf("schema at version %d (dirty %t), want %d, clean", v, dirty, asyncOrdersMigration-1)
			}
		})
	}
}

// TestMigrateUpLockTimeout: "migrate up" waiting for a lock gives up after the migration
// connection's lock_timeout, leaves the schema where it was (not dirty), and succeeds once the
// lock is free.
func TestMigrateUpLockTimeout(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	release := holdUpMigration(t, url)
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		var stdout strings.Builder
		err := run(context.Background(), func() {}, []string{"migrate", "up"}, envOf(map[string]string{"DATABASE_URL": url}),
			stdio{stdout: &stdout, stderr: newLogSink()})
		done <- result{stdout.String(), err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(startTimeout):
		release() // lets a migration without a lock_timeout finish, so that the goroutine ends
		<-done
		t.Fatalf("migrate up still waiting for the lock after %v", startTimeout)
	}
	if r.err == nil || !strings.Contains(r.err.Error(), "lock timeout") || !strings.Contains(r.err.Error(), fmt.Sprintf("the schema is still at version %d", asyncOrdersMigration-1)) {
		t.Errorf("migrate up = %v, want the lock timeout, and the schema said to be at %d", r.err, asyncOrdersMigration-1)
	}
	if strings.Contains(fmt.Sprint(r.err), "CREATE TABLE") {
		t.Errorf("migrate up error quotes the migration's SQL: %v", r.err)
	}
	if v, dirty := schemaVersion(t, url); v != asyncOrdersMigration-1 || dirty {
		t.Errorf("schema at version %d (dirty %t), want %d, clean", v, dirty, asyncOrdersMigration-1)
	}
	release()
	mustMigrate(t, url, "migrate up: done, "+strings.TrimSuffix(atLatest, "\n")+"\n", "up")
}

func TestMigrationURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"postgres://u:p@h:5432/db", "postgres://u:p@h:5432/db?lock_timeout=5s"},
		{"postgres://u:p@h/db?sslmode=disable", "postgres://u:p@h/db?sslmode=disable&lock_timeout=5s"},
		{"postgres://u:p%2F@h/db?", "postgres://u:p%2F@h/db?lock_timeout=5s"},
		{"postgres://h/db?lock_timeout=1s", "postgres://h/db?lock_timeout=1s"},
		{"postgres://h/db?options=-c%20lock_timeout%3D1s", "postgres://h/db?options=-c%20lock_timeout%3D1s"},
		{"host=h dbname=db user=u", "postgres:///db?dbname=db&host=h&user=u&lock_timeout=5s"},
	}
	for _, tt := range tests {
		if got := migrationURL(tt.in); got != tt.want {
			t.Errorf("migrationURL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}
