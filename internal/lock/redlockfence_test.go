package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The tests in this file are about Redlock's fencing tokens: that every holder's token is
// larger than every earlier holder's, whichever quorum each had. Each node issues its own
// tokens, so the tests make the nodes' counters disagree (seedCounters) and steer which nodes
// form each quorum (blockNodes): with the largest-of-the-quorum token alone, a quorum of
// nodes whose counters are behind would issue a smaller token than the one before it.

// otherRedlock returns a Redlock over the same servers with clients of its own, as another
// process would have.
func otherRedlock(t *testing.T, servers []*testenv.RedisServer) *lock.Redlock {
	t.Helper()
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = s.Client()
	}
	r, err := lock.NewRedlock(clients, redlockOptions)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// seedCounters sets the fencing counter of name on node i to (i+1) million: far apart, so
// that a token taken from some nodes only is smaller than one taken from others.
func seedCounters(t *testing.T, clients []*redis.Client, name string) {
	t.Helper()
	for i, c := range clients {
		if err := c.Set(t.Context(), fenceKey(name), (i+1)*1_000_000, 0).Err(); err != nil {
			t.Fatalf("seed the counter on node %d: %v", i, err)
		}
	}
}

// counter returns the fencing counter of name on one node, 0 when there is none.
func counter(t *testing.T, c *redis.Client, name string) int64 {
	t.Helper()
	v := value(t, c, fenceKey(name))
	if v == "" {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		t.Fatalf("counter %q: %v", v, err)
	}
	return n
}

// blocker is the token another holder has on nodes that blockNodes took out of a quorum.
const blocker = "held-by-a-test"

// blockNodes makes the nodes at indexes answer that name is held by someone else, so that a
// quorum can only be formed from the others; the returned function lets them go again.
func blockNodes(t *testing.T, clients []*redis.Client, indexes []int, name string) (unblock func()) {
	t.Helper()
	for _, i := range indexes {
		if err := clients[i].Set(t.Context(), name, blocker, time.Minute).Err(); err != nil {
			t.Fatalf("block node %d: %v", i, err)
		}
	}
	return func() {
		t.Helper()
		for _, i := range indexes {
			if v := value(t, clients[i], name); v != blocker {
				t.Fatalf("node %d: the blocked lock holds %q, want the blocker", i, v)
			}
			del(t, clients[i], name)
		}
	}
}

// takeTurns obtains name 60 times in a row, from lockers in turn, each time with two random
// nodes of five held by someone else, so that successive quorums differ; before each turn it
// runs before(turn). Every holder's token must exceed the last one.
func takeTurns(t *testing.T, lockers []*lock.Redlock, clients []*redis.Client, name string, opt *lock.Options, before func(turn int, rng *rand.Rand)) {
	t.Helper()
	seed := rand.Uint64()
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d", seed)
	ctx := t.Context()
	last := int64(0)
	for i := range 60 {
		before(i, rng)
		blocked := rng.Perm(5)[:2]
		unblock := blockNodes(t, clients, blocked, name)
		l, err := lockers[i%len(lockers)].Obtain(ctx, name, 10*time.Second, opt)
		if err != nil {
			t.Fatalf("turn %d, nodes %v blocked: Obtain: %v", i, blocked, err)
		}
		if l.Fence() <= last {
			t.Fatalf("turn %d, nodes %v blocked: fence %d is not above the last holder's %d", i, blocked, l.Fence(), last)
		}
		last = l.Fence()
		if err := l.Release(ctx); err != nil {
			t.Fatalf("turn %d: Release: %v", i, err)
		}
		unblock()
	}
}

// TestRedlockFencesIncreaseAcrossQuorums takes turns from three Redlock clients over nodes
// whose counters started a million apart. Without the raise, a quorum of the low nodes issues
// a token below the last one from the high nodes within a few turns.
func TestRedlockFencesIncreaseAcrossQuorums(t *testing.T) {
	t.Parallel()
	_, servers, clients := startRedlock(t, 5)
	lockers := []*lock.Redlock{otherRedlock(t, servers), otherRedlock(t, servers), otherRedlock(t, servers)}
	name := lockName("", "fences-quorums")
	seedCounters(t, clients, name)
	takeTurns(t, lockers, clients, name, nil, func(int, *rand.Rand) {})
}

