package lock_test

import (
	"context"
	"errors"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// redlockOptions give live nodes room under the race detector on a busy machine: one that
// missed the default 50ms would count as failed and make a test about quorums flaky.
var redlockOptions = lock.RedlockOptions{NodeTimeout: 500 * time.Millisecond}

// startRedlock starts n independent redis-servers of the test's own and returns a Redlock over
// them, the servers and a client of each (for looking at keys).
func startRedlock(t *testing.T, n int) (*lock.Redlock, []*testenv.RedisServer, []*redis.Client) {
	t.Helper()
	servers := make([]*testenv.RedisServer, n)
	clients := make([]*redis.Client, n)
	for i := range servers {
		servers[i] = testenv.StartRedis(t)
		clients[i] = servers[i].Client()
	}
	r, err := lock.NewRedlock(clients, redlockOptions)
	if err != nil {
		t.Fatal(err)
	}
	return r, servers, clients
}

// holders returns the indexes of the nodes among those at indexes on which name is held with
// token; nil indexes means every node.
func holders(t *testing.T, clients []*redis.Client, indexes []int, name, token string) []int {
	t.Helper()
	var held []int
	for i, c := range clients {
		if indexes != nil && !slices.Contains(indexes, i) {
			continue
		}
		if value(t, c, name) == token {
			held = append(held, i)
		}
	}
	return held
}

// addrs returns the addresses of the servers at indexes.
func addrs(servers []*testenv.RedisServer, indexes []int) []string {
	var a []string
	for _, i := range indexes {
		a = append(a, servers[i].Addr())
	}
	slices.Sort(a)
	return a
}

// listening reports whether something accepts connections on addr: a killed node's port
// taken since by a server of a test running beside (ports are picked free, and a killed one is
// free again), which then answered for it. Only a node still dead must be named.
func listening(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	_ = c.Close()
	return true
}

// TestRedlockObtainNeedsQuorum kills nodes of five before obtaining: with a majority alive the
// lock is obtained, refreshed and released on every live node; without one, Obtain gives up
// within its wait budget with a *QuorumError naming the dead nodes, and leaves no grant behind.
func TestRedlockObtainNeedsQuorum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		killed  []int
		wantErr bool
	}{
		{killed: nil},
		{killed: []int{4}},
		{killed: []int{1, 3}},
		{killed: []int{0, 2, 4}, wantErr: true},
		{killed: []int{0, 1, 2, 3, 4}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(fmtInts("killed", tt.killed), func(t *testing.T) {
			t.Parallel()
			r, servers, clients := startRedlock(t, 5)
			quorumName := lockName("", "quorum")
			for _, i := range tt.killed {
				servers[i].Kill()
			}
			alive := slices.DeleteFunc([]int{0, 1, 2, 3, 4}, func(i int) bool { return slices.Contains(tt.killed, i) })
			// The wait budget: retry until it is spent.
			budget, cancel := context.WithTimeout(t.Context(), time.Second)
			defer cancel()
			l, err := r.Obtain(budget, quorumName, 10*time.Second, &lock.Options{Retry: lock.Linear(10*time.Millisecond, 50*time.Millisecond)})

			if tt.wantErr {
				if !errors.Is(err, lock.ErrNotObtained) {
					t.Fatalf("Obtain = %v, want an error matching ErrNotObtained", err)
				}
				var qe *lock.QuorumError
				if !errors.As(err, &qe) {
					t.Fatalf("Obtain = %T %v, want a *QuorumError", err, err)
				}
				// The last round may have run into the deadline on live nodes too, so the
				// killed nodes must be named, and nothing that is not a node.
				got := qe.FailedAddrs()
				for _, a := range addrs(servers, tt.killed) {
					if !slices.Contains(got, a) && !listening(a) {
						t.Errorf("QuorumError names %v, want it to name killed node %s", got, a)
					}
				}
				for _, a := range got {
					if !slices.Contains(addrs(servers, []int{0, 1, 2, 3, 4}), a) {
						t.Errorf("QuorumError names %s, which is no node", a)
					}
				}
				if got, needed, total := qe.Counts(); qe.Op() != "obtain" || got >= needed || needed != 3 || total != 5 {
					t.Errorf("QuorumError = {Op %q Got %d Needed %d Total %d}, want obtain, below 3 of 5", qe.Op(), got, needed, total)
				}
				for _, i := range alive {
					if exists(t, clients[i], quorumName) {
						t.Errorf("node %d keeps a grant of the failed obtain", i)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			if got := holders(t, clients, alive, quorumName, l.Token()); !slices.Equal(got, alive) {
				t.Errorf("held on nodes %v, want every live node %v", got, alive)
			}
			if l.Fence() <= 0 {
				t.Errorf("Fence() = %d, want > 0", l.Fence())
			}
			ctx := t.Context()
			if err := l.Refresh(ctx, 10*time.Second); err != nil {
				t.Errorf("Refresh: %v", err)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			for _, i := range alive {
				if exists(t, clients[i], quorumName) {
					t.Errorf("node %d still holds the lock after Release", i)
				}
			}
		})
	}
}

// TestRedlockRestartedNodesDoNotAdmitSecondHolder restarts a minority of the nodes empty while
// A holds the lock on all five: the restarted nodes grant the lock to B, but B reaches no
// quorum, so A and B never both hold it.
func TestRedlockRestartedNodesDoNotAdmitSecondHolder(t *testing.T) {
	t.Parallel()
	for _, restarted := range [][]int{{0}, {1, 3}} {
		t.Run(fmtInts("restarted", restarted), func(t *testing.T) {
			t.Parallel()
			r, servers, clients := startRedlock(t, 5)
			restartName := lockName("", "restart")
			// B is another process: its own clients, its own Redlock.
			b := otherRedlock(t, servers)
			ctx := t.Context()
			a, err := r.Obtain(ctx, restartName, 30*time.Second, nil)
			if err != nil {
				t.Fatalf("A: Obtain: %v", err)
			}
			for _, i := range restarted {
				servers[i].Restart()
			}

			_, err = b.Obtain(ctx, restartName, 30*time.Second, nil)
			var qe *lock.QuorumError
			if !errors.As(err, &qe) || !errors.Is(err, lock.ErrNotObtained) {
				t.Fatalf("B: Obtain while A holds a quorum = %v, want a *QuorumError matching ErrNotObtained", err)
			}
			if got, _, _ := qe.Counts(); got != len(restarted) {
				t.Errorf("B got %d nodes, want the %d restarted ones", got, len(restarted))
			}
			if got, want := len(holders(t, clients, nil, restartName, a.Token())), 5-len(restarted); got != want {
				t.Errorf("A holds %d nodes, want %d", got, want)
			}
			if err := a.Refresh(ctx, 30*time.Second); err != nil {
				t.Errorf("A: Refresh with a quorum left: %v", err)
			}
			if err := a.Release(ctx); err != nil {
				t.Fatalf("A: Release: %v", err)
			}
			bl, err := b.Obtain(ctx, restartName, 30*time.Second, nil)
			if err != nil {
				t.Fatalf("B: Obtain after A released: %v", err)
			}
			defer bl.Release(ctx)
			if bl.Fence() <= a.Fence() {
				t.Errorf("B's fence %d is not above A's %d", bl.Fence(), a.Fence())
			}
		})
	}
}

// TestRedlockRefresh refreshes a lock after it was lost on some nodes (deleted, as an expiry
// or an operator would) or some nodes went down: the refresh holds while a majority still has
// the lock, and otherwise fails with a *QuorumError matching ErrNotHeld that names the nodes.
func TestRedlockRefresh(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		deleted []int // nodes on which the key is deleted, as an expiry or an operator would
		killed  []int // nodes that are down
		wantErr error
	}{
		{name: "held everywhere"},
		{name: "lost on two", deleted: []int{0, 4}},
		{name: "two down", killed: []int{1, 2}},
		{name: "lost on one, one down", deleted: []int{3}, killed: []int{0}},
		{name: "lost on three", deleted: []int{0, 1, 2}, wantErr: lock.ErrNotHeld},
		{name: "lost on two, one down", deleted: []int{0, 1}, killed: []int{4}, wantErr: lock.ErrNotHeld},
		{name: "lost everywhere", deleted: []int{0, 1, 2, 3, 4}, wantErr: lock.ErrNotHeld},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, servers, clients := startRedlock(t, 5)
			refreshName := lockName("", "refresh")
			ctx := t.Context()
			l, err := r.Obtain(ctx, refreshName, 5*time.Second, nil)
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			for _, i := range tt.deleted {
				del(t, clients[i], refreshName)
			}
			for _, i := range tt.killed {
				servers[i].Kill()
			}

			err = l.Refresh(ctx, time.Minute)

			if tt.wantErr != nil {
				var qe *lock.QuorumError
				if !errors.Is(err, tt.wantErr) || !errors.As(err, &qe) {
					t.Fatalf("Refresh = %v, want a *QuorumError matching %v", err, tt.wantErr)
				}
				if got, want := qe.FailedAddrs(), addrs(servers, append(slices.Clone(tt.deleted), tt.killed...)); !cmp.Equal(got, want) {
					t.Errorf("QuorumError names %v, want the nodes that lost the key or are down %v", got, want)
				}
				if qe.Op() != "refresh" {
					t.Errorf("QuorumError.Op = %q, want refresh", qe.Op())
				}
				return
			}
			if err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if time.Until(l.Until()) <= 5*time.Second {
				t.Errorf("Until() is %v away after a refresh to a minute", time.Until(l.Until()))
			}
			for i, c := range clients {
				if slices.Contains(tt.deleted, i) || slices.Contains(tt.killed, i) {
					continue
				}
				if ttl := c.PTTL(ctx, refreshName).Val(); ttl <= 5*time.Second {
					t.Errorf("node %d: PTTL = %v after a refresh to a minute", i, ttl)
				}
			}
		})
	}
}

// TestRedlockReleaseDeletesOnEveryNode releases a lock held on all five nodes: no node keeps
// it, a second Release does nothing (as for a lock on one Redis), and the next holder's fence
// is larger.
func TestRedlockReleaseDeletesOnEveryNode(t *testing.T) {
	t.Parallel()
	r, _, clients := startRedlock(t, 5)
	releaseName := lockName("", "release")
	ctx := t.Context()
	first, err := r.Obtain(ctx, releaseName, time.Minute, nil)
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	if got := holders(t, clients, nil, releaseName, first.Token()); len(got) != 5 {
		t.Fatalf("held on nodes %v, want all five", got)
	}
	if err := first.Release(ctx); err != nil {
		t.Fatalf("Release: %v", err)
	}
	for i, c := range clients {
		if exists(t, c, releaseName) {
			t.Errorf("node %d still holds the lock after Release", i)
		}
	}
	if err := first.Release(ctx); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
	second, err := r.Obtain(ctx, releaseName, time.Minute, nil)
	if err != nil {
		t.Fatalf("Obtain after Release: %v", err)
	}
	defer second.Release(ctx)
	if second.Fence() <= first.Fence() {
		t.Errorf("second fence %d is not above the first %d", second.Fence(), first.Fence())
	}
}

// TestRedlockReleaseObserved releases Redlock locks as a Client's are released: a lock no node
// holds any more is lost, reported once however many times it is found gone; a release no node
// answers says so, and reports no loss, since nothing is known about the lock.
func TestRedlockReleaseObserved(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		// fail acts on the nodes after the lock was obtained.
		fail    func(t *testing.T, servers []*testenv.RedisServer, clients []*redis.Client, l *lock.Lock)
		wantErr func(error) bool
		want    observed
	}{
		{
			name:    "held",
			fail:    func(*testing.T, []*testenv.RedisServer, []*redis.Client, *lock.Lock) {},
			wantErr: func(err error) bool { return err == nil },
			want:    observed{Obtained: 1},
		},
		{
			name: "lost everywhere, found by Refresh and then Release",
			fail: func(t *testing.T, _ []*testenv.RedisServer, clients []*redis.Client, l *lock.Lock) {
				for _, c := range clients {
					del(t, c, l.Name())
				}
				if err := l.Refresh(t.Context(), time.Minute); !errors.Is(err, lock.ErrNotHeld) {
					t.Fatalf("Refresh = %v, want ErrNotHeld", err)
				}
			},
			wantErr: func(err error) bool { return errors.Is(err, lock.ErrNotHeld) },
			want:    observed{Obtained: 1, Lost: 1},
		},
		{
			name: "lost everywhere, found by Release",
			fail: func(t *testing.T, _ []*testenv.RedisServer, clients []*redis.Client, l *lock.Lock) {
				for _, c := range clients {
					del(t, c, l.Name())
				}
			},
			wantErr: func(err error) bool { return errors.Is(err, lock.ErrNotHeld) },
			want:    observed{Obtained: 1, Lost: 1},
		},
		{
			name: "every node down",
			fail: func(_ *testing.T, servers []*testenv.RedisServer, _ []*redis.Client, _ *lock.Lock) {
				for _, s := range servers {
					s.Kill()
				}
			},
			wantErr: func(err error) bool { return err != nil && !errors.Is(err, lock.ErrNotHeld) },
			want:    observed{Obtained: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			servers := make([]*testenv.RedisServer, 3)
			clients := make([]*redis.Client, len(servers))
			for i := range servers {
				servers[i] = testenv.StartRedis(t)
				clients[i] = servers[i].Client()
			}
			obs := &countingObserver{}
			opt := redlockOptions
			opt.Observer = obs
			r, err := lock.NewRedlock(clients, opt)
			if err != nil {
				t.Fatal(err)
			}
			l, err := r.Obtain(t.Context(), lockName("", "observed"), time.Minute, nil)
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			tt.fail(t, servers, clients, l)

			if err := l.Release(t.Context()); !tt.wantErr(err) {
				t.Errorf("Release = %v", err)
			}
			if diff := cmp.Diff(obs.snapshot(), tt.want); diff != "" {
				t.Errorf("observed (-got +want):\n%s", diff)
			}
		})
	}
}

// TestRedlockCarriesNoNotes leaves a note under a Redlock's lock: the next holder is given
// none, since a Redlock keeps no notes.
func TestRedlockCarriesNoNotes(t *testing.T) {
	t.Parallel()
	r, _, _ := startRedlock(t, 3)
	name := lockName("", "notes")
	for i := range 2 {
		err := r.WithLocks(t.Context(), []string{name}, time.Minute, func(_ context.Context, locks []*lock.Lock) error {
			if note := locks[0].Note(); note != "" {
				t.Errorf("holder %d was given the note %q, want none", i, note)
			}
			locks[0].LeaveNote("10 4")
			return nil
		}, nil)
		if err != nil {
			t.Fatalf("WithLocks %d: %v", i, err)
		}
	}
}

// fmtInts names a subtest after a list of node indexes.
func fmtInts(what string, ints []int) string {
	if len(ints) == 0 {
		return what + " none"
	}
	s := what
	for _, i := range ints {
		s += " " + string(rune('0'+i))
	}
	return s
}
