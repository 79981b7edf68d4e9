package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// observed is what a countingObserver counted.
type observed struct {
	Obtained, Contended, NotObtained, Lost, RefreshFailed int64
}

func (o *countingObserver) snapshot() observed {
	return observed{
		Obtained: o.obtained.Load(), Contended: o.contended.Load(), NotObtained: o.notObtained.Load(),
		Lost: o.lost.Load(), RefreshFailed: o.refreshFailed.Load(),
	}
}

// TestObserver drives a client through each event and checks what its Observer was told.
func TestObserver(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// run uses c, whose events are counted; other is a client of the same Redis (rdb)
		// that reports to no one.
		run  func(t *testing.T, c, other *lock.Client, rdb *redis.Client, name string)
		want observed
	}{
		{
			name: "obtained at once",
			run: func(t *testing.T, c, _ *lock.Client, _ *redis.Client, name string) {
				release(t, obtain(t, c, name, time.Minute, nil))
			},
			want: observed{Obtained: 1},
		},
		{
			name: "obtained after polling",
			run: func(t *testing.T, c, other *lock.Client, rdb *redis.Client, name string) {
				holder := obtain(t, other, name, time.Minute, nil)
				retry := newSignalRetry(lock.Fixed(5 * time.Millisecond))
				failed := func() bool {
					select {
					case <-retry.failed:
						return true
					default:
						return false
					}
				}
				l := obtainWhile(t, func(ctx context.Context) (*lock.Lock, error) {
					return c.Obtain(ctx, name, time.Minute, &lock.Options{Retry: retry})
				}, failed, func() { release(t, holder) })
				release(t, l)
			},
			want: observed{Obtained: 1, Contended: 1},
		},
		{
			name: "obtained after waiting",
			run: func(t *testing.T, c, other *lock.Client, rdb *redis.Client, name string) {
				holder := obtain(t, other, name, time.Minute, nil)
				// The waiter is recorded in Redis once it has found the lock held.
				recorded := func() bool { return exists(t, rdb, name+":waiters") }
				l := obtainWhile(t, func(ctx context.Context) (*lock.Lock, error) {
					return c.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
				}, recorded, func() { release(t, holder) })
				release(t, l)
			},
			want: observed{Obtained: 1, Contended: 1},
		},
		{
			name: "not obtained",
			run: func(t *testing.T, c, other *lock.Client, rdb *redis.Client, name string) {
				holder := obtain(t, other, name, time.Minute, nil)
				defer release(t, holder)
				if _, err := c.Obtain(t.Context(), name, time.Minute, nil); !errors.Is(err, lock.ErrNotObtained) {
					t.Fatalf("Obtain = %v, want ErrNotObtained", err)
				}
				// A cancelled wait is the caller's decision, not a lock that could not be had.
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				if _, err := c.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true}); !errors.Is(err, context.Canceled) {
					t.Fatalf("Obtain with a cancelled context = %v, want context.Canceled", err)
				}
			},
			want: observed{NotObtained: 1},
		},
		{
			// What was once a handoff within a client is now a turn like any other.
			name: "given the lock by a holder of the same client",
			run: func(t *testing.T, c, _ *lock.Client, rdb *redis.Client, name string) {
				holder := obtain(t, c, name, time.Minute, &lock.Options{Wait: true})
				inLine := func() bool { return exists(t, rdb, name+":waiters") }
				l := obtainWhile(t, func(ctx context.Context) (*lock.Lock, error) {
					return c.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
				}, inLine, func() { release(t, holder) })
				release(t, l)
			},
			want: observed{Obtained: 2, Contended: 1},
		},
		{
			name: "lost, found by Refresh",
			run: func(t *testing.T, c, other *lock.Client, rdb *redis.Client, name string) {
				l := obtain(t, c, name, time.Minute, nil)
				del(t, rdb, name)
				if err := l.Refresh(t.Context(), time.Minute); !errors.Is(err, lock.ErrNotHeld) {
					t.Fatalf("Refresh = %v, want ErrNotHeld", err)
				}
			},
			want: observed{Obtained: 1, Lost: 1},
		},
		{
			name: "lost, found by Release",
			run: func(t *testing.T, c, other *lock.Client, rdb *redis.Client, name string) {
				l := obtain(t, c, name, time.Minute, nil)
				del(t, rdb, name)
				if err := l.Release(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
					t.Fatalf("Release = %v, want ErrNotHeld", err)
				}
			},
			want: observed{Obtained: 1, Lost: 1},
		},
		{
			name: "lost, found by WithLocks",
			run: func(t *testing.T, c, other *lock.Client, rdb *redis.Client, name string) {
				err := withLock(t.Context(), c, name, 600*time.Millisecond, func(ctx context.Context, _ *lock.Lock) error {
					del(t, rdb, name)
					<-ctx.Done() // the next refresh finds the lock gone
					return ctx.Err()
				}, nil)
				if !errors.Is(err, lock.ErrNotHeld) {
					t.Fatalf("WithLocks = %v, want ErrNotHeld", err)
				}
			},
			want: observed{Obtained: 1, Lost: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			obs := &countingObserver{}
			c := newWaitingClient(t, rdb, prefix, obs)
			tt.run(t, c, lock.New(rdb), rdb, lockName(prefix, "observed"))
			if diff := cmp.Diff(obs.snapshot(), tt.want); diff != "" {
				t.Errorf("observed (-got +want):\n%s", diff)
			}
		})
	}
}

// TestObserverRefreshFailed refreshes a lock while Redis is down: the observer hears that the
// refresh failed, and not that the lock was lost.
func TestObserverRefreshFailed(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	obs := &countingObserver{}
	c := lock.New(srv.Client(), lock.WithObserver(obs))
	l := obtain(t, c, lockName("", "down"), time.Minute, nil)
	srv.Kill()

	err := l.Refresh(t.Context(), time.Minute)

	if err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Refresh with Redis down = %v, want the connection error", err)
	}
	if diff := cmp.Diff(obs.snapshot(), observed{Obtained: 1, RefreshFailed: 1}); diff != "" {
		t.Errorf("observed (-got +want):\n%s", diff)
	}
}

// obtainWhile runs obtain in a goroutine, calls then once ready holds (polled), and returns the
// lock obtain got. It fails the test if obtain returned before ready.
func obtainWhile(t *testing.T, obtain func(ctx context.Context) (*lock.Lock, error), ready func() bool, then func()) *lock.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	var l *lock.Lock
	var err error
	done := make(chan struct{})
	wg.Go(func() {
		defer close(done)
		l, err = obtain(ctx)
	})
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for !ready() {
		select {
		case <-done:
			t.Fatalf("Obtain returned before the test was ready: %v", err)
		case <-ctx.Done():
			wg.Wait()
			t.Fatal("not ready within 10s")
		case <-tick.C:
		}
	}
	then()
	wg.Wait()
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	return l
}

func release(t *testing.T, l *lock.Lock) {
	t.Helper()
	if err := l.Release(context.Background()); err != nil {
		t.Fatalf("Release: %v", err)
	}
}
