package ratelimitredis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/ratelimit"
	"github.com/stocksvc/stocksvc/internal/ratelimit/ratelimitredis"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestLimitHoldsAcrossLimiters: two limiters on one Redis and prefix — two replicas — share
// each key's events; Blocked looks without counting; the key earns its events back.
func TestLimitHoldsAcrossLimiters(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	limit := ratelimit.Limit{Events: 5, Per: time.Second, Burst: 2}
	a, b := ratelimitredis.New(rdb, prefix, limit), ratelimitredis.New(rdb, prefix, limit)
	ctx := context.Background()
	for i, l := range []*ratelimitredis.Limiter{a, b} {
		if wait, err := l.Take(ctx, "k"); err != nil || wait != 0 {
			t.Fatalf("event %d: wait %v, %v; want counted", i+1, wait, err)
		}
	}
	for i := range 3 {
		if wait, err := a.Blocked(ctx, "k"); err != nil || wait <= 0 || wait > 200*time.Millisecond {
			t.Fatalf("Blocked %d: %v, %v; want at most the 200ms interval", i+1, wait, err)
		}
	}
	wait, err := b.Take(ctx, "k")
	if err != nil || wait <= 0 {
		t.Fatalf("third event on the other limiter: wait %v, %v; want refused", wait, err)
	}
	if wait, err := a.Blocked(ctx, "other"); err != nil || wait != 0 {
		t.Fatalf("another key: Blocked %v, %v; want 0", wait, err)
	}
	testenv.Poll(t, 5*time.Second, "the key earns an event back", func() bool {
		wait, err := a.Blocked(ctx, "k")
		return err == nil && wait == 0
	})
	if wait, err := b.Take(ctx, "k"); err != nil || wait != 0 {
		t.Fatalf("after the interval: wait %v, %v; want counted", wait, err)
	}
}

// TestRedisDown: a Redis that does not answer decides nothing.
func TestRedisDown(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: testenv.DeadEndpoint(t), MaxRetries: -1})
	defer rdb.Close()
	l := ratelimitredis.New(rdb, "p:", ratelimit.Limit{Events: 1, Per: time.Second, Burst: 1})
	if _, err := l.Take(context.Background(), "k"); !errors.Is(err, ratelimitredis.ErrUnavailable) {
		t.Fatalf("Take: %v, want ErrUnavailable", err)
	}
	if _, err := l.Blocked(context.Background(), "k"); !errors.Is(err, ratelimitredis.ErrUnavailable) {
		t.Fatalf("Blocked: %v, want ErrUnavailable", err)
	}
}
