package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// WithLock obtains the lock called name (as Obtain does, within ctx's deadline), runs fn while
// keeping the lease alive, and releases the lock afterwards — also when fn fails or panics.
//
// While fn runs, the lease is refreshed every ttl/3. If the lock is lost (a refresh finds
// another token, or refreshes keep failing until the lease has run out) fn's context is
// cancelled at once, with ErrNotHeld as its cause, and a non-nil error from fn is returned
// wrapped so that errors.Is(err, ErrNotHeld) holds. fn's own error is returned otherwise.
// A failure to release after fn succeeded is not reported: the work is done, and the lock
// expires with its lease.
//
// Errors before fn runs are those of Obtain.
func (c *Client) WithLock(ctx context.Context, name string, ttl time.Duration, fn func(ctx context.Context, l *Lock) error, opt *Options) error {
	return c.WithLocks(ctx, []string{name}, ttl, func(ctx context.Context, locks []*Lock) error {
		return fn(ctx, locks[0])
	}, opt)
}

// WithLocks is WithLock for several names at once, all or nothing, taken in the order given
// (see ObtainAll for why callers must agree on one). locks[i] passed to fn is the lock for
// names[i].
func (c *Client) WithLocks(ctx context.Context, names []string, ttl time.Duration, fn func(ctx context.Context, locks []*Lock) error, opt *Options) error {
	locks, err := c.ObtainAll(ctx, names, ttl, opt)
	if err != nil {
		return err
	}
	defer releaseAll(ctx, locks)
	return hold(ctx, locks, ttl, opt, fn)
}

// leased is a held lock whose lease keepAlive can refresh: a Lock, or a Redlock's QuorumLock.
type leased interface {
	Name() string
	Until() time.Time
	Refresh(ctx context.Context, ttl time.Duration) error
	Release(ctx context.Context) error
}

// hold runs fn while keeping the leases of locks alive (see WithLocks), and stops the keeper
// before it returns, so that the caller may release the locks then.
func hold[L leased](ctx context.Context, locks []L, ttl time.Duration, opt *Options, fn func(ctx context.Context, locks []L) error) error {
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

// ObtainAll obtains a lock on every name, all or nothing, for carts and other work that needs
// several resources at once. It takes them one by one in the order given, and gives back the
// ones it holds if any cannot be had. ctx's deadline (and opt) bound the whole acquisition, not
// each lock. locks[i] is the lock for names[i]. Release them together with ReleaseAll.
//
// The order is the caller's to choose because only the caller knows what its names mean (the
// byte order of "{10}" and "{9}" is not the order of 10 and 9): callers that may lock
// overlapping sets of names must all take them in one order — ascending product id, say —
// or two of them can each hold what the other waits for until their deadlines run out.
//
// Duplicate names, and no names at all, are an error, returned before anything is locked.
// Other errors are those of Obtain.
func (c *Client) ObtainAll(ctx context.Context, names []string, ttl time.Duration, opt *Options) ([]*Lock, error) {
	if err := checkNames(names); err != nil {
		return nil, err
	}
	locks := make([]*Lock, len(names))
	for i, name := range names {
		l, err := c.Obtain(ctx, name, ttl, opt)
		if err != nil {
			releaseAll(ctx, locks[:i])
			return nil, err
		}
		locks[i] = l
	}
	return locks, nil
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

// ReleaseAll releases every lock (nil entries are skipped) and returns the errors of those that
// could not be released cleanly (see Lock.Release).
func ReleaseAll(ctx context.Context, locks []*Lock) error {
	var errs []error
	for _, l := range locks {
		if l != nil {
			errs = append(errs, l.Release(ctx))
		}
	}
	return errors.Join(errs...)
}

// releaseAll releases every lock in locks (none may be nil), ignoring errors: a lock that
// cannot be released expires with its lease, and the caller's outcome does not depend on it.
func releaseAll[L leased](ctx context.Context, locks []L) {
	for _, l := range locks {
		_ = l.Release(ctx)
	}
}

// keepAlive refreshes every lock each ttl/3 until stop is closed. It cancels the work with
// ErrNotHeld as soon as a lock is found lost, or when refreshes have failed for so long that a
// lease may have run out.
func keepAlive[L leased](work context.Context, locks []L, ttl time.Duration, cancel context.CancelCauseFunc, stop <-chan struct{}) {
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
			if !time.Now().Before(l.Until()) {
				cancel(fmt.Errorf("%w: lease of %q ran out before it could be refreshed", ErrNotHeld, l.Name()))
				return
			}
			ctx, done := context.WithDeadline(work, l.Until())
			// go-redis does not give up a call when its context ends (unless the client has
			// ContextTimeoutEnabled): a refresh stuck on an unresponsive server would keep
			// the work running past the lease for as long as the client's read timeout, or
			// for ever. So the lease's end cancels the work by itself.
			expired := make(chan struct{})
			stopWatch := context.AfterFunc(ctx, func() {
				defer close(expired)
				if !time.Now().Before(l.Until()) {
					cancel(fmt.Errorf("%w: lease of %q ran out while refreshing it", ErrNotHeld, l.Name()))
				}
			})
			err := l.Refresh(ctx, ttl)
			if !stopWatch() {
				<-expired
			}
			done()
			if errors.Is(err, ErrNotHeld) {
				cancel(fmt.Errorf("%w: %q was taken or expired", ErrNotHeld, l.Name()))
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
func nextWake[L leased](locks []L, interval time.Duration) time.Duration {
	wake := interval
	for _, l := range locks {
		wake = min(wake, time.Until(l.Until()))
	}
	return max(wake, 0)
}
