package lock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// obtain takes name or fails the test. A waiting Obtain (Options.Wait) gives up after the guard:
// a broken queue must fail the test, not hang it.
func obtain(t testing.TB, c *lock.Client, name string, ttl time.Duration, opt *lock.Options) *lock.Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	l, err := c.Obtain(ctx, name, ttl, opt)
	if err != nil {
		t.Fatalf("Obtain(%q): %v", name, err)
	}
	return l
}

func TestObtainStoresTokenUnderName(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "stored")

	l := obtain(t, c, name, longLease, nil)

	if got, want := l.Name(), name; got != want {
		t.Errorf("Name() = %q, want %q", got, want)
	}
	if l.Token() == "" {
		t.Fatal("Token() is empty")
	}
	if got, want := value(t, rdb, name), l.Token(); got != want {
		t.Errorf("GET %s = %q, want the holder's token %q", name, got, want)
	}
	if until := time.Until(l.Until()); until <= 0 || until > longLease {
		t.Errorf("Until() is %v from now, want within (0, %v]", until, longLease)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}
	if exists(t, rdb, name) {
		t.Errorf("key %s still exists after Release", name)
	}
}

func TestObtainRejectsSubMillisecondTTL(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)

	for _, ttl := range []time.Duration{0, -time.Second, 999 * time.Microsecond} {
		name := lockName(prefix, "ttl-"+ttl.String())
		l, err := c.Obtain(t.Context(), name, ttl, nil)
		if err == nil {
			t.Errorf("Obtain with ttl %v = %v, want an error", ttl, l)
			continue
		}
		if errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("Obtain with ttl %v: error %v is ErrNotObtained, want a usage error", ttl, err)
		}
		if exists(t, rdb, name) {
			t.Errorf("Obtain with ttl %v left key %s behind", ttl, name)
		}
	}
}

func TestReleaseByFormerHolderLeavesNewHolderAlone(t *testing.T) {
	t.Parallel()
	for _, how := range []loss{lossDeleted, lossExpired} {
		t.Run(string(how), func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb)
			name := lockName(prefix, "shared")

			a := obtain(t, c, name, ttlFor(how), nil)
			lose(t, rdb, name, how)
			b := obtain(t, c, name, longLease, nil)

			if err := a.Release(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("former holder's Release = %v, want ErrNotHeld", err)
			}
			if got, want := value(t, rdb, name), b.Token(); got != want {
				t.Errorf("after the former holder's Release, GET %s = %q, want the new holder's token %q", name, got, want)
			}
			if ttl := lease(t, rdb, name); ttl <= 0 {
				t.Errorf("new holder's PTTL after the former holder's Release = %v, want it still held with its lease", ttl)
			}
		})
	}
}

func TestReleaseTwice(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "twice")
	l := obtain(t, c, name, longLease, nil)

	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("first Release: %v", err)
	}
	// Someone else takes the lock: a second Release must neither fail nor touch it.
	other := obtain(t, c, name, longLease, nil)
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("second Release = %v, want nil", err)
	}
	if got, want := value(t, rdb, name), other.Token(); got != want {
		t.Errorf("after a second Release, GET %s = %q, want the new holder's token %q", name, got, want)
	}
}

func TestReleaseAfterExpiry(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "expired")
	l := obtain(t, c, name, lossTTL, nil)
	waitExpired(t, rdb, name)

	if err := l.Release(t.Context()); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Release after expiry = %v, want ErrNotHeld", err)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("Release after a Release that reported ErrNotHeld = %v, want nil", err)
	}
}

func TestReleaseIgnoresCancelledContext(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "cancelled")
	l := obtain(t, c, name, longLease, nil)

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := l.Release(ctx); err != nil {
		t.Fatalf("Release with a cancelled context: %v", err)
	}
	if exists(t, rdb, name) {
		t.Errorf("key %s still exists after Release with a cancelled context", name)
	}
}

func TestRefreshAfterLoss(t *testing.T) {
	t.Parallel()
	for _, how := range []loss{lossDeleted, lossExpired} {
		t.Run(string(how), func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb)
			name := lockName(prefix, "refresh")

			l := obtain(t, c, name, ttlFor(how), nil)
			lose(t, rdb, name, how)

			if err := l.Refresh(t.Context(), longLease); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("Refresh after the lock was %s = %v, want ErrNotHeld", how, err)
			}
			if exists(t, rdb, name) {
				t.Errorf("Refresh of a lost lock recreated key %s", name)
			}

			// Nor may it extend a lock that someone else took since.
			other := obtain(t, c, name, time.Minute, nil)
			if err := l.Refresh(t.Context(), time.Hour); !errors.Is(err, lock.ErrNotHeld) {
				t.Errorf("Refresh of a lock now held by another = %v, want ErrNotHeld", err)
			}
			if got, want := value(t, rdb, name), other.Token(); got != want {
				t.Fatalf("GET %s = %q after the former holder's Refresh, want the new holder's token %q", name, got, want)
			}
			if ttl := lease(t, rdb, name); ttl > time.Minute {
				t.Errorf("new holder's PTTL = %v after the former holder's Refresh(1h), want at most 1m", ttl)
			}
		})
	}
}

