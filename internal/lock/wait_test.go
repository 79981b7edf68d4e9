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
	obtained, contended, notObtained, handedOff, lost, refreshFailed atomic.Int64
}

func (o *countingObserver) Obtained(_ string, _ time.Duration, contended bool) {
	o.obtained.Add(1)
	if contended {
		o.contended.Add(1)
	}
}
func (o *countingObserver) NotObtained(string, time.Duration) { o.notObtained.Add(1) }
func (o *countingObserver) HandedOff(string, time.Duration)   { o.handedOff.Add(1) }
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
						err := c.WithLock(ctx, name, 5*time.Second, func(context.Context, *lock.Lock) error {
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
		t.Logf("%d clients × %d waiters × %d rounds: obtained %d (contended %d), handed off %d",
			tc.clients, tc.perClient, tc.rounds, obs.obtained.Load(), obs.contended.Load(), obs.handedOff.Load())
		if tc.clients == 1 && obs.handedOff.Load() == 0 {
			t.Errorf("one client with a queue never handed the lock off")
		}
	}
}

// TestWaitIsFairInArrivalOrder parks 16 waiters of one client behind a holder, one after the
// other, and checks that they get the lock in the order they arrived, each handed it by the one
// before with a larger fence.
func TestWaitIsFairInArrivalOrder(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	obs := &countingObserver{}
	c := newWaitingClient(t, rdb, prefix, obs)
	name := lockName(prefix, "fair")
	holder, err := c.Obtain(context.Background(), name, 10*time.Second, &lock.Options{Wait: true})
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 16
	var mu sync.Mutex
	var order []int
	var fences []int64
	var wg sync.WaitGroup
	var errs errorList
	for i := range waiters {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l, err := c.Obtain(ctx, name, 10*time.Second, &lock.Options{Wait: true})
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
		// The next waiter arrives only once this one is queued.
		waitFor(t, func() bool { return lock.QueueLen(c, name) == i+1 })
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	errs.report(t)
	for i, got := range order {
		if got != i {
			t.Fatalf("turns went %v, want arrival order 0..%d", order, waiters-1)
		}
	}
	prev := holder.Fence()
	for i, f := range fences {
		if f <= prev {
			t.Errorf("turn %d got fence %d, not above the previous %d", i, f, prev)
		}
		prev = f
	}
	if got := obs.handedOff.Load(); got != waiters {
		t.Errorf("%d waiters were handed the lock, want all %d", got, waiters)
	}
}

// TestWaitWakesOnReleaseFromAnotherClient parks a waiter of one client behind a holder of
// another with a long lease: only the release announcement can wake it in time.
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
	for range 3 { // the head and two queued behind it
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		_, err := c.Obtain(ctx, name, time.Second, &lock.Options{Wait: true})
		cancel()
		if !errors.Is(err, lock.ErrNotObtained) {
			t.Fatalf("Obtain = %v, want ErrNotObtained", err)
		}
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

// TestWaitClientsTakeTurnsInOrder lists two other clients behind a holder, one after the other,
// and checks that the lock goes to them in that order: a release gives it to the client at the
// front rather than freeing it for whoever asks first.
func TestWaitClientsTakeTurnsInOrder(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	name := lockName(prefix, "turns")
	holderClient := newWaitingClient(t, rdb, prefix, nil)
	held := obtain(t, holderClient, name, time.Minute, nil)

	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	var errs errorList
	for i, label := range []string{"first", "second", "third"} {
		c := newWaitingClient(t, rdb, prefix, nil)
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			l, err := c.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
			if err != nil {
				errs.add(err)
				return
			}
			mu.Lock()
			order = append(order, label)
			mu.Unlock()
			if err := l.Release(ctx); err != nil {
				errs.add(err)
			}
		})
		waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == int64(i+1) })
	}
	if err := held.Release(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	errs.report(t)
	if got := strings.Join(order, ","); got != "first,second,third" {
		t.Errorf("turns went %s, want first,second,third", got)
	}
	if exists(t, rdb, name) {
		t.Errorf("lock %s still held after everyone released", name)
	}
}

// TestWaitGrantToVanishedClientExpires lists a client that no longer exists, with its ticket:
// on release the lock is given to that ticket, and the real waiter gets the lock once the
// short lease the vanished client asked for expires. An entry without a ticket is skipped.
func TestWaitGrantToVanishedClientExpires(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	name := lockName(prefix, "vanished")
	a, b := newWaitingClient(t, rdb, prefix, nil), newWaitingClient(t, rdb, prefix, nil)
	held := obtain(t, a, name, time.Minute, nil)
	ctx := context.Background()
	if err := rdb.RPush(ctx, name+":waiters", "no-ticket", "crashed").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, name+":tickets", "crashed", "dead-token 300 1").Err(); err != nil {
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
		t.Fatalf("after release the lock is %q, want it given to the first ticket in line", v)
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

// TestWaitGrantAnnouncement listens to the release channel while one client gives the lock to
// another's waiter: the message names that client and the fencing token it was given, exactly
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
	id, fence, ok := strings.Cut(msg.Payload, " ")
	if !ok || id == "" || fence != strconv.FormatInt(l.Fence(), 10) {
		t.Errorf("announcement %q, want \"<client id> %d\" (a plain integer fence)", msg.Payload, l.Fence())
	}
	if l.Fence() <= held.Fence() {
		t.Errorf("waiter's fence %d is not above the holder's %d", l.Fence(), held.Fence())
	}
}
