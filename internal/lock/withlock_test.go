package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// guard bounds a wait that only a broken lock would make long: it fails a hung test, it does not
// synchronise anything.
const guard = 10 * time.Second

var errGuard = errors.New("test guard: waited too long")

// errorList collects errors from goroutines, to be reported by the test's own goroutine.
type errorList struct {
	mu   sync.Mutex
	errs []error
}

func (e *errorList) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.errs = append(e.errs, err)
}

func (e *errorList) report(t *testing.T) {
	t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, err := range e.errs {
		if i == 5 {
			t.Errorf("... and %d more errors", len(e.errs)-i)
			break
		}
		t.Error(err)
	}
}

// withLock is WithLocks for one name, for the tests about a single lock.
func withLock(ctx context.Context, c *lock.Client, name string, ttl time.Duration, fn func(ctx context.Context, l *lock.Lock) error, opt *lock.Options) error {
	return c.WithLocks(ctx, []string{name}, ttl, func(ctx context.Context, locks []*lock.Lock) error {
		return fn(ctx, locks[0])
	}, opt)
}

func TestWithLockMutualExclusion(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "mutex")
	const workers, rounds = 50, 4
	opt := &lock.Options{Retry: lock.Exponential(time.Millisecond, 20*time.Millisecond)}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	var inside, overlaps, completed atomic.Int64
	var errs errorList
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for r := range rounds {
				err := withLock(ctx, c, name, 5*time.Second, func(context.Context, *lock.Lock) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					defer inside.Add(-1)
					time.Sleep(time.Millisecond) // simulated work, so that an overlap has time to show
					return nil
				}, opt)
				if err != nil {
					errs.add(fmt.Errorf("worker %d round %d: WithLocks: %w", w, r, err))
					return
				}
				completed.Add(1)
			}
		})
	}
	wg.Wait()

	errs.report(t)
	if got := overlaps.Load(); got != 0 {
		t.Errorf("%d critical sections overlapped another, want 0", got)
	}
	if got, want := completed.Load(), int64(workers*rounds); got != want {
		t.Errorf("%d critical sections completed, want %d", got, want)
	}
}

func TestWithLockFencesIncreaseAcrossHolders(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "fences")
	const workers, rounds = 10, 5
	opt := &lock.Options{Retry: lock.Exponential(time.Millisecond, 10*time.Millisecond)}
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	// Under the lock, a plain variable is enough; the race detector checks that claim too.
	var last int64
	var regressions atomic.Int64
	var errs errorList
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range rounds {
				err := withLock(ctx, c, name, 5*time.Second, func(_ context.Context, l *lock.Lock) error {
					if l.Fence() <= last {
						regressions.Add(1)
					}
					last = l.Fence()
					return nil
				}, opt)
				if err != nil {
					errs.add(err)
					return
				}
			}
		})
	}
	wg.Wait()

	errs.report(t)
	if got := regressions.Load(); got != 0 {
		t.Errorf("%d holders got a fencing token no larger than the previous holder's, want 0", got)
	}
}

func TestWithLockCancelsWorkWhenLockIsLost(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		taken bool // another holder obtains the lock after the key is deleted
	}{
		{name: "deleted"},
		{name: "taken by another holder", taken: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb)
			name := lockName(prefix, "lost")

			started := make(chan struct{})
			var cause error // written by fn, read after done
			done := make(chan error, 1)
			go func() {
				done <- withLock(t.Context(), c, name, 600*time.Millisecond, func(ctx context.Context, l *lock.Lock) error {
					close(started)
					select {
					case <-ctx.Done():
						cause = context.Cause(ctx)
						return ctx.Err()
					case <-time.After(guard):
						return errGuard
					}
				}, nil)
			}()
			select {
			case <-started:
			case err := <-done:
				t.Fatalf("WithLocks returned before running fn: %v", err)
			}

			del(t, rdb, name)
			var other *lock.Lock
			if tt.taken {
				other = obtain(t, c, name, longLease, nil)
			}
			err := <-done

			if errors.Is(err, errGuard) {
				t.Fatalf("fn's context was not cancelled within %v of losing the lock", guard)
			}
			if !errors.Is(cause, lock.ErrNotHeld) {
				t.Errorf("context.Cause of fn's context = %v, want ErrNotHeld", cause)
			}
			// A refresh (every ttl/3) must have found the lock lost; the fallback for refreshes
			// that keep failing says the lease "ran out" instead.
			if cause != nil && strings.Contains(cause.Error(), "ran out") {
				t.Errorf("cause = %v; want the loss found by a refresh, not by the lease running out", cause)
			}
			if !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("WithLocks = %v, want an error matching ErrNotHeld", err)
			}
			if !errors.Is(err, context.Canceled) {
				t.Errorf("WithLocks = %v, want fn's own error (context.Canceled) kept in the chain", err)
			}
			if other != nil {
				if got, want := value(t, rdb, name), other.Token(); got != want {
					t.Errorf("after WithLocks lost the lock, GET %s = %q, want the new holder's token %q", name, got, want)
				}
			}
		})
	}
}

