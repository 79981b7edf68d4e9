package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// WithLocks obtains the lock of every name, all or nothing, runs fn while keeping the leases
// alive, and releases the locks afterwards — also when fn fails or panics. locks[i] passed to fn
// is the lock for names[i]; work under a single lock that may outlast its lease passes one name.
//
// The locks are taken one by one in the order given, as Obtain takes each (waiting or retrying
// as opt says); ctx's deadline bounds the whole acquisition, not each lock, and the locks
// already held are given back if one cannot be had. The order is the caller's to choose
// because only the caller knows what its names mean (the byte order of "{10}" and "{9}" is not
// the order of 10 and 9): callers that may lock overlapping sets of names must all take them
// in one order — ascending product id, say — or two of them can each hold what the other
// waits for until their deadlines run out.
//
// While fn runs, the leases are refreshed every ttl/3. If a lock is lost (a refresh finds
// another token, or refreshes keep failing until the lease has run out) fn's context is
// cancelled at once, with ErrNotHeld as its cause, and a non-nil error from fn is returned
// wrapped so that errors.Is(err, ErrNotHeld) holds. fn's own error is returned otherwise. With
// Options.Detached, fn's context is not cancelled with ctx once the locks are held. A failure
// to release after fn succeeded is not reported: the work is done, and the lock expires with
// its lease.
//
// Duplicate names, and no names at all, are an error, returned before anything is locked.
// Other errors before fn runs are those of Obtain.
func (c *Client) WithLocks(ctx context.Context, names []string, ttl time.Duration, fn func(ctx context.Context, locks []*Lock) error, opt *Options) error {
	return withLocks(ctx, names, ttl, c.Obtain, fn, opt)
}

// withLocks is WithLocks over obtain, a Client's or a Redlock's Obtain.
func withLocks(ctx context.Context, names []string, ttl time.Duration, obtain func(context.Context, string, time.Duration, *Options) (*Lock, error), fn func(ctx context.Context, locks []*Lock) error, opt *Options) error {
	if err := checkNames(names); err != nil {
		return err
	}
	locks := make([]*Lock, 0, len(names))
	defer func() { releaseAll(ctx, locks) }()
	for _, name := range names {
		l, err := obtain(ctx, name, ttl, opt)
		if err != nil {
			return err
		}
		locks = append(locks, l)
	}
	return hold(ctx, locks, ttl, opt, fn)
}

// hold runs fn while keeping the leases of locks alive (see WithLocks), and stops the keeper
// before it returns, so that the caller may release the locks then.
func hold(ctx context.Context, locks []*Lock, ttl time.Duration, opt *Options, fn func(ctx context.Context, locks []*Lock) error) error {
	base := ctx
	if opt != nil && opt.Detached {
		base = context.WithoutCancel(ctx)
	}
	work, cancel := context.WithCancelCause(base)
	defer cancel(nil)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() { keepAlive(work, locks, ttl, cancel, stop) })
	// Stop the keeper before the caller releases, also on panic.
	defer wg.Wait()
	defer close(stop)

	err := fn(work, locks)
	if err != nil && errors.Is(context.Cause(work), ErrNotHeld) && !errors.Is(err, ErrNotHeld) {
		return fmt.Errorf("%w (%w)", err, ErrNotHeld)
	}
	return err
}

// checkNames refuses no names at all and a name given twice, before anything is locked.
func checkNames(names []string) error {
	if len(names) == 0 {
		return errors.New("lock: no names to lock")
	}
	seen := make(map[string]bool, len(names))
	for _, name := range names {
		if seen[name] {
			return fmt.Errorf("lock: name %q given twice", name)
		}
		seen[name] = true
	}
	return nil
}

// releaseAll releases every lock in locks (none may be nil), ignoring errors: a lock that
// cannot be released expires with its lease, and the caller's outcome does not depend on it.
func releaseAll(ctx context.Context, locks []*Lock) {
	for _, l := range locks {
		_ = l.Release(ctx)
	}
}

// keepAlive refreshes every lock each ttl/3 until stop is closed. It cancels the work with
// ErrNotHeld as soon as a lock is found lost, or when refreshes have failed for so long that a
// lease may have run out.
func keepAlive(work context.Context, locks []*Lock, ttl time.Duration, cancel context.CancelCauseFunc, stop <-chan struct{}) {
	interval := max(ttl/3, time.Millisecond)
	timer := time.NewTimer(nextWake(locks, interval))
	defer timer.Stop()
	for {
		select {
		case <-stop:
			return
		case <-work.Done():
			return
		case <-timer.C:
		}
		for _, l := range locks {
			if !time.Now().Before(l.leaseEnd()) {
				cancel(fmt.Errorf("%w: lease of %q ran out before it could be refreshed", ErrNotHeld, l.name))
				return
			}
			ctx, done := context.WithDeadline(work, l.leaseEnd())
			// go-redis does not give up a call when its context ends (unless the client has
			// ContextTimeoutEnabled): a refresh stuck on an unresponsive server would keep
			// the work running past the lease for as long as the client's read timeout, or
			// for ever. So the lease's end cancels the work by itself.
			expired := make(chan struct{})
			stopWatch := context.AfterFunc(ctx, func() {
				defer close(expired)
				if !time.Now().Before(l.leaseEnd()) {
					cancel(fmt.Errorf("%w: lease of %q ran out while refreshing it", ErrNotHeld, l.name))
				}
			})
			err := l.refresh(ctx, ttl)
			if !stopWatch() {
				<-expired
			}
			done()
			if errors.Is(err, ErrNotHeld) {
				cancel(fmt.Errorf("%w: %q was taken or expired", ErrNotHeld, l.name))
				return
			}
			// Any other failure is retried at the next wake-up; the lease check above
			// decides when retrying is pointless.
		}
		timer.Reset(nextWake(locks, interval))
	}
}

// nextWake returns how long to sleep before the next refresh round: the refresh interval, but
// never past the earliest lease end, so a lost lease is noticed when it ends.
func nextWake(locks []*Lock, interval time.Duration) time.Duration {
	wake := interval
	for _, l := range locks {
		wake = min(wake, time.Until(l.leaseEnd()))
	}
	return max(wake, 0)
}
