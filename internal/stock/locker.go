package stock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
)

// Locker gives exclusive access to named resources across every replica.
type Locker interface {
	// WithLocks runs fn while holding a lock on every name; fences[i] is the fencing token of
	// names[i]. fn's context is cancelled if a lock is lost. It returns ErrBusy when the locks
	// could not be had within the wait budget, ErrUnavailable (wrapped) when the lock service
	// is unreachable, the context's error when ctx ends, and otherwise fn's error.
	WithLocks(ctx context.Context, names []string, fn func(ctx context.Context, fences []int64) error) error

	// Claim takes name for ttl without waiting. It returns a function that gives the claim
	// back, errClaimed when someone else holds it, and ErrUnavailable (wrapped) when the lock
	// service is unreachable.
	Claim(ctx context.Context, name string, ttl time.Duration) (release func(), err error)
}

// errClaimed means a claim is held by someone else.
var errClaimed = errors.New("stock: claimed")

// RedisLocker is the Locker over package lock.
type RedisLocker struct {
	client *lock.Client
	cfg    LockConfig
}

// LockConfig tunes RedisLocker.
type LockConfig struct {
	// TTL is the lease of each lock; it is refreshed while the work runs. Default 10s.
	TTL time.Duration
	// Wait bounds how long an order waits for its locks. Default 2s.
	Wait time.Duration
	// Claims is the client idempotency claims are taken with. Default: the same client as the
	// product locks. A separate one keeps claims out of the product locks' metrics.
	Claims *lock.Client
	// Retry, when set, makes waiters poll Redis as it says, the way most lock libraries do.
	// Nil (the default) waits without polling: a replica's waiters for a product queue in
	// arrival order, only the first contends in Redis, woken by the holder's release, and a
	// holder hands the lock straight to the next waiter of its replica (lock.Options.Wait).
	Retry lock.RetryStrategy
}

func (c LockConfig) withDefaults() LockConfig {
	if c.TTL <= 0 {
		c.TTL = 10 * time.Second
	}
	if c.Wait <= 0 {
		c.Wait = 2 * time.Second
	}
	return c
}

var _ Locker = (*RedisLocker)(nil)

// NewRedisLocker returns a Locker that takes its locks through client.
func NewRedisLocker(client *lock.Client, cfg LockConfig) *RedisLocker {
	if cfg.Claims == nil {
		cfg.Claims = client
	}
	return &RedisLocker{client: client, cfg: cfg.withDefaults()}
}

// WithLocks implements Locker. The wait budget bounds only the acquisition: once the locks are
// held the work is detached from it and from the caller's cancellation (a purchase that has
// started is allowed to finish so its outcome is known), and only a lost lock cancels it.
func (r *RedisLocker) WithLocks(ctx context.Context, names []string, fn func(ctx context.Context, fences []int64) error) error {
	waitCtx, cancel := context.WithTimeout(ctx, r.cfg.Wait)
	defer cancel()
	ran := false
	err := r.client.WithLocks(waitCtx, names, r.cfg.TTL, func(ctx context.Context, locks []*lock.Lock) error {
		ran = true
		fences := make([]int64, len(locks))
		for i, l := range locks {
			fences[i] = l.Fence()
		}
		return fn(ctx, fences)
	}, &lock.Options{Wait: r.cfg.Retry == nil, Retry: r.cfg.Retry, Detached: true})
	if ran {
		if errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, ErrLockLost) {
			return fmt.Errorf("%w: %w", ErrLockLost, err)
		}
		return err
	}
	// Contention is what package lock says it is: ErrNotObtained, the lock seen held (or held
	// by a waiter of this replica) until the wait budget ran out. Anything else that ended the
	// wait — a refused connection however long the client spent retrying it, or a budget that
	// ran out before Redis answered at all — means Redis is unavailable, not the product busy.
	return r.obtainError(ctx, err)
}

// Claim implements Locker. A claim is one SET: if Redis has not answered it within the wait
// budget of a lock, it is not answering.
func (r *RedisLocker) Claim(ctx context.Context, name string, ttl time.Duration) (func(), error) {
	cctx, cancel := context.WithTimeout(ctx, r.cfg.Wait)
	defer cancel()
	l, err := r.cfg.Claims.Obtain(cctx, name, ttl, &lock.Options{Fenceless: true})
	if err != nil {
		if errors.Is(err, lock.ErrNotObtained) {
			return nil, errClaimed
		}
		return nil, r.obtainError(ctx, err)
	}
	return func() { _ = l.Release(ctx) }, nil
}

// obtainError turns a failure to obtain into the package's errors: contention is ErrBusy, the
// caller's own cancellation stays what it is, and anything else means Redis is unavailable.
func (r *RedisLocker) obtainError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		return fmt.Errorf("%w: locks not obtained within %v", ErrBusy, r.cfg.Wait)
	case ctx.Err() != nil:
		return fmt.Errorf("obtain locks: %w", context.Cause(ctx))
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}
