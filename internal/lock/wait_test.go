package lock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// countingObserver counts what a client reports.
type countingObserver struct {
	obtained, contended, notObtained, lost, refreshFailed atomic.Int64
}

func (o *countingObserver) Obtained(_ string, _ time.Duration, contended bool) {
	o.obtained.Add(1)
	if contended {
		o.contended.Add(1)
	}
}
func (o *countingObserver) NotObtained(string, time.Duration) { o.notObtained.Add(1) }
func (o *countingObserver) Lost(string)                       { o.lost.Add(1) }
func (o *countingObserver) RefreshFailed(string, error)       { o.refreshFailed.Add(1) }

func newWaitingClient(t *testing.T, rdb *redis.Client, prefix string, obs lock.Observer) *lock.Client {
	t.Helper()
	opts := []lock.Option{lock.WithNamespace(prefix)}
	if obs != nil {
		opts = append(opts, lock.WithObserver(obs))
	}
	c := lock.New(rdb, opts...)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// TestWaitMutualExclusionAcrossClients runs several clients (as several replicas would) with
// many waiters each on one hot lock: never two holders at once, every waiter served.
func TestWaitMutualExclusionAcrossClients(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		clients, perClient, rounds int
	}{{1, 32, 3}, {4, 8, 3}} {
		rdb, prefix := testenv.Redis(t)
		name := lockName(prefix, "hot")
		var inside, overlaps, done atomic.Int64
		var errs errorList
		var wg sync.WaitGroup
		obs := &countingObserver{}
		for range tc.clients {
			c := newWaitingClient(t, rdb, prefix, obs)
			for range tc.perClient {
				wg.Go(func() {
					for range tc.rounds {
						ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
						err := withLock(ctx, c, name, 5*time.Second, func(context.Context, *lock.Lock) error {
							if inside.Add(1) != 1 {
								overlaps.Add(1)
							}
							time.Sleep(200 * time.Microsecond) // the critical section's work
							inside.Add(-1)
							done.Add(1)
							return nil
						}, &lock.Options{Wait: true})
						cancel()
						if err != nil {
							errs.add(err)
						}
					}
				})
			}
		}
		wg.Wait()
		errs.report(t)
		want := int64(tc.clients * tc.perClient * tc.rounds)
		if overlaps.Load() != 0 || done.Load() != want {
			t.Errorf("%d clients: %d overlaps, %d of %d critical sections", tc.clients, overlaps.Load(), done.Load(), want)
		}
		t.Logf("%d clients × %d waiters × %d rounds: obtained %d (contended %d)",
			tc.clients, tc.perClient, tc.rounds, obs.obtained.Load(), obs.contended.Load())
	}
}

// TestWaitIsFairInArrivalOrder parks 12 waiters behind a holder, one after the other, and
// checks that they get the lock in the order they arrived, each given it by the one before with
// a larger fence — whether they all belong to one client (one replica's requests) or to
// several: every waiter has its own place in the lock's line.
func TestWaitIsFairInArrivalOrder(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		clients []int // the client of each waiter, in arrival order
	}{
		{"one client", []int{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}},
		{"three clients", []int{0, 1, 2, 0, 0, 1, 2, 2, 1, 0, 1, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			obs := &countingObserver{}
			clients := make([]*lock.Client, 3)
			for i := range clients {
				clients[i] = newWaitingClient(t, rdb, prefix, obs)
			}
			name := lockName(prefix, "fair")
			holder := obtain(t, clients[0], name, 10*time.Second, &lock.Options{Wait: true})
			var mu sync.Mutex
			var order []int
			var fences []int64
			var wg sync.WaitGroup
			var errs errorList
			for i, ci := range tc.clients {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					l, err := clients[ci].Obtain(ctx, name, 10*time.Second, &lock.Options{Wait: true})
					if err != nil {
						errs.add(err)
						return
					}
					mu.Lock()
					order = append(order, i)
					fences = append(fences, l.Fence())
					mu.Unlock()
					if err := l.Release(ctx); err != nil {
						errs.add(err)
					}
				})
				// The next waiter arrives only once this one is in line.
				waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == int64(i+1) })
			}
			release(t, holder)
			wg.Wait()
			errs.report(t)
			for i, got := range order {
				if got != i {
					t.Fatalf("turns went %v, want arrival order 0..%d", order, len(tc.clients)-1)
				}
			}
			prev := holder.Fence()
			for i, f := range fences {
				if f <= prev {
					t.Errorf("turn %d got fence %d, not above the previous %d", i, f, prev)
				}
				prev = f
			}
			if got, want := obs.snapshot(), (observed{Obtained: int64(len(tc.clients)) + 1, Contended: int64(len(tc.clients))}); got != want {
				t.Errorf("observed %+v, want %+v: the holder at once, every waiter after finding the lock held", got, want)
			}
			if exists(t, rdb, name) || exists(t, rdb, name+":waiters") {
				t.Errorf("lock or line still there after everyone released")
			}
		})
	}
}

