package lock_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// exclusion watches critical sections for overlaps, per lock name. Its mutex guards only the
// bookkeeping: the work between enter and leave runs outside it, so two holders of one lock
// would really be inside at once and be counted.
type exclusion struct {
	mu       sync.Mutex
	inside   map[string]int
	overlaps int
	entered  int
}

// critical is one critical section over names: enter, work, leave.
func (e *exclusion) critical(names []string, work time.Duration) {
	e.mu.Lock()
	if e.inside == nil {
		e.inside = map[string]int{}
	}
	for _, n := range names {
		if e.inside[n] > 0 {
			e.overlaps++
		}
		e.inside[n]++
	}
	e.entered++
	e.mu.Unlock()
	time.Sleep(work) // the critical section's work, so that an overlap has time to show
	e.mu.Lock()
	for _, n := range names {
		e.inside[n]--
	}
	e.mu.Unlock()
}

// lockRun takes the locks on names by one locking mode, calls critical while holding them and
// gives them back.
type lockRun func(ctx context.Context, worker int, names []string, critical func()) error

// contention describes a run of workers contending for locks.
type contention struct {
	workers, rounds int
	// names returns the names a worker locks in a round; nil locks one hot name.
	names func(worker, round int) []string
}

// hammer runs the contention through run and checks that no two critical sections on one name
// overlapped and that every one of them ran.
func hammer(t *testing.T, hot string, cfg contention, run lockRun) {
	t.Helper()
	if cfg.names == nil {
		cfg.names = func(int, int) []string { return []string{hot} }
	}
	var ex exclusion
	var errs errorList
	var wg sync.WaitGroup
	for w := range cfg.workers {
		wg.Go(func() {
			for r := range cfg.rounds {
				names := cfg.names(w, r)
				// The guard bounds a wait that only a broken lock (or a deadlock between
				// carts) would make long.
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := run(ctx, w, names, func() { ex.critical(names, 300*time.Microsecond) })
				cancel()
				if err != nil {
					errs.add(fmt.Errorf("worker %d round %d locking %q: %w", w, r, names, err))
					return
				}
			}
		})
	}
	wg.Wait()
	errs.report(t)
	if ex.overlaps != 0 {
		t.Errorf("%d critical sections overlapped another on the same name, want 0", ex.overlaps)
	}
	if got, want := ex.entered, cfg.workers*cfg.rounds; got != want {
		t.Errorf("%d critical sections ran, want %d", got, want)
	}
}

// withLocksRun locks through Client.WithLocks, worker w using clients[w%len(clients)].
func withLocksRun(clients []*lock.Client, opt *lock.Options) lockRun {
	return func(ctx context.Context, w int, names []string, critical func()) error {
		return clients[w%len(clients)].WithLocks(ctx, names, 5*time.Second, func(context.Context, []*lock.Lock) error {
			critical()
			return nil
		}, opt)
	}
}

// redlockRun locks through Redlock.Obtain and Lock.Release.
func redlockRun(r *lock.Redlock) lockRun {
	return func(ctx context.Context, _ int, names []string, critical func()) error {
		l, err := r.Obtain(ctx, names[0], 5*time.Second, &lock.Options{Retry: lock.Exponential(time.Millisecond, 20*time.Millisecond)})
		if err != nil {
			return err
		}
		critical()
		return l.Release(ctx)
	}
}