func TestWithLockRefreshesLease(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "refresh")
	const ttl = 300 * time.Millisecond

	// fn works until a full lease past the end of the original one; only refreshes can have
	// kept the lock alive until then.
	err := withLock(t.Context(), c, name, ttl, func(ctx context.Context, l *lock.Lock) error {
		end := l.Until().Add(ttl)
		select {
		case <-ctx.Done():
			return fmt.Errorf("work cancelled while the lock was held: %w", context.Cause(ctx))
		case <-time.After(time.Until(end)): // simulated work
		}
		if got, want := value(t, rdb, name), l.Token(); got != want {
			return fmt.Errorf("two leases in, GET %s = %q, want the holder's token %q", name, got, want)
		}
		if got := l.Until(); !got.After(end.Add(-ttl)) {
			return fmt.Errorf("Until() = %v, want it extended past the original lease end %v", got, end.Add(-ttl))
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
}

func TestWithLockReleases(t *testing.T) {
	t.Parallel()
	errBoom := errors.New("boom")
	tests := []struct {
		name      string
		fn        func() error // runs under the lock
		wantErr   error
		wantPanic any
	}{
		{name: "fn succeeds", fn: func() error { return nil }},
		{name: "fn fails", fn: func() error { return errBoom }, wantErr: errBoom},
		{name: "fn panics", fn: func() error { panic(errBoom) }, wantPanic: errBoom},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb)
			name := lockName(prefix, "release")

			var heldToken, ownToken string
			var err error
			var recovered any
			func() {
				defer func() { recovered = recover() }()
				err = withLock(t.Context(), c, name, longLease, func(_ context.Context, l *lock.Lock) error {
					heldToken, ownToken = value(t, rdb, name), l.Token()
					return tt.fn()
				}, nil)
			}()

			if recovered != tt.wantPanic {
				t.Errorf("recovered %v, want %v", recovered, tt.wantPanic)
			}
			if err != tt.wantErr {
				t.Errorf("WithLocks = %v, want fn's error %v unchanged", err, tt.wantErr)
			}
			if heldToken == "" || heldToken != ownToken {
				t.Fatalf("while fn ran, GET %s = %q, want the lock's token %q", name, heldToken, ownToken)
			}
			if exists(t, rdb, name) {
				t.Errorf("key %s still exists after WithLocks returned", name)
			}
		})
	}
}

func TestWithLockDetached(t *testing.T) {
	t.Parallel()
	tests := []struct {
		detached bool
		wantErr  error // fn's context's error after the caller's context was cancelled
	}{
		{detached: false, wantErr: context.Canceled},
		{detached: true, wantErr: nil},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("detached=%v", tt.detached), func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb)
			name := lockName(prefix, "detached")

			parent, cancelParent := context.WithCancel(t.Context())
			defer cancelParent()
			started, proceed := make(chan struct{}), make(chan struct{})
			var fnErr, fnCause error // written by fn, read after done
			done := make(chan error, 1)
			go func() {
				done <- withLock(parent, c, name, longLease, func(ctx context.Context, _ *lock.Lock) error {
					close(started)
					<-proceed
					fnErr, fnCause = ctx.Err(), context.Cause(ctx)
					return ctx.Err()
				}, &lock.Options{Detached: tt.detached})
			}()
			select {
			case <-started:
			case err := <-done:
				t.Fatalf("WithLocks returned before running fn: %v", err)
			}
			cancelParent()
			close(proceed)
			err := <-done

			if fnErr != tt.wantErr {
				t.Errorf("fn's ctx.Err() after the caller cancelled = %v, want %v", fnErr, tt.wantErr)
			}
			if errors.Is(fnCause, lock.ErrNotHeld) {
				t.Errorf("context.Cause of fn's context = %v, want no ErrNotHeld: the lock was not lost", fnCause)
			}
			if !errors.Is(err, tt.wantErr) || errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("WithLocks = %v, want fn's error %v and no ErrNotHeld", err, tt.wantErr)
			}
			if exists(t, rdb, name) {
				t.Errorf("key %s still exists after WithLocks returned: released under a cancelled context?", name)
			}
		})
	}
}

