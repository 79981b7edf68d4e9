package stocklock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestWithLocksRedisFailureIsUnavailable: when Redis fails, an order is told the service is
// unavailable (503), never that the product is busy (429): with Redis gone (refused connections,
// however long the client spends retrying its dials with go-redis's defaults, as a library user
// would have them) and with Redis paused (connections taken, nothing answered) — for orders one
// at a time and for a crowd on one product. Once Redis is back, orders go through again without
// a new client.
func TestWithLocksRedisFailureIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		fail, recover func(*testenv.RedisServer)
	}{
		{"down", (*testenv.RedisServer).Kill, (*testenv.RedisServer).Restart},
		{"paused", (*testenv.RedisServer).Pause, (*testenv.RedisServer).Resume},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			locks := lock.New(srv.Client())
			t.Cleanup(func() { _ = locks.Close() })
			// A short lease: a paused server runs the unanswered attempts when it resumes.
			locker := stocklock.NewRedis(locks, stocklock.Config{Wait: time.Second, TTL: 2 * time.Second})
			ctx := context.Background()
			var ran atomic.Int64
			order := func() error {
				return locker.WithProducts(ctx, []int64{1}, func(context.Context, *stock.Grant) error { ran.Add(1); return nil })
			}
			if err := order(); err != nil {
				t.Fatalf("order with Redis up: %v", err)
			}

			tc.fail(srv)
			errs := []error{order(), order()}
			crowd := make([]error, 12)
			var wg sync.WaitGroup
			for i := range crowd {
				wg.Go(func() { crowd[i] = order() })
			}
			wg.Wait()
			for i, err := range append(errs, crowd...) {
				if !errors.Is(err, stock.ErrUnavailable) || errors.Is(err, stock.ErrBusy) {
					t.Errorf("order %d with Redis failing: %v, want ErrUnavailable and not ErrBusy", i, err)
				}
			}
			if n := ran.Load(); n != 1 {
				t.Errorf("the work ran %d times, want once (only while Redis was up)", n)
			}

			tc.recover(srv)
			testenv.Poll(t, 30*time.Second, "orders to go through once Redis is back", func() bool { return order() == nil })
		})
	}
}