// waitingClients returns n clients of rdb for Options.Wait, closed when the test ends.
func waitingClients(t *testing.T, rdb redis.UniversalClient, n int, opts ...lock.Option) []*lock.Client {
	t.Helper()
	clients := make([]*lock.Client, n)
	for i := range clients {
		clients[i] = lock.New(rdb, opts...)
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	return clients
}

// TestMutualExclusion contends for locks in every locking mode on a single Redis (and on five
// for Redlock): never two holders of one name at once, and every critical section runs.
// TestCluster and TestSentinel run the same check on those topologies.
func TestMutualExclusion(t *testing.T) {
	t.Parallel()
	polling := &lock.Options{Retry: lock.Exponential(time.Millisecond, 20*time.Millisecond)}
	waiting := &lock.Options{Wait: true}
	tests := []struct {
		name string
		cfg  contention
		// setup returns how to lock, and the hot name.
		setup func(t *testing.T) (lockRun, string)
	}{
		{
			name: "polling",
			cfg:  contention{workers: 16, rounds: 4},
			setup: func(t *testing.T) (lockRun, string) {
				rdb, prefix := testenv.Redis(t)
				return withLocksRun([]*lock.Client{lock.New(rdb)}, polling), lockName(prefix, "hot")
			},
		},
		{
			name: "wait, one client",
			cfg:  contention{workers: 16, rounds: 4},
			setup: func(t *testing.T) (lockRun, string) {
				rdb, prefix := testenv.Redis(t)
				return withLocksRun(waitingClients(t, rdb, 1, lock.WithNamespace(prefix)), waiting), lockName(prefix, "hot")
			},
		},
		{
			name: "wait, four clients",
			cfg:  contention{workers: 16, rounds: 4},
			setup: func(t *testing.T) (lockRun, string) {
				rdb, prefix := testenv.Redis(t)
				return withLocksRun(waitingClients(t, rdb, 4, lock.WithNamespace(prefix)), waiting), lockName(prefix, "hot")
			},
		},
		{
			// Carts over overlapping products, each taken in one agreed order (ascending, as
			// stocksvc does): no two carts wait for each other in a cycle.
			name: "wait, overlapping carts in one order, three clients",
			cfg: contention{workers: 15, rounds: 4, names: func(w, r int) []string {
				carts := [][]string{{"a", "b"}, {"a", "b", "c"}, {"b", "c"}, {"a", "c"}, {"c"}}
				return carts[(w+r)%len(carts)]
			}},
			setup: func(t *testing.T) (lockRun, string) {
				rdb, prefix := testenv.Redis(t)
				run := withLocksRun(waitingClients(t, rdb, 3, lock.WithNamespace(prefix)), waiting)
				return func(ctx context.Context, w int, cart []string, critical func()) error {
					names := make([]string, len(cart))
					for i, id := range cart {
						names[i] = lockName(prefix, id)
					}
					return run(ctx, w, names, critical)
				}, ""
			},
		},
		{
			name: "redlock, five nodes",
			cfg:  contention{workers: 8, rounds: 4},
			setup: func(t *testing.T) (lockRun, string) {
				r, _, _ := startRedlock(t, 5)
				return redlockRun(r), "hot"
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run, hot := tt.setup(t)
			hammer(t, hot, tt.cfg, run)
		})
	}
}

// turn is one critical section in TestWaitRunsAreShort.
type turn struct {
	worker int
	others int // workers waiting for the lock just before the holder released it
}

// TestWaitRunsAreShort has 16 workers lock one name again and again through one Client: while
// others wait, no worker has more than two turns in a row. (Polling gives no such promise: a
// worker that releases and asks again at once often wins again.)
func TestWaitRunsAreShort(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "runs")
	const workers, rounds = 16, 12

	var mu sync.Mutex
	var turns []turn
	var waiting atomic.Int64 // workers that asked for the lock and do not have it yet
	var errs errorList
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				waiting.Add(1)
				err := withLock(ctx, c, name, 5*time.Second, func(context.Context, *lock.Lock) error {
					waiting.Add(-1)
					time.Sleep(200 * time.Microsecond) // the work
					mu.Lock()
					turns = append(turns, turn{worker: w, others: int(waiting.Load())})
					mu.Unlock()
					return nil
				}, &lock.Options{Wait: true})
				cancel()
				if err != nil {
					errs.add(err)
					return
				}
			}
		})
	}
	wg.Wait()
	errs.report(t)

	if got, want := len(turns), workers*rounds; got != want {
		t.Fatalf("%d turns, want %d", got, want)
	}
	var runs []string
	repeats := 0
	for i := 1; i < len(turns); i++ {
		if turns[i].worker == turns[i-1].worker && turns[i-1].others > 0 {
			repeats++
		}
		if i >= 2 && turns[i].worker == turns[i-1].worker && turns[i-1].worker == turns[i-2].worker &&
			turns[i-2].others > 0 && turns[i-1].others > 0 {
			runs = append(runs, fmt.Sprintf("worker %d at turns %d-%d", turns[i].worker, i-2, i))
		}
	}
	if len(runs) > 0 {
		t.Errorf("workers had three turns in a row while others waited: %s", strings.Join(runs, ", "))
	}
	if !slices.ContainsFunc(turns, func(x turn) bool { return x.others > 0 }) {
		t.Errorf("no worker ever released with others waiting: the test did not contend")
	}
	t.Logf("%d turns, %d taken again by the worker that had just released it while others waited", len(turns), repeats)
}

// TestWaitOtherClientIsNotStarved keeps a lock busy with the waiters of one client and has a
// waiter of another client ask for it: it takes its place in the same line as theirs, and gets
// its turn after those ahead of it.
func TestWaitOtherClientIsNotStarved(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	busy, other := newWaitingClient(t, rdb, prefix, nil), newWaitingClient(t, rdb, prefix, nil)
	name := lockName(prefix, "starve")
	var turns atomic.Int64 // taken by busy's workers
	stop := make(chan struct{})
	var errs errorList
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				err := withLock(ctx, busy, name, 5*time.Second, func(context.Context, *lock.Lock) error {
					turns.Add(1)
					time.Sleep(time.Millisecond) // the work
					return nil
				}, &lock.Options{Wait: true})
				cancel()
				if err != nil {
					errs.add(err)
					return
				}
			}
		})
	}
	// The lock is busy, and given from worker to worker.
	waitFor(t, func() bool { return turns.Load() > 20 })

	// Far below what busy's workers would keep the lock for if they never let go.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	before := turns.Load()
	l, err := other.Obtain(ctx, name, 5*time.Second, &lock.Options{Wait: true})
	cancel()
	during := turns.Load() - before
	if err == nil {
		release(t, l)
	}
	close(stop)
	wg.Wait()
	errs.report(t)
	if err != nil {
		t.Fatalf("the other client's waiter: %v, want the lock while the first client kept it busy", err)
	}
	t.Logf("the first client's workers had %d turns while the other client's waiter waited", during)
}