func TestWithLockFenceless(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "fenceless")

	var fence int64 = -1
	err := withLock(t.Context(), c, name, longLease, func(_ context.Context, l *lock.Lock) error {
		fence = l.Fence()
		return nil
	}, &lock.Options{Fenceless: true})
	if err != nil {
		t.Fatalf("WithLocks: %v", err)
	}
	if fence != 0 {
		t.Errorf("Fence() = %d, want 0", fence)
	}
	if exists(t, rdb, fenceKey(name)) {
		t.Errorf("counter key %s exists for a fenceless lock", fenceKey(name))
	}
}

func TestWithLockNotObtained(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "busy")
	holder := obtain(t, c, name, longLease, nil)

	ran := false
	err := withLock(t.Context(), c, name, longLease, func(context.Context, *lock.Lock) error {
		ran = true
		return nil
	}, nil)
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Errorf("WithLocks on a held name = %v, want ErrNotObtained", err)
	}
	if ran {
		t.Error("fn ran without the lock")
	}
	if got, want := value(t, rdb, name), holder.Token(); got != want {
		t.Errorf("GET %s = %q, want the holder's token %q", name, got, want)
	}
}

func TestWithLocksAllOrNothing(t *testing.T) {
	t.Parallel()
	// Every case locks c, a and b, in that order; the one already held decides how many were
	// obtained before WithLocks found it held and had to give them back.
	for _, heldID := range []string{"a", "b", "c"} {
		t.Run("held="+heldID, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb)
			names := []string{lockName(prefix, "c"), lockName(prefix, "a"), lockName(prefix, "b")}
			held := lockName(prefix, heldID)
			holder := obtain(t, c, held, longLease, nil)

			ran := false
			err := c.WithLocks(t.Context(), names, longLease, func(context.Context, []*lock.Lock) error {
				ran = true
				return nil
			}, nil)

			if !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("WithLocks = %v, want ErrNotObtained", err)
			}
			if ran {
				t.Error("fn ran without all its locks")
			}
			for _, name := range names {
				if name == held {
					if got, want := value(t, rdb, name), holder.Token(); got != want {
						t.Errorf("GET %s = %q, want the holder's token %q", name, got, want)
					}
					continue
				}
				if exists(t, rdb, name) {
					t.Errorf("key %s left locked after WithLocks gave up", name)
				}
			}
		})
	}
}

func TestWithLocksOrder(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	names := []string{lockName(prefix, "c"), lockName(prefix, "a"), lockName(prefix, "d"), lockName(prefix, "b")}

	var got [][2]string // name and value in Redis, per lock, as fn saw them
	var want [][2]string
	err := c.WithLocks(t.Context(), names, longLease, func(_ context.Context, locks []*lock.Lock) error {
		if len(locks) != len(names) {
			return fmt.Errorf("fn got %d locks, want %d", len(locks), len(names))
		}
		for i, l := range locks {
			got = append(got, [2]string{l.Name(), value(t, rdb, names[i])})
			want = append(want, [2]string{names[i], l.Token()})
		}
		return nil
	}, nil)
	if err != nil {
		t.Fatalf("WithLocks: %v", err)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("locks[%d]: name and key's value %q, want %q", i, got[i], want[i])
		}
	}
	for _, name := range names {
		if exists(t, rdb, name) {
			t.Errorf("key %s still exists after WithLocks returned", name)
		}
	}
}

func TestWithLocksBadNames(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	a, b := lockName(prefix, "a"), lockName(prefix, "b")
	tests := []struct {
		name  string
		names []string
	}{
		{name: "none", names: nil},
		{name: "duplicate", names: []string{b, a, b}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ran := false
			err := c.WithLocks(t.Context(), tt.names, longLease, func(context.Context, []*lock.Lock) error {
				ran = true
				return nil
			}, nil)
			if err == nil || errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("WithLocks(%q) = %v, want a usage error other than ErrNotObtained", tt.names, err)
			}
			if ran {
				t.Error("fn ran")
			}
			for _, name := range tt.names {
				if exists(t, rdb, name) {
					t.Errorf("key %s was locked", name)
				}
			}
		})
	}
}