// TestWaitWakesOnReleaseFromAnotherClient parks a waiter of one client behind a holder of
// another with a long lease: only the grant (its message, or found on a recheck) can give it the
// lock in time.
func TestWaitWakesOnReleaseFromAnotherClient(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	a, b := newWaitingClient(t, rdb, prefix, nil), newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "wake")
	held, err := a.Obtain(context.Background(), name, time.Minute, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		// A deadline far below the holder's minute-long lease: the timer fallback cannot be
		// what wakes this waiter.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := b.Obtain(ctx, name, time.Second, &lock.Options{Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, func() bool { return exists(t, rdb, name+":waiters") })
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter: %v", err)
	}
}

func TestWaitGivesUpAtDeadline(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "deadline")
	held := obtain(t, c, name, time.Minute, nil)
	defer held.Release(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			_, errs[i] = c.Obtain(ctx, name, time.Second, &lock.Options{Wait: true})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("waiter %d: Obtain = %v, want ErrNotObtained", i, err)
		}
	}
	// Each took its place in line back as it gave up.
	if n := listLen(t, rdb, name+":waiters"); n != 0 {
		t.Errorf("%d entries left in line after every waiter gave up", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Obtain(ctx, name, time.Second, &lock.Options{Wait: true}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Obtain with a cancelled context = %v, want context.Canceled", err)
	}
}

// waitFor polls an observable condition until it holds, failing the test after a while.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Poll(t, 10*time.Second, "condition", cond)
}

// TestWaitGrantToVanishedWaiterExpires puts in line a waiter that no longer exists: on release
// the lock is given to it, and the real waiter gets the lock once the short lease the vanished
// one asked for expires. A malformed entry is skipped.
func TestWaitGrantToVanishedWaiterExpires(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	name := lockName(prefix, "vanished")
	a, b := newWaitingClient(t, rdb, prefix, nil), newWaitingClient(t, rdb, prefix, nil)
	held := obtain(t, a, name, time.Minute, nil)
	ctx := context.Background()
	if err := rdb.RPush(ctx, name+":waiters", "malformed", "crashed-1 dead-token 300 1").Err(); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := b.Obtain(ctx, name, time.Second, &lock.Options{Wait: true})
		if err == nil {
			err = l.Release(ctx)
		}
		got <- err
	}()
	waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 3 })
	if err := held.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if v := value(t, rdb, name); v != "dead-token" {
		t.Fatalf("after release the lock is %q, want it given to the first well-formed entry in line", v)
	}
	if err := <-got; err != nil {
		t.Fatalf("waiter behind a vanished client: %v", err)
	}
}

func listLen(t *testing.T, rdb *redis.Client, key string) int64 {
	t.Helper()
	n, err := rdb.LLen(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("LLEN %s: %v", key, err)
	}
	return n
}

// TestWaitGrantAnnouncement listens to the lock's channel while one client gives the lock to
// another's waiter: the message names that waiter and the fencing token it was given, exactly
// as the waiter ends up holding it, so the waiter needs no round trip of its own.
func TestWaitGrantAnnouncement(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	name := lockName(prefix, "announce")
	ps := rdb.Subscribe(context.Background(), "lock-released:"+name)
	t.Cleanup(func() { _ = ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	a, b := newWaitingClient(t, rdb, prefix, nil), newWaitingClient(t, rdb, prefix, nil)
	held := obtain(t, a, name, time.Minute, nil)
	got := make(chan *lock.Lock, 1)
	var errs errorList
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		l, err := b.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
		if err != nil {
			errs.add(err)
		}
		got <- l
	}()
	waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 1 })
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	msg, err := ps.ReceiveMessage(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	l := <-got
	errs.report(t)
	if l == nil {
		t.Fatal("the waiter got no lock")
	}
	defer l.Release(context.Background())
	// "<waiter id> <fence> <note>", the note empty here: the holder left none.
	parts := strings.SplitN(msg.Payload, " ", 3)
	if len(parts) != 3 || parts[0] == "" || parts[1] != strconv.FormatInt(l.Fence(), 10) || parts[2] != "" {
		t.Errorf("announcement %q, want \"<waiter id> %d \" (a plain integer fence, no note)", msg.Payload, l.Fence())
	}
	if strings.Contains(msg.Payload, l.Token()) {
		t.Errorf("announcement %q carries the holder's token", msg.Payload)
	}
	if l.Fence() <= held.Fence() {
		t.Errorf("waiter's fence %d is not above the holder's %d", l.Fence(), held.Fence())
	}
}