// TestRedlockFencesIncreaseUnderContention has four Redlock clients contend for one lock,
// polling, 25 critical sections each, over nodes whose counters started a million apart. Split
// votes leave rounds with a minority of grants, which are given back. Inside the critical
// section, which nobody else can be in, each holder's token must exceed the previous holder's.
func TestRedlockFencesIncreaseUnderContention(t *testing.T) {
	t.Parallel()
	_, servers, clients := startRedlock(t, 5)
	name := lockName("", "fences-contended")
	seedCounters(t, clients, name)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	var (
		inside atomic.Int64
		mu     sync.Mutex
		fences []int64
		errs   []error
		wg     sync.WaitGroup
	)
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}
	for w := range 4 {
		r := otherRedlock(t, servers)
		wg.Go(func() {
			for range 25 {
				l, err := r.Obtain(ctx, name, 10*time.Second, &lock.Options{Retry: lock.Exponential(time.Millisecond, 20*time.Millisecond)})
				if err != nil {
					fail(fmt.Errorf("client %d: Obtain: %w", w, err))
					return
				}
				if n := inside.Add(1); n != 1 {
					fail(fmt.Errorf("client %d: %d holders at once", w, n))
				}
				mu.Lock()
				if n := len(fences); n > 0 && l.Fence() <= fences[n-1] {
					errs = append(errs, fmt.Errorf("client %d: fence %d is not above the last holder's %d", w, l.Fence(), fences[n-1]))
				}
				fences = append(fences, l.Fence())
				mu.Unlock()
				inside.Add(-1)
				if err := l.Release(ctx); err != nil {
					fail(fmt.Errorf("client %d: Release: %w", w, err))
					return
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if len(fences) != 100 {
		t.Errorf("%d critical sections ran, want 100", len(fences))
	}
}

// TestRedlockRaiseNeedsQuorum takes the lock away from some nodes between their grants and the
// raising of their counters (as an expiry, an operator or a restart would), or pauses them
// there. The raise then succeeds only where the lock still is, and the lock counts as obtained
// only if that is a quorum: otherwise Obtain fails, whatever the grants said, and gives back
// what it took.
func TestRedlockRaiseNeedsQuorum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name            string
		lost, paused    []int
		wantObtained    bool
		wantUnreachable bool
	}{
		{name: "kept everywhere", wantObtained: true},
		{name: "lost on two", lost: []int{0, 1}, wantObtained: true},
		{name: "lost on three", lost: []int{0, 1, 4}},
		{name: "lost on two, one paused", lost: []int{2, 4}, paused: []int{3}},
		{name: "three paused", paused: []int{0, 1, 2}, wantUnreachable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, servers, clients := startRedlock(t, 5)
			name := lockName("", "raise")
			seedCounters(t, clients, name)
			var once sync.Once
			lock.SetAfterGrant(r, func() {
				once.Do(func() {
					for _, i := range tt.lost {
						del(t, clients[i], name)
					}
					for _, i := range tt.paused {
						servers[i].Pause()
					}
				})
			})
			ctx := t.Context()

			l, err := r.Obtain(ctx, name, 10*time.Second, nil)
			for _, i := range tt.paused {
				servers[i].Resume()
			}

			// Node 4's counter is the largest: every grant's token is one above it.
			const want = 5_000_001
			if tt.wantObtained {
				if err != nil {
					t.Fatalf("Obtain: %v", err)
				}
				if l.Fence() != want {
					t.Errorf("Fence() = %d, want %d", l.Fence(), want)
				}
				for i, c := range clients {
					raised := !slices.Contains(tt.lost, i)
					if got := counter(t, c, name); raised && got != want || !raised && got >= want {
						t.Errorf("node %d: counter %d; want %d where the lock was kept, and below it where it was lost", i, got, want)
					}
				}
				if err := l.Release(ctx); err != nil {
					t.Errorf("Release: %v", err)
				}
				return
			}
			var qe *lock.QuorumError
			if !errors.As(err, &qe) || !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("Obtain = %v, want a *QuorumError matching ErrNotObtained", err)
			}
			if qe.Unreachable() != tt.wantUnreachable {
				t.Errorf("Unreachable() = %v, want %v: %v", qe.Unreachable(), tt.wantUnreachable, err)
			}
			if len(tt.paused) > 0 {
				return // the paused nodes run the release whenever they read it
			}
			for i, c := range clients {
				if v := value(t, c, name); v != "" {
					t.Errorf("node %d keeps the lock (%q) after the failed obtain", i, v)
				}
			}
		})
	}
}

