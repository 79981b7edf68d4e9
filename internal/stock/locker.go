package stock

import "context"

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