// TestWithLocksOverlappingSetsInOneOrder has callers lock sets of names that overlap, each set
// taken in one agreed order, polling: no two wait for each other in a cycle, and no two
// critical sections overlap.
func TestWithLocksOverlappingSetsInOneOrder(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	a, b, cc := lockName(prefix, "a"), lockName(prefix, "b"), lockName(prefix, "c")
	const rounds = 100
	opt := &lock.Options{Retry: lock.Exponential(time.Millisecond, 10*time.Millisecond)}

	var inside, overlaps, completed atomic.Int64
	var errs errorList
	var wg sync.WaitGroup
	for _, names := range [][]string{{a, b}, {b, cc}} {
		wg.Go(func() {
			for r := range rounds {
				// A bounded wait per call: callers waiting for each other in a cycle would
				// each give up with ErrNotObtained instead of hanging the test.
				ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
				err := c.WithLocks(ctx, names, 5*time.Second, func(context.Context, []*lock.Lock) error {
					if inside.Add(1) != 1 {
						overlaps.Add(1)
					}
					inside.Add(-1)
					return nil
				}, opt)
				cancel()
				if err != nil {
					errs.add(fmt.Errorf("locking %q, round %d: %w", names, r, err))
					return
				}
				completed.Add(1)
			}
		})
	}
	wg.Wait()

	errs.report(t)
	if got := overlaps.Load(); got != 0 {
		t.Errorf("%d critical sections overlapped another, want 0", got)
	}
	if got, want := completed.Load(), int64(2*rounds); got != want {
		t.Errorf("%d critical sections completed, want %d", got, want)
	}
}

// orderObserver records the names of the locks a client obtains, in order.
type orderObserver struct {
	mu    sync.Mutex
	names []string
}

func (o *orderObserver) Obtained(name string, _ time.Duration, _ bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.names = append(o.names, name)
}
func (o *orderObserver) NotObtained(string, time.Duration) {}
func (o *orderObserver) Lost(string)                       {}
func (o *orderObserver) RefreshFailed(string, error)       {}

func (o *orderObserver) take() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	names := o.names
	o.names = nil
	return names
}

// TestWithLocksTakesNamesInCallerOrder checks that WithLocks takes its locks in the order the
// caller gives, not in byte order, in which "{10}" comes before "{9}": a caller that locks
// products in ascending id order (as stocksvc does) locks {9} first.
func TestWithLocksTakesNamesInCallerOrder(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	obs := &orderObserver{}
	c := lock.New(rdb, lock.WithObserver(obs))
	p2, p9, p10 := lockName(prefix, "2"), lockName(prefix, "9"), lockName(prefix, "10")
	for _, names := range [][]string{{p9, p10}, {p10, p9}, {p9, p10, p2}, {p2, p10, p9}} {
		err := c.WithLocks(t.Context(), names, time.Minute, func(_ context.Context, locks []*lock.Lock) error {
			for i, l := range locks {
				if l.Name() != names[i] {
					t.Errorf("WithLocks(%q): locks[%d] is %q", names, i, l.Name())
				}
			}
			return nil
		}, nil)
		if err != nil {
			t.Fatalf("WithLocks(%q): %v", names, err)
		}
		for _, name := range names {
			if exists(t, rdb, name) {
				t.Errorf("WithLocks(%q) left %s locked", names, name)
			}
		}
		if got := obs.take(); !slices.Equal(got, names) {
			t.Errorf("WithLocks(%q) took %q", names, got)
		}
	}

	// With {9} held, a caller asking for {9} then {10} stops at {9}: {10} is never taken,
	// so its fencing counter is never even created.
	q9, q10 := lockName(prefix, "held-9"), lockName(prefix, "held-10")
	holder := obtain(t, lock.New(rdb), q9, time.Minute, nil)
	defer release(t, holder)
	err := c.WithLocks(t.Context(), []string{q9, q10}, time.Minute, func(context.Context, []*lock.Lock) error {
		t.Error("fn ran although {9} was held")
		return nil
	}, nil)
	if !errors.Is(err, lock.ErrNotObtained) {
		t.Fatalf("WithLocks with {9} held = %v, want ErrNotObtained", err)
	}
	if exists(t, rdb, q10) || exists(t, rdb, fenceKey(q10)) {
		t.Errorf("{10} was taken although {9}, asked for first, was held")
	}
}

func TestWithLocksCancelsWorkWhenAnyLockIsLost(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	names := []string{lockName(prefix, "a"), lockName(prefix, "b")}

	started := make(chan struct{})
	var cause error // written by fn, read after done
	done := make(chan error, 1)
	go func() {
		done <- c.WithLocks(t.Context(), names, 300*time.Millisecond, func(ctx context.Context, _ []*lock.Lock) error {
			close(started)
			select {
			case <-ctx.Done():
				cause = context.Cause(ctx)
				return ctx.Err()
			case <-time.After(guard):
				return errGuard
			}
		}, nil)
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("WithLocks returned before running fn: %v", err)
	}
	del(t, rdb, names[1])
	err := <-done

	if !errors.Is(cause, lock.ErrNotHeld) {
		t.Errorf("context.Cause of fn's context = %v, want ErrNotHeld", cause)
	}
	if !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("WithLocks = %v, want an error matching ErrNotHeld", err)
	}
	if exists(t, rdb, names[0]) {
		t.Errorf("key %s, whose lock was not lost, still exists after WithLocks returned", names[0])
	}
}