// TestRedlockFencesIncreaseThroughEmptyRestarts takes turns from two Redlock clients and
// restarts a random node empty (no persistence) every tenth turn. The restarted node's counter
// starts again from its clock in microseconds, and every token must still exceed the one
// before. The counters start where the clocks put them, at each node's first grant.
func TestRedlockFencesIncreaseThroughEmptyRestarts(t *testing.T) {
	t.Parallel()
	_, servers, clients := startRedlock(t, 5)
	lockers := []*lock.Redlock{otherRedlock(t, servers), otherRedlock(t, servers)}
	name := lockName("", "fences-restarts")
	// A restarted node refuses connections for a moment: retry through it.
	opt := &lock.Options{Retry: lock.Limit(lock.Fixed(10*time.Millisecond), 50)}
	takeTurns(t, lockers, clients, name, opt, func(turn int, rng *rand.Rand) {
		if turn%10 == 9 {
			servers[rng.IntN(5)].Restart()
		}
	})
}

// TestRedlockRestartedNodeFencesOverlappingHolders is the case Redlock cannot prevent: A holds
// the lock on exactly a quorum of five (two nodes held by someone else), one of A's nodes
// restarts empty, the other two come free, and B obtains the lock on the restarted node and
// those two while A still believes it holds it. The fencing token is what is left to tell them
// apart, and B's must be the larger, so that storage that checks tokens refuses A's writes.
func TestRedlockRestartedNodeFencesOverlappingHolders(t *testing.T) {
	t.Parallel()
	a, servers, clients := startRedlock(t, 5)
	b := otherRedlock(t, servers)
	name := lockName("", "overlap")
	ctx := t.Context()
	// Earlier holders leave every node's counter where a busy lock's would be.
	for range 5 {
		l, err := a.Obtain(ctx, name, 10*time.Second, nil)
		if err != nil {
			t.Fatalf("warm-up Obtain: %v", err)
		}
		_ = l.Release(ctx)
	}

	unblock := blockNodes(t, clients, []int{3, 4}, name)
	la, err := a.Obtain(ctx, name, 30*time.Second, nil)
	if err != nil {
		t.Fatalf("A: Obtain on nodes 0-2: %v", err)
	}
	servers[0].Restart()
	unblock()
	lb, err := b.Obtain(ctx, name, 30*time.Second, nil)
	if err != nil {
		t.Fatalf("B: Obtain on nodes 0, 3 and 4: %v", err)
	}
	if got := holders(t, clients, nil, name, la.Token()); !slices.Equal(got, []int{1, 2}) {
		t.Errorf("A holds nodes %v, want 1 and 2 (A and B overlap, as documented)", got)
	}
	if lb.Fence() <= la.Fence() {
		t.Errorf("B's fence %d is not above A's %d: storage could not refuse A", lb.Fence(), la.Fence())
	}
	// A finds out at its next refresh, which a quorum answers without its lock.
	if err := la.Refresh(ctx, 30*time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("A: Refresh = %v, want ErrNotHeld", err)
	}
	_ = lb.Release(ctx)
}