func TestRefreshAfterRelease(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "released")
	l := obtain(t, c, name, longLease, nil)
	if err := l.Release(t.Context()); err != nil {
		t.Fatalf("Release: %v", err)
	}

	if err := l.Refresh(t.Context(), longLease); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Refresh after Release = %v, want ErrNotHeld", err)
	}
	if exists(t, rdb, name) {
		t.Errorf("Refresh after Release recreated key %s", name)
	}
}

func TestRefreshExtendsLease(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "extend")
	const short, long = 2 * time.Second, time.Hour
	l := obtain(t, c, name, short, nil)
	untilBefore := l.Until()

	if err := l.Refresh(t.Context(), long); err != nil {
		t.Fatalf("Refresh while held: %v", err)
	}

	if got, want := value(t, rdb, name), l.Token(); got != want {
		t.Fatalf("GET %s after Refresh = %q, want the holder's token %q", name, got, want)
	}
	if ttl := lease(t, rdb, name); ttl <= short || ttl > long {
		t.Errorf("PTTL after Refresh(%v) = %v, want within (%v, %v]", long, ttl, short, long)
	}
	if got := l.Until(); !got.After(untilBefore.Add(long - short - time.Minute)) {
		t.Errorf("Until() after Refresh(%v) = %v, was %v: not extended", long, got, untilBefore)
	}
	if err := l.Refresh(t.Context(), 0); err == nil || errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Refresh(0) = %v, want a usage error other than ErrNotHeld", err)
	}
}

func TestFenceIncreases(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "fence")

	// A new counter is seeded from the server clock in microseconds, then incremented.
	before, err := rdb.Time(t.Context()).Result()
	if err != nil {
		t.Fatalf("TIME: %v", err)
	}
	var last int64
	for i := range 10 {
		l := obtain(t, c, name, longLease, nil)
		fence := l.Fence()
		if i == 0 {
			after, err := rdb.Time(t.Context()).Result()
			if err != nil {
				t.Fatalf("TIME: %v", err)
			}
			if fence <= before.UnixMicro() || fence > after.UnixMicro()+1 {
				t.Errorf("first Fence() = %d, want the server clock in µs plus one, within (%d, %d]",
					fence, before.UnixMicro(), after.UnixMicro()+1)
			}
		} else if fence <= last {
			t.Errorf("obtain #%d: Fence() = %d, want more than the previous %d", i+1, fence, last)
		}
		last = fence
		if err := l.Release(t.Context()); err != nil {
			t.Fatalf("Release: %v", err)
		}
	}

	// A Redis restart without persistence loses the counter.
	del(t, rdb, fenceKey(name))
	l := obtain(t, c, name, longLease, nil)
	if got := l.Fence(); got <= last {
		t.Errorf("Fence() after the counter was lost = %d, want more than the last token %d", got, last)
	}
}

func TestFenceless(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	tests := []struct {
		name        string
		opt         *lock.Options
		wantFenced  bool
		wantCounter bool
	}{
		{name: "default", opt: nil, wantFenced: true, wantCounter: true},
		{name: "fenceless", opt: &lock.Options{Fenceless: true}, wantFenced: false, wantCounter: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := lockName(prefix, tt.name)
			l := obtain(t, c, name, longLease, tt.opt)

			if got := l.Fence() != 0; got != tt.wantFenced {
				t.Errorf("Fence() = %d: fenced %v, want %v", l.Fence(), got, tt.wantFenced)
			}
			if got := exists(t, rdb, fenceKey(name)); got != tt.wantCounter {
				t.Errorf("counter key %s exists: %v, want %v", fenceKey(name), got, tt.wantCounter)
			}
			if got, want := value(t, rdb, name), l.Token(); got != want {
				t.Errorf("GET %s = %q, want the holder's token %q", name, got, want)
			}
		})
	}
}

