package stocklock_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// guard bounds a wait that only a broken locker would make long: it fails a hung test, it does
// not synchronise anything.
const guard = 10 * time.Second

var errGuard = errors.New("test guard: waited too long")

// TestName pins the names of product locks: replicas of two versions share the locks during a
// rolling upgrade only if both name them alike, and operators find them by this name.
func TestName(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		prefix string
		id     int64
		want   string
	}{
		{"stocksvc:", 42, "stocksvc:lock:product:{42}"},
		{"", 7, "lock:product:{7}"},
	} {
		if got := stocklock.Name(tt.prefix, tt.id); got != tt.want {
			t.Errorf("Name(%q, %d) = %q, want %q", tt.prefix, tt.id, got, tt.want)
		}
	}
}

// newLockClient returns a lock client under the test's key prefix, closed when the test ends,
// with the Redis client under it and the prefix.
func newLockClient(t *testing.T) (*lock.Client, *redis.Client, string) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb, lock.WithNamespace(prefix))
	t.Cleanup(func() { _ = c.Close() })
	return c, rdb, prefix
}

// TestRedisGrantCarriesFencesAndNotes takes products' locks twice: the grant has a fencing
// token per product, keyed by id whatever order the ids came in; what the first holder leaves
// is what the second is given, and a product the first left nothing for has no note.
func TestRedisGrantCarriesFencesAndNotes(t *testing.T) {
	t.Parallel()
	c, _, _ := newLockClient(t)
	locker := stocklock.NewRedis(c, stocklock.Config{})
	ctx := t.Context()

	var first *stock.Grant
	err := locker.WithProducts(ctx, []int64{3, 1, 2}, func(_ context.Context, g *stock.Grant) error {
		first = g
		g.Leave[1], g.Leave[3] = "10 4", "0 9"
		return nil
	})
	if err != nil {
		t.Fatalf("first WithProducts: %v", err)
	}
	if got := first.Notes; !cmp.Equal(got, map[int64]string{1: "", 2: "", 3: ""}) {
		t.Errorf("first holder's notes = %v, want none for each product", got)
	}

	err = locker.WithProducts(ctx, []int64{1, 2, 3}, func(_ context.Context, g *stock.Grant) error {
		if got, want := g.Notes, map[int64]string{1: "10 4", 2: "", 3: "0 9"}; !cmp.Equal(got, want) {
			t.Errorf("second holder's notes = %v, want what the first left, %v", got, want)
		}
		if got, want := slices.Sorted(maps.Keys(g.Fences)), slices.Sorted(maps.Keys(first.Fences)); !cmp.Equal(got, want) {
			t.Errorf("second grant fences products %v, first %v: want the same products", got, want)
		}
		for id, f := range g.Fences {
			if f <= first.Fences[id] {
				t.Errorf("product %d: second fence %d is not above the first %d", id, f, first.Fences[id])
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("second WithProducts: %v", err)
	}
}

// TestRedisBusy: a product whose lock another client holds for longer than the wait budget is
// busy (stock.ErrBusy with the budget as the hint), and the work never runs.
func TestRedisBusy(t *testing.T) {
	t.Parallel()
	c, _, prefix := newLockClient(t)
	held, err := c.Obtain(t.Context(), stocklock.Name(prefix, 7), time.Minute, nil)
	if err != nil {
		t.Fatalf("hold the lock elsewhere: %v", err)
	}
	defer held.Release(context.Background())
	const wait = 200 * time.Millisecond
	locker := stocklock.NewRedis(c, stocklock.Config{Wait: wait})

	ran := false
	err = locker.WithProducts(t.Context(), []int64{7}, func(context.Context, *stock.Grant) error { ran = true; return nil })

	var busy *stock.BusyError
	if !errors.As(err, &busy) || !errors.Is(err, stock.ErrBusy) || errors.Is(err, stock.ErrUnavailable) {
		t.Fatalf("WithProducts on a held product = %v, want a *BusyError matching ErrBusy only", err)
	}
	if busy.RetryAfter != wait {
		t.Errorf("RetryAfter = %v, want the wait budget %v", busy.RetryAfter, wait)
	}
	if ran {
		t.Error("the work ran without the lock")
	}
}

// TestLockLostIsErrLockLost loses a product's lock while the work runs, on one Redis and on a
// Redlock: the work's context is cancelled and the locker reports stock.ErrLockLost.
func TestLockLostIsErrLockLost(t *testing.T) {
	t.Parallel()
	const ttl = 600 * time.Millisecond // refreshed every 200ms: the loss is found fast
	tests := []struct {
		name string
		// start returns a locker and a function that takes the product's lock away from it.
		start func(t *testing.T) (stock.Locker, func(id int64))
	}{
		{name: "redis", start: func(t *testing.T) (stock.Locker, func(int64)) {
			c, rdb, prefix := newLockClient(t)
			return stocklock.NewRedis(c, stocklock.Config{TTL: ttl}), func(id int64) {
				if err := rdb.Del(context.Background(), stocklock.Name(prefix, id)).Err(); err != nil {
					t.Errorf("DEL: %v", err)
				}
			}
		}},
		{name: "redlock", start: func(t *testing.T) (stock.Locker, func(int64)) {
			nodes := testenv.StartRedisNodes(t, 3)
			return stocklock.NewRedlock(testenv.Redlock(t, nodes), "", stocklock.Config{TTL: ttl}), func(id int64) {
				for _, n := range nodes {
					if err := n.Client().Del(context.Background(), stocklock.Name("", id)).Err(); err != nil {
						t.Errorf("DEL on %s: %v", n.Addr(), err)
					}
				}
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			locker, takeAway := tt.start(t)

			err := locker.WithProducts(t.Context(), []int64{5}, func(ctx context.Context, _ *stock.Grant) error {
				takeAway(5)
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(guard):
					return errGuard
				}
			})

			if errors.Is(err, errGuard) {
				t.Fatalf("the work was not cancelled within %v of losing its lock", guard)
			}
			if !errors.Is(err, stock.ErrLockLost) {
				t.Errorf("WithProducts after the lock was lost = %v, want ErrLockLost", err)
			}
		})
	}
}

// TestRedlockBusyOrUnavailable takes a product's lock on a Redlock over five nodes: with two
// nodes down the work runs under a fencing token; with three down the locker reports
// stock.ErrUnavailable, never ErrBusy; with the lock held elsewhere on every node it reports
// ErrBusy. Only the first runs the work.
func TestRedlockBusyOrUnavailable(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		down    []int
		held    bool // the product's lock is held elsewhere on every node
		wantErr error
	}{
		{name: "all up"},
		{name: "two down", down: []int{1, 3}},
		{name: "three down", down: []int{0, 2, 4}, wantErr: stock.ErrUnavailable},
		{name: "held elsewhere", held: true, wantErr: stock.ErrBusy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			nodes := testenv.StartRedisNodes(t, 5)
			// Room for a few attempts on a loaded machine: with two nodes dead, half a second
			// was not always enough under the race detector beside other test packages.
			locker := stocklock.NewRedlock(testenv.Redlock(t, nodes), "", stocklock.Config{Wait: 3 * time.Second})
			for _, i := range tt.down {
				nodes[i].Kill()
			}
			if tt.held {
				l, err := testenv.Redlock(t, nodes).Obtain(t.Context(), stocklock.Name("", 1), time.Minute, nil)
				if err != nil {
					t.Fatalf("hold the lock elsewhere: %v", err)
				}
				defer l.Release(context.Background())
			}

			var fence int64
			ran := false
			err := locker.WithProducts(t.Context(), []int64{1}, func(_ context.Context, g *stock.Grant) error {
				ran, fence = true, g.Fences[1]
				for id, note := range g.Notes {
					if note != "" {
						t.Errorf("Redlock grant has the note %q for product %d, want none", note, id)
					}
				}
				return nil
			})

			if tt.wantErr == nil {
				if err != nil || !ran || fence <= 0 {
					t.Fatalf("WithProducts = %v, ran %v with fence %d; want the work run under a fencing token", err, ran, fence)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("WithProducts = %v, want %v", err, tt.wantErr)
			}
			if errors.Is(tt.wantErr, stock.ErrUnavailable) && errors.Is(err, stock.ErrBusy) {
				t.Errorf("WithProducts = %v: unreachable nodes reported as busy", err)
			}
			if ran {
				t.Error("the work ran without a quorum")
			}
		})
	}
}
