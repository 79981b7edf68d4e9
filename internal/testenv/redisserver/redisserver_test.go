package redisserver_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/testenv/redisserver"
)

// start starts a server for t, skipping without redis-server unless integration tests are
// required (STOCKSVC_REQUIRE_INTEGRATION=1, as in CI).
func start(t *testing.T) *redisserver.Server {
	t.Helper()
	srv, err := redisserver.Start(t.Context(), redisserver.Options{Dir: t.TempDir()})
	if errors.Is(err, redisserver.ErrNotInstalled) && os.Getenv("STOCKSVC_REQUIRE_INTEGRATION") != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(srv.Kill)
	return srv
}

func TestServerLifecycle(t *testing.T) {
	t.Parallel()
	srv := start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("SET: %v", err)
	}

	if err := srv.Pause(); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := rdb.Ping(pingCtx).Err()
	cancel()
	if err == nil {
		t.Fatal("a paused server answered PING")
	}
	if err := srv.Resume(); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if got, err := rdb.Get(ctx, "k").Result(); err != nil || got != "v" {
		t.Fatalf("GET after resume = %q, %v; want v", got, err)
	}

	port := srv.Port()
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if srv.Port() != port {
		t.Errorf("port after restart = %d, want %d", srv.Port(), port)
	}
	if err := rdb.Get(ctx, "k").Err(); !errors.Is(err, redis.Nil) {
		t.Errorf("GET after restart: %v, want redis.Nil (a restarted server is empty)", err)
	}

	if err := srv.Stop(5 * time.Second); err != nil {
		t.Errorf("Stop: %v", err)
	}
	if err := rdb.Ping(ctx).Err(); err == nil {
		t.Error("a stopped server answered PING")
	}
}

func TestStartRefusesWithoutDir(t *testing.T) {
	t.Parallel()
	if _, err := redisserver.Start(t.Context(), redisserver.Options{}); err == nil {
		t.Fatal("Start without a Dir: nil error")
	}
}
