package lock_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// commandCalls returns how many times Redis ran each command since the last resetStats, by
// lower-case name, from INFO commandstats: the commands a script runs count too. It needs a
// server of the test's own.
func commandCalls(t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	calls := map[string]int64{}
	for line := range strings.SplitSeq(info, "\n") {
		// cmdstat_evalsha:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,failed_calls=0
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		for field := range strings.SplitSeq(stats, ",") {
			if v, ok := strings.CutPrefix(field, "calls="); ok {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("INFO commandstats: %q: %v", line, err)
				}
				calls[name] = n
			}
		}
	}
	return calls
}

func resetStats(t *testing.T, rdb *redis.Client) {
	t.Helper()
	if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
		t.Fatalf("CONFIG RESETSTAT: %v", err)
	}
}

// scriptRuns counts the scripts Redis ran: the round trips of the lock's clients.
func scriptRuns(calls map[string]int64) int64 { return calls["evalsha"] + calls["eval"] }

// warmUp loads the lock's scripts into srv, so that counts taken afterwards see no NOSCRIPT
// retry.
func warmUp(t *testing.T, rdb *redis.Client) {
	t.Helper()
	c := lock.New(rdb)
	defer c.Close()
	holder := obtain(t, c, "warm-up", time.Minute, nil)
	w := startWaiter(t, c, "warm-up", time.Minute)
	waitFor(t, func() bool { return exists(t, rdb, "{warm-up}:waiters") })
	release(t, holder)
	l, err := w.result()
	if err != nil {
		t.Fatalf("warm-up waiter: %v", err)
	}
	release(t, l)
}

// TestWaitReleaseWakesOnlyTheNext parks waiters of two clients behind a holder, with a recheck
// far longer than the test, so that only a grant message can wake them. Each release costs one
// script, gives the lock to the next waiter in line and publishes one message: no other waiter
// wakes, none asks Redis anything, and the line shrinks by one.
func TestWaitReleaseWakesOnlyTheNext(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	warmUp(t, rdb)
	clients := []*lock.Client{
		lock.New(rdb, lock.WithRecheck(time.Hour)),
		lock.New(rdb, lock.WithRecheck(time.Hour)),
	}
	for _, c := range clients {
		t.Cleanup(func() { _ = c.Close() })
	}
	name := lockName("", "next")
	holder := obtain(t, lock.New(rdb), name, time.Minute, nil)
	const n = 5
	waiters := make([]*queuedWaiter, n)
	for i := range waiters {
		waiters[i] = startWaiter(t, clients[i%2], name, time.Minute)
		waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == int64(i+1) })
	}

	prev := holder
	for i, w := range waiters {
		resetStats(t, rdb)
		release(t, prev)
		l, err := w.result()
		if err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
		calls := commandCalls(t, rdb)
		if got := scriptRuns(calls); got != 1 {
			t.Errorf("turn %d: %d scripts ran, want only the release: %v", i, got, calls)
		}
		if calls["publish"] != 1 || calls["lpop"] != 1 {
			t.Errorf("turn %d: %d PUBLISH and %d LPOP, want one of each: %v", i, calls["publish"], calls["lpop"], calls)
		}
		if got, want := listLen(t, rdb, name+":waiters"), int64(n-i-1); got != want {
			t.Errorf("turn %d: %d waiters in line, want %d", i, got, want)
		}
		for j := i + 1; j < n; j++ {
			select {
			case <-waiters[j].done:
				t.Fatalf("turn %d: waiter %d returned too (%v)", i, j, waiters[j].err)
			default:
			}
		}
		if l.Fence() <= prev.Fence() {
			t.Errorf("turn %d: fence %d is not above the previous %d", i, l.Fence(), prev.Fence())
		}
		prev = l
	}
	release(t, prev)
	if exists(t, rdb, name) {
		t.Error("lock still held after the last waiter released it")
	}
}

// TestWaitLooksAtMostEveryRecheck has a waiter wait for a lock whose holder never releases it:
// it looks again at most every 200 ms, and at the end of the holder's lease, when it takes the
// lock. A poll would have looked far more often; a waiter that only listened for messages would
// never have had the lock.
func TestWaitLooksAtMostEveryRecheck(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	warmUp(t, rdb)
	c := lock.New(rdb)
	t.Cleanup(func() { _ = c.Close() })
	name := lockName("", "recheck")
	const lease = 1200 * time.Millisecond
	obtain(t, lock.New(rdb), name, lease, nil) // never released

	resetStats(t, rdb)
	ctx, cancel := context.WithTimeout(t.Context(), guard)
	defer cancel()
	start := time.Now()
	l, err := c.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	waited := time.Since(start)
	release(t, l)
	calls := commandCalls(t, rdb)
	// The first look, a second once the client listens (a grant may have been made before),
	// one every 200 ms, a few as the lease runs out (Redis reports its last milliseconds as
	// 0 or 1), and the release.
	if most := int64(waited/(200*time.Millisecond)) + 6; scriptRuns(calls) > most {
		t.Errorf("%d scripts in %v of waiting, want at most %d: %v", scriptRuns(calls), waited, most, calls)
	}
	t.Logf("%d scripts in %v of waiting", scriptRuns(calls), waited)
}

