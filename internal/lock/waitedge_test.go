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

// TestWaitCancelledWhileQueued cancels waiters while they wait: each gives up with the
// context's error, leaves the queue, and the waiters behind it still get the lock in turn.
func TestWaitCancelledWhileQueued(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		waiters   int
		cancelled []int // indexes of the waiters cancelled while queued
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
			c := newWaitingClient(t, rdb, prefix, nil)
			name := lockName(prefix, "cancelled")
			holder := obtain(t, c, name, time.Minute, &lock.Options{Wait: true})
			waiters := make([]*queuedWaiter, tt.waiters)
			for i := range waiters {
				waiters[i] = startWaiter(t, c, name, time.Minute)
				waitFor(t, func() bool { return lock.QueueLen(c, name) == i+1 })
			}
			for n, i := range tt.cancelled {
				waiters[i].cancel()
				if _, err := waiters[i].result(); !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled waiter %d: %v, want context.Canceled", i, err)
				}
				if got, want := lock.QueueLen(c, name), tt.waiters-n-1; got != want {
					t.Errorf("queue holds %d waiters after cancelling %d, want %d", got, i, want)
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
			// The queue is idle again: a newcomer gets the lock at once.
			release(t, obtain(t, c, name, time.Minute, &lock.Options{Wait: true}))
		})
	}
}

// TestWaitCancelledHeadOfAnotherClient cancels the waiter of client B that contends in Redis
// (it is recorded among the lock's waiters) while A holds the lock: B's next waiter takes
// over and gets the lock when A releases it.
func TestWaitCancelledHeadOfAnotherClient(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	a, b := newWaitingClient(t, rdb, prefix, nil), newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "head")
	holder := obtain(t, a, name, time.Minute, &lock.Options{Wait: true})
	head := startWaiter(t, b, name, time.Minute)
	waitFor(t, func() bool { return exists(t, rdb, name+":waiters") })
	second := startWaiter(t, b, name, time.Minute)
	waitFor(t, func() bool { return lock.QueueLen(b, name) == 1 })

	head.cancel()
	if _, err := head.result(); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled head: %v, want context.Canceled", err)
	}
	waitFor(t, func() bool { return lock.QueueLen(b, name) == 0 }) // second contends now
	release(t, holder)
	l, err := second.result()
	if err != nil {
		t.Fatalf("second waiter: %v", err)
	}
	release(t, l)
	if exists(t, rdb, name) {
		t.Error("lock still held after every holder released it")
	}
}

// TestWaitCancelledAsGranted cancels a waiter just as the holder grants it its turn: Redis is
// paused while the holder's release is in flight, so the grant is promised but not yet
// delivered when the waiter gives up. The waiter must pass the turn on — the lock if it was
// handed off, the right to contend otherwise — so the waiter behind it gets the lock and no
// lock is left held.
func TestWaitCancelledAsGranted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// otherClient records a waiter of another client, so the holder releases to Redis
		// instead of handing the lock off, and the cancelled waiter holds a right to contend.
		otherClient bool
	}{
		{name: "handed off"},
		{name: "released for another client", otherClient: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			rdb := srv.Client()
			c := newWaitingClient(t, rdb, "", nil)
			other := newWaitingClient(t, rdb, "", nil)
			// The waiter may receive its grant before it sees its context cancelled (its
			// select picks either); try until the cancellation came first at least once.
			hit := false
			attempt := 0
			for ; attempt < 20 && !hit; attempt++ {
				name := lockName("", "granted-"+string(rune('a'+attempt)))
				holder := obtain(t, c, name, time.Minute, &lock.Options{Wait: true})
				var otherWaiter *queuedWaiter
				if tt.otherClient {
					otherWaiter = startReleasingWaiter(t, other, name, time.Minute)
					waitFor(t, func() bool { return exists(t, rdb, name+":waiters") })
				}
				first := startWaiter(t, c, name, time.Minute)
				waitFor(t, func() bool { return lock.QueueLen(c, name) == 1 })
				second := startReleasingWaiter(t, c, name, time.Minute)
				waitFor(t, func() bool { return lock.QueueLen(c, name) == 2 })

				srv.Pause()
				released := make(chan error, 1)
				go func() { released <- holder.Release(context.Background()) }()
				// The holder has taken the first waiter off the queue and promised it the
				// turn; its script waits for Redis.
				waitFor(t, func() bool { return lock.QueueLen(c, name) == 1 })
				first.cancel()
				srv.Resume()
				if err := <-released; err != nil {
					t.Fatalf("holder's Release: %v", err)
				}

				l, err := first.result()
				switch {
				case errors.Is(err, context.Canceled):
					hit = true
				case err == nil:
					release(t, l) // the grant won the race: an ordinary turn
				default:
					t.Fatalf("first waiter: %v", err)
				}
				if otherWaiter != nil {
					if _, err := otherWaiter.result(); err != nil {
						t.Fatalf("other client's waiter: %v", err)
					}
				}
				if _, err := second.result(); err != nil {
					t.Fatalf("second waiter, behind the cancelled one: %v", err)
				}
				if exists(t, rdb, name) {
					t.Fatalf("lock still held after every holder released it")
				}
			}
			if !hit {
				t.Error("the waiter never saw its cancellation before its grant: the case went untested")
			}
			t.Logf("cancellation came first at attempt %d", attempt)
		})
	}
}

// TestWaitCloseWithWaiters closes a client while its waiters wait: Close returns, and the
// waiters, deaf to release announcements now, still get the lock in turn when the holder's
// lease timer wakes them.
func TestWaitCloseWithWaiters(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "closed")
	// Long enough for the waiters to queue up behind it, short enough to wait for.
	holder := obtain(t, lock.New(rdb), name, time.Second, nil)
	waiters := make([]*queuedWaiter, 3)
	for i := range waiters {
		waiters[i] = startWaiter(t, c, name, time.Minute)
		// In this order: the first contends (and is recorded in Redis), the others queue.
		waitFor(t, func() bool { return exists(t, rdb, name+":waiters") && lock.QueueLen(c, name) == i })
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
	// A closed client still waits, on timers alone.
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
// name — it hears no release announcement — still obtains the lock, woken by the holder's
// lease timer.
func TestWaitNamespace(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		namespace func(prefix string) string
		lease     time.Duration
	}{
		{name: "matching namespace, long lease", namespace: func(p string) string { return p }, lease: time.Minute},
		{name: "other namespace, short lease", namespace: func(string) string { return "elsewhere:" }, lease: time.Second},
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
				// Far below the long lease: only an announcement can beat it.
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
// stalled Redis ran late) for longer than a waiter waits, and this client's requests keep
// arriving, one every 40 ms, each waiting 1 s: after the first, every head gets its turn with
// about 40 ms left. Each takes over the listed ticket; if it only waited to be given the lock,
// none would look again and every request would fail as long as requests kept coming, long after
// the lease ran out (what a black-box run saw after a Redis stall). A head that has heard nothing
// from Redis for a recheck looks.
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
