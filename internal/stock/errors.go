package stock

import (
	"errors"
	"fmt"
	"time"
)

var (
	// ErrProductNotFound means no product has the given id. Errors that name the product are
	// *ProductNotFoundError.
	ErrProductNotFound = errors.New("stock: product not found")
	// ErrOrderNotFound means no order has the given id.
	ErrOrderNotFound = errors.New("stock: order not found")
	// ErrDuplicateSKU means another product already uses the SKU.
	ErrDuplicateSKU = errors.New("stock: duplicate sku")
	// ErrSoldOut means there is not enough stock for the order; nothing was sold. The error is
	// a *SoldOutError naming the product.
	ErrSoldOut = errors.New("stock: sold out")
	// ErrInvalid means the input breaks a rule; the error is a *ValidationError.
	ErrInvalid = errors.New("stock: invalid input")
	// ErrBusy means the product is contended and the order could not be attempted within the
	// wait budget; nothing was sold and the request may be retried.
	ErrBusy = errors.New("stock: busy")
	// ErrUnavailable means Postgres or Redis could not be reached; nothing was sold unless the
	// error says otherwise, and the request may be retried (with an idempotency key, safely).
	ErrUnavailable = errors.New("stock: dependency unavailable")
	// ErrOutcomeUnknown means a write may or may not have committed: the connection failed
	// while it did, and looking it up afterwards could not tell. It always comes with
	// ErrUnavailable, and nothing else in the chain — a lock lost meanwhile, say — makes the
	// outcome known: retry with the same idempotency key, which is answered with the order if
	// it was taken.
	ErrOutcomeUnknown = errors.New("stock: outcome unknown")
	// ErrIdempotencyKeyReused means the idempotency key was first used with a different
	// request.
	ErrIdempotencyKeyReused = errors.New("stock: idempotency key reused with a different request")
	// ErrLockLost means a lock lease ended while its holder was working, and a defense layer
	// refused the holder's write; nothing was sold.
	ErrLockLost = errors.New("stock: lock lost")
	// ErrConflict means a write was refused because what it was decided from no longer holds:
	// a condition of its UPDATE matched no row (the row changed since it was read), or another
	// request stored an outcome under one of its idempotency keys first. Nothing was written;
	// the batch is decided again from a fresh read.
	ErrConflict = errors.New("stock: write conflict")
)

// BusyError is ErrBusy with a hint of when trying again is worth it.
type BusyError struct {
	// RetryAfter is how long the product's queue is expected to take to drain.
	RetryAfter time.Duration
	Reason     string
	// Shed is true when the order was turned away because the product's queue on this replica
	// was full, before any attempt: the kind of busy an asynchronous order avoids.
	Shed bool
}

func (e *BusyError) Error() string {
	return fmt.Sprintf("stock: busy: %s (retry after %v)", e.Reason, e.RetryAfter)
}

// Is makes errors.Is(err, ErrBusy) hold.
func (e *BusyError) Is(target error) bool { return target == ErrBusy }

// ValidationError names the field that breaks a rule.
type ValidationError struct {
	Field  string
	Reason string
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("stock: invalid %s: %s", e.Field, e.Reason)
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *ValidationError) Is(target error) bool { return target == ErrInvalid }

// ProductNotFoundError names the missing product.
type ProductNotFoundError struct {
	ProductID int64
}

func (e *ProductNotFoundError) Error() string {
	return fmt.Sprintf("stock: product %d not found", e.ProductID)
}

// Is makes errors.Is(err, ErrProductNotFound) hold.
func (e *ProductNotFoundError) Is(target error) bool { return target == ErrProductNotFound }

// SoldOutError names the product that is short of stock.
type SoldOutError struct {
	ProductID int64
	Requested int64
	// Available is the stock seen when the order was refused.
	Available int64
	// Replayed is true when the refusal was stored for an idempotency key and is being
	// returned again.
	Replayed bool
}

func (e *SoldOutError) Error() string {
	return fmt.Sprintf("stock: product %d sold out: requested %d, available %d", e.ProductID, e.Requested, e.Available)
}

// Is makes errors.Is(err, ErrSoldOut) hold.
func (e *SoldOutError) Is(target error) bool { return target == ErrSoldOut }

// Layer names a defense layer.
type Layer string

// The defense layers, as named in metrics and in STOCKSVC_DEFENSE.
const (
	LayerLock    Layer = "lock"
	LayerVersion Layer = "version"
	LayerGuard   Layer = "guard"
	LayerFence   Layer = "fence"
	LayerCheck   Layer = "check"
)

// CaughtError reports that a defense layer refused a write that an earlier layer let through.
// It wraps what the refusal means for the batch: ErrConflict (decided again from a fresh read)
// or ErrLockLost (nothing sold; the orders are answered busy).
type CaughtError struct {
	Layer     Layer
	ProductID int64
	Err       error
}

func (e *CaughtError) Error() string {
	return fmt.Sprintf("stock: %s layer refused the write to product %d: %v", e.Layer, e.ProductID, e.Err)
}

func (e *CaughtError) Unwrap() error { return e.Err }