// TestWaitLostGrantFoundByRecheck gives the lock to a waiter that cannot hear the message (its
// client listens to another namespace): the waiter finds its own token in the lock when it
// next looks, and holds the lock it was given, with the fence of that grant — long before the
// previous holder's lease would have ended.
func TestWaitLostGrantFoundByRecheck(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	deaf := lock.New(rdb, lock.WithNamespace("elsewhere:"))
	t.Cleanup(func() { _ = deaf.Close() })
	name := lockName(prefix, "lost-grant")
	holder := obtain(t, lock.New(rdb), name, time.Hour, nil)
	w := startWaiter(t, deaf, name, time.Minute) // gives up after 10 s
	waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 1 })

	release(t, holder)
	granted := value(t, rdb, name)
	if granted == "" || granted == holder.Token() {
		t.Fatalf("after the release the lock holds %q, want it given to the waiter", granted)
	}
	l, err := w.result()
	if err != nil {
		t.Fatalf("waiter whose grant message was lost: %v", err)
	}
	defer release(t, l)
	if l.Token() != granted {
		t.Errorf("waiter holds token %q, want the one it was given, %q", l.Token(), granted)
	}
	if got := value(t, rdb, fenceKey(name)); got != strconv.FormatInt(l.Fence(), 10) || l.Fence() <= holder.Fence() {
		t.Errorf("waiter's fence %d, counter %s, holder's fence %d: want the grant's fence, above the holder's", l.Fence(), got, holder.Fence())
	}
}

// TestWaitGivingUpPassesGrantOn gives the lock to a waiter that does not know it yet (it
// cannot hear the message and does not look again), and then has that waiter give up: it
// takes its place back and passes the lock it was given to the next waiter, which is told at
// once. Nobody is left holding a lock nobody uses.
func TestWaitGivingUpPassesGrantOn(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		budget  time.Duration // the first waiter's wait; 0: until cancelled
		wantErr error
	}{
		{"cancelled", 0, context.Canceled},
		{"deadline", 3 * time.Second, lock.ErrNotObtained},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			deaf := lock.New(rdb, lock.WithNamespace("elsewhere:"), lock.WithRecheck(time.Hour))
			t.Cleanup(func() { _ = deaf.Close() })
			next := newWaitingClient(t, rdb, prefix, nil)
			name := lockName(prefix, "give-up")
			holder := obtain(t, lock.New(rdb), name, time.Hour, nil)
			// The first waiter must be listening (deaf, in another namespace) before it joins
			// the line: a client that is not yet subscribes after its first look and looks
			// again, and a release that came in between would then be found by that second
			// look instead of being missed, as this test needs. A short wait for another held
			// lock subscribes it.
			busy := obtain(t, lock.New(rdb), lockName(prefix, "give-up-warm"), time.Hour, nil)
			warm, cancelWarm := context.WithTimeout(t.Context(), 300*time.Millisecond)
			if l, err := deaf.Obtain(warm, busy.Name(), time.Minute, &lock.Options{Wait: true}); !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("warm-up wait = %v, %v; want ErrNotObtained", l, err)
			}
			cancelWarm()
			release(t, busy)

			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			if tc.budget > 0 {
				ctx, cancel = context.WithTimeout(ctx, tc.budget)
				defer cancel()
			}
			type result struct {
				l   *lock.Lock
				err error
			}
			first := make(chan result, 1)
			go func() {
				l, err := deaf.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
				first <- result{l, err}
			}()
			waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 1 })
			second := startWaiter(t, next, name, time.Minute)
			waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 2 })

			release(t, holder)
			granted := value(t, rdb, name)
			if granted == "" || granted == holder.Token() {
				t.Fatalf("after the release the lock holds %q, want it given to the first waiter", granted)
			}
			if tc.budget == 0 {
				cancel()
			}
			r := <-first
			if r.l != nil || !errors.Is(r.err, tc.wantErr) {
				t.Fatalf("first waiter: %v, %v; want %v", r.l, r.err, tc.wantErr)
			}
			l, err := second.result()
			if err != nil {
				t.Fatalf("second waiter, after the first gave up its grant: %v", err)
			}
			if l.Token() == granted || l.Fence() <= holder.Fence()+1 {
				t.Errorf("second waiter holds %q with fence %d; want its own token, and a fence above the first waiter's grant (holder %d)",
					l.Token(), l.Fence(), holder.Fence())
			}
			release(t, l)
			if exists(t, rdb, name) || exists(t, rdb, name+":waiters") {
				t.Error("lock or line left behind")
			}
		})
	}
}
