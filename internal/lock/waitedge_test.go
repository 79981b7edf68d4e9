package lock_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// queuedWaiter is an Obtain with Options.Wait running in its own goroutine.
type queuedWaiter struct {
	cancel context.CancelFunc
	done   chan struct{}
	lock   *lock.Lock
	err    error
}

// startWaiter starts an Obtain with Options.Wait of name on c. It is cancelled, and waited
// for, when the test ends, if it has not returned by then.
func startWaiter(t *testing.T, c *lock.Client, name string, ttl time.Duration) *queuedWaiter {
	t.Helper()
	return startWaiterThen(t, c, name, ttl, false)
}

// startReleasingWaiter is startWaiter for a waiter that releases the lock as soon as it has it,
// so that waiters can be collected in any order; its result is then a nil lock.
func startReleasingWaiter(t *testing.T, c *lock.Client, name string, ttl time.Duration) *queuedWaiter {
	t.Helper()
	return startWaiterThen(t, c, name, ttl, true)
}

func startWaiterThen(t *testing.T, c *lock.Client, name string, ttl time.Duration, releaseAtOnce bool) *queuedWaiter {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	w := &queuedWaiter{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		w.lock, w.err = c.Obtain(ctx, name, ttl, &lock.Options{Wait: true})
		if w.err == nil && releaseAtOnce {
			w.err = w.lock.Release(ctx)
			w.lock = nil
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.done
	})
	return w
}

// result waits for the waiter's Obtain to return.
func (w *queuedWaiter) result() (*lock.Lock, error) {
	<-w.done
	return w.lock, w.err
}

// TestWaitCancelledWhileQueued cancels waiters of two clients while they wait in line: each
// gives up with the context's error and takes its entry out of the line, and the waiters behind
// it still get the lock in turn.
func TestWaitCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		waiters   int
		cancelled []int // indexes of the waiters cancelled while in line
	}{
		{name: "the middle one", waiters: 3, cancelled: []int{1}},
		{name: "the last one", waiters: 3, cancelled: []int{2}},
		{name: "the first one", waiters: 3, cancelled: []int{0}},
		{name: "all but one", waiters: 4, cancelled: []int{0, 1, 3}},
		{name: "all", waiters: 2, cancelled: []int{0, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			clients := []*lock.Client{newWaitingClient(t, rdb, prefix, nil), newWaitingClient(t, rdb, prefix, nil)}
			name := lockName(prefix, "cancelled")
			line := name + ":waiters"
			holder := obtain(t, clients[0], name, time.Minute, &lock.Options{Wait: true})
			waiters := make([]*queuedWaiter, tt.waiters)
			for i := range waiters {
				waiters[i] = startWaiter(t, clients[i%2], name, time.Minute)
				waitFor(t, func() bool { return listLen(t, rdb, line) == int64(i+1) })
			}
			for n, i := range tt.cancelled {
				waiters[i].cancel()
				if _, err := waiters[i].result(); !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled waiter %d: %v, want context.Canceled", i, err)
				}
				if got, want := listLen(t, rdb, line), int64(tt.waiters-n-1); got != want {
					t.Errorf("%d waiters in line after cancelling %d, want %d", got, i, want)
				}
			}
			release(t, holder)
			for i, w := range waiters {
				if slices.Contains(tt.cancelled, i) {
					continue
				}
				l, err := w.result()
				if err != nil {
					t.Fatalf("waiter %d: %v", i, err)
				}
				release(t, l)
			}
			if exists(t, rdb, name) {
				t.Error("lock still held after every holder released it")
			}
			// Nothing is left in the way: a newcomer gets the lock at once.
			release(t, obtain(t, clients[1], name, time.Minute, nil))
		})
	}
}

// TestWaitCloseWithWaiters closes a client while its waiters wait: Close returns, and the
// waiters, deaf to grant messages now, still get the lock in turn, finding it given to them
// when they look again.
func TestWaitCloseWithWaiters(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "closed")
	holder := obtain(t, lock.New(rdb), name, time.Minute, nil)
	waiters := make([]*queuedWaiter, 3)
	for i := range waiters {
		waiters[i] = startWaiter(t, c, name, time.Minute)
		waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == int64(i+1) })
	}

	if err := c.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	release(t, holder) // announced, but no one of c listens any more
	for i, w := range waiters {
		l, err := w.result()
		if err != nil {
			t.Fatalf("waiter %d after Close: %v", i, err)
		}
		release(t, l)
	}
	// A closed client still waits, looking again now and then.
	holder = obtain(t, lock.New(rdb), name, 200*time.Millisecond, nil)
	late := startWaiter(t, c, name, time.Minute)
	l, err := late.result()
	if err != nil {
		t.Fatalf("waiter that started after Close: %v", err)
	}
	release(t, l)
	if err := holder.Release(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("expired holder's Release = %v, want ErrNotHeld", err)
	}
}

// TestWaitNamespace checks that a waiter of a client whose namespace does not cover the lock's
// name — it hears no grant message — still obtains the lock when it looks again.
func TestWaitNamespace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		namespace func(prefix string) string
		lease     time.Duration
	}{
		{name: "matching namespace, long lease", namespace: func(p string) string { return p }, lease: time.Minute},
		{name: "other namespace", namespace: func(string) string { return "elsewhere:" }, lease: time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb, lock.WithNamespace(tt.namespace(prefix)))
			defer c.Close()
			name := lockName(prefix, "namespaced")
			holder := obtain(t, lock.New(rdb), name, tt.lease, nil)
			var wg sync.WaitGroup
			var l *lock.Lock
			var err error
			wg.Go(func() {
				// Far below the lease: the holder's grant (heard, or found) must be what
				// gives the waiter the lock.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, err = c.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
			})
			waitFor(t, func() bool { return exists(t, rdb, name+":waiters") })
			release(t, holder)
			wg.Wait()
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			release(t, l)
		})
	}
}

// TestShortTurnsStillLook: the lock is held under a token nobody will release (an attempt a
// stalled Redis ran late) for longer than a waiter waits, and requests keep arriving, one every
// 40 ms, each waiting 1 s. Nobody will ever announce a grant; each waiter must look again on
// its own (at the holder's remaining lease, or every 200 ms) for one of them to take the lock
// once the lease runs out — what a black-box run saw fail after a Redis stall, when waiters
// handed their place in line on without looking.
func TestShortTurnsStillLook(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "short-turns")
	if err := rdb.Set(t.Context(), name, "nobody", 2*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	wait := &lock.Options{Wait: true}
	var obtained atomic.Int32
	var wg sync.WaitGroup
	arrivals := time.NewTicker(40 * time.Millisecond) // the load's arrival schedule
	defer arrivals.Stop()
	for range 75 { // 3 s of requests; the lease runs out after 2 s
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			l, err := c.Obtain(ctx, name, time.Minute, wait)
			if err == nil {
				obtained.Add(1)
				_ = l.Release(context.Background())
			}
		})
		<-arrivals.C
	}
	wg.Wait()
	if obtained.Load() == 0 {
		t.Fatal("no request got the lock, although its lease ran out a second before the last one arrived")
	}
}
