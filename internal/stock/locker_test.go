package stock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestWithLocksRedisDownIsUnavailable: when Redis stops answering, an order is told the
// service is unavailable (503), not that the product is busy (429) — also the first orders,
// whose client spends longer than the wait budget retrying its dials (go-redis's defaults,
// as a library user would have them) before it gives up.
func TestWithLocksRedisDownIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = rdb.Close() })
	locks := lock.New(rdb)
	t.Cleanup(func() { _ = locks.Close() })
	locker := stock.NewRedisLocker(locks, stock.LockConfig{})
	ctx := context.Background()
	var ran atomic.Int64
	work := func(context.Context, []int64) error { ran.Add(1); return nil }
	if err := locker.WithLocks(ctx, []string{"product:{1}"}, work); err != nil {
		t.Fatalf("WithLocks with Redis up: %v", err)
	}

	srv.Kill()
	for attempt := range 2 {
		err := locker.WithLocks(ctx, []string{"product:{1}"}, work)
		if !errors.Is(err, stock.ErrUnavailable) || errors.Is(err, stock.ErrBusy) {
			t.Errorf("attempt %d with Redis down: %v, want ErrUnavailable and not ErrBusy", attempt+1, err)
		}
	}
	// A crowd on one product: those queued behind the attempt that fails are told the same.
	errs := make([]error, 12)
	var wg sync.WaitGroup
	for i := range errs {
		wg.Go(func() { errs[i] = locker.WithLocks(ctx, []string{"product:{1}"}, work) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, stock.ErrUnavailable) || errors.Is(err, stock.ErrBusy) {
			t.Errorf("concurrent order %d with Redis down: %v, want ErrUnavailable and not ErrBusy", i, err)
		}
	}
	if n := ran.Load(); n != 1 {
		t.Errorf("the work ran %d times, want once (only while Redis was up)", n)
	}

	// Back up, orders go through again, with no restart of the service. (This also lets the
	// client's background redial end, which it does only on success.)
	srv.Restart()
	var last error
	testenv.Poll(t, 30*time.Second, "orders to go through once Redis is back", func() bool {
		last = locker.WithLocks(ctx, []string{"product:{1}"}, work)
		return last == nil
	})
	if n := ran.Load(); n != 2 {
		t.Errorf("the work ran %d times, want twice (last error %v)", n, last)
	}
}
