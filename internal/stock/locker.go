package stock

import (
	"context"
	"time"
)

// Locker gives a holder exclusive access to products across every replica. The service takes
// no lock itself: its adapters (package stocklock, over Redis) implement this.
type Locker interface {
	// WithProducts runs fn while holding the lock of every product in ids, taken in ascending
	// id order (see Grant). fn's context is cancelled if a lock is lost. It returns ErrBusy
	// when the locks could not be had within the wait budget, ErrUnavailable (wrapped) when
	// the lock service is unreachable, the context's error when ctx ends, and otherwise fn's
	// error.
	WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *Grant) error) error
}

// Grant is what holding products' locks gives, and what the holder leaves for the next one.
type Grant struct {
	// Fences holds the fencing token of each product's lock.
	Fences map[int64]int64
	// Notes holds, for each product, what the last holder of its lock left when it let go:
	// the product's row as that holder's batch left it (a level), or "" for nothing. It is a
	// hint, never a fact: a batch decided from it is still refused by the version check if it
	// is stale.
	Notes map[int64]string
	// Leave is what the work leaves for the next holder of each product's lock; a product
	// without an entry leaves nothing, which takes away the note the work was given.
	Leave map[int64]string
}

type lockWaitKey struct{}

// WithLockWait returns ctx carrying how long a Locker may wait for the locks of the work it is
// given, when that is longer than its own wait: the longest OrderRequest.LockWait of a batch.
// A value on the context rather than an argument of WithProducts, so that every Locker keeps
// its one method and a Locker without a wait of its own ignores it.
func WithLockWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, lockWaitKey{}, d)
}

// LockWait returns the wait WithLockWait put on ctx, 0 if none: a Locker waits for the longer
// of it and its own.
func LockWait(ctx context.Context) time.Duration {
	d, _ := ctx.Value(lockWaitKey{}).(time.Duration)
	return d
}