func TestObtainErrors(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	held := lockName(prefix, "held")
	// Held for longer than the whole package may take: the parallel subtests below may start
	// late on a busy machine.
	obtain(t, c, held, time.Hour, nil)

	// A server that refuses connections: nothing listens on port 1.
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = down.Close() })

	cancelled, cancel := context.WithCancel(t.Context())
	cancel()

	tests := []struct {
		name   string
		client *lock.Client
		lock   string
		ctx    func(t *testing.T) context.Context
		opt    *lock.Options
		check  func(t *testing.T, err error)
	}{
		{
			name: "held, no options", client: c, lock: held,
			check: wantErrorIs(lock.ErrNotObtained),
		},
		{
			name: "held, NoRetry", client: c, lock: held, opt: &lock.Options{Retry: lock.NoRetry()},
			check: wantErrorIs(lock.ErrNotObtained),
		},
		{
			name: "held, limited retries", client: c, lock: held,
			opt:   &lock.Options{Retry: lock.Limit(lock.Fixed(time.Millisecond), 3)},
			check: wantErrorIs(lock.ErrNotObtained),
		},
		{
			name: "held, retrying until the deadline", client: c, lock: held,
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
				t.Cleanup(cancel)
				return ctx
			},
			opt: &lock.Options{Retry: lock.Linear(5*time.Millisecond, 20*time.Millisecond)},
			check: func(t *testing.T, err error) {
				t.Helper()
				wantErrorIs(lock.ErrNotObtained)(t, err)
				if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("error %v is context.DeadlineExceeded, want only ErrNotObtained", err)
				}
			},
		},
		{
			// A context whose deadline only shows when it strikes: Obtain cannot give up ahead
			// of it, so the deadline interrupts a pause, and still means "not obtained".
			name: "held, deadline strikes during a pause", client: c, lock: held,
			ctx: func(t *testing.T) context.Context {
				ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
				t.Cleanup(cancel)
				return hiddenDeadline{ctx}
			},
			opt: &lock.Options{Retry: lock.Fixed(time.Hour)},
			check: func(t *testing.T, err error) {
				t.Helper()
				wantErrorIs(lock.ErrNotObtained)(t, err)
				if errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("error %v is context.DeadlineExceeded, want only ErrNotObtained", err)
				}
			},
		},
		{
			name: "held, cancelled context", client: c, lock: held,
			ctx:   func(*testing.T) context.Context { return cancelled },
			opt:   &lock.Options{Retry: lock.Fixed(time.Millisecond)},
			check: wantContextError(context.Canceled),
		},
		{
			name: "free, cancelled context", client: c, lock: lockName(prefix, "free"),
			ctx: func(*testing.T) context.Context { return cancelled },
			check: func(t *testing.T, err error) {
				t.Helper()
				wantContextError(context.Canceled)(t, err)
				if exists(t, rdb, lockName(prefix, "free")) {
					t.Errorf("Obtain with a cancelled context created the lock")
				}
			},
		},
		{
			name: "redis unreachable", client: lock.New(down), lock: held,
			opt: &lock.Options{Retry: lock.Fixed(time.Millisecond)},
			check: func(t *testing.T, err error) {
				t.Helper()
				if err == nil {
					t.Fatal("Obtain succeeded against a closed port")
				}
				if errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("Obtain against a closed port = %v, want a connection error, neither ErrNotObtained nor a context error", err)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			if tt.ctx != nil {
				ctx = tt.ctx(t)
			}
			l, err := tt.client.Obtain(ctx, tt.lock, longLease, tt.opt)
			if l != nil {
				t.Errorf("Obtain returned a lock (%v) with error %v", l.Token(), err)
			}
			tt.check(t, err)
		})
	}
}

// hiddenDeadline is a context that does not report its deadline ahead of time.
type hiddenDeadline struct{ context.Context }

func (hiddenDeadline) Deadline() (time.Time, bool) { return time.Time{}, false }

// wantErrorIs returns a check that err matches want.
func wantErrorIs(want error) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("error = %v, want %v", err, want)
		}
	}
}

// wantContextError returns a check that err is the context error want and not ErrNotObtained.
func wantContextError(want error) func(t *testing.T, err error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Errorf("error = %v, want %v", err, want)
		}
		if errors.Is(err, lock.ErrNotObtained) {
			t.Errorf("error %v is ErrNotObtained, want only the context's error", err)
		}
	}
}

// signalRetry is a RetryStrategy that reports, by closing failed, that an attempt has failed.
type signalRetry struct {
	lock.RetryStrategy
	once   sync.Once
	failed chan struct{}
}

func newSignalRetry(s lock.RetryStrategy) *signalRetry {
	return &signalRetry{RetryStrategy: s, failed: make(chan struct{})}
}

func (s *signalRetry) Backoff(failedAttempts int) time.Duration {
	s.once.Do(func() { close(s.failed) })
	return s.RetryStrategy.Backoff(failedAttempts)
}

func TestObtainWaitsForRelease(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb)
	name := lockName(prefix, "wait")
	holder := obtain(t, c, name, longLease, nil)

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	retry := newSignalRetry(lock.Fixed(5 * time.Millisecond))
	type result struct {
		l   *lock.Lock
		err error
	}
	done := make(chan result, 1)
	go func() {
		l, err := c.Obtain(ctx, name, longLease, &lock.Options{Retry: retry})
		done <- result{l, err}
	}()

	select {
	case <-retry.failed:
	case r := <-done:
		t.Fatalf("Obtain returned before it found the lock held: %v, %v", r.l, r.err)
	}
	if err := holder.Release(t.Context()); err != nil {
		cancel()
		<-done
		t.Fatalf("holder's Release: %v", err)
	}

	r := <-done
	if r.err != nil {
		t.Fatalf("waiting Obtain = %v, want the lock once the holder released it", r.err)
	}
	if got, want := value(t, rdb, name), r.l.Token(); got != want {
		t.Errorf("GET %s = %q, want the waiter's token %q", name, got, want)
	}
	if got, prev := r.l.Fence(), holder.Fence(); got <= prev {
		t.Errorf("waiter's Fence() = %d, want more than the holder's %d", got, prev)
	}
}
