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
	// ErrSaleNotOpen means the product's sale has not opened yet, by Postgres's clock (or, for
	// a refusal from the views, by this replica's); nothing was sold and nothing is stored
	// under the request's key. The error is a *SaleNotOpenError.
	ErrSaleNotOpen = errors.New("stock: sale not open")
	// ErrSaleEnded means the product's sale has ended; the error is a *SaleEndedError.
	ErrSaleEnded = errors.New("stock: sale ended")
	// ErrCustomerLimit means the order would take the customer above the product's limit per
	// customer; the error is a *CustomerLimitError. Nothing is stored under the key.
	ErrCustomerLimit = errors.New("stock: customer limit reached")
	// ErrHoldLimit means the order would take the units its customer has in held orders of a
	// product above the product's MaxHeldPerCustomer; the error is a *HoldLimitError. Nothing
	// is stored under the key: once a hold ends, the same order may be held.
	ErrHoldLimit = errors.New("stock: hold limit reached")
)

// SaleNotOpenError says when the product's sale opens.
type SaleNotOpenError struct {
	ProductID int64
	StartsAt  time.Time
	// Now is the time the refusal was decided at, on the clock that decided it.
	Now time.Time
}

func (e *SaleNotOpenError) Error() string {
	return fmt.Sprintf("stock: product %d is not on sale until %s", e.ProductID, e.StartsAt.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrSaleNotOpen) hold.
func (e *SaleNotOpenError) Is(target error) bool { return target == ErrSaleNotOpen }

// Opens is how long after the refusal the sale opens.
func (e *SaleNotOpenError) Opens() time.Duration { return e.StartsAt.Sub(e.Now) }

// SaleEndedError says when the product's sale ended.
type SaleEndedError struct {
	ProductID int64
	EndsAt    time.Time
}

func (e *SaleEndedError) Error() string {
	return fmt.Sprintf("stock: the sale of product %d ended at %s", e.ProductID, e.EndsAt.UTC().Format(time.RFC3339Nano))
}

// Is makes errors.Is(err, ErrSaleEnded) hold.
func (e *SaleEndedError) Is(target error) bool { return target == ErrSaleEnded }

// CustomerLimitError says what the customer already has of the product, and the limit.
type CustomerLimitError struct {
	ProductID  int64
	CustomerID string
	Limit      int64
	// Bought is what the customer had of the product when the order was refused.
	Bought    int64
	Requested int64
}

func (e *CustomerLimitError) Error() string {
	return fmt.Sprintf("stock: customer %q may buy at most %d of product %d and has %d; requested %d",
		e.CustomerID, e.Limit, e.ProductID, e.Bought, e.Requested)
}

// Is makes errors.Is(err, ErrCustomerLimit) hold.
func (e *CustomerLimitError) Is(target error) bool { return target == ErrCustomerLimit }

// HoldLimitError says what the customer holds of the product, and the cap.
type HoldLimitError struct {
	ProductID  int64
	CustomerID string
	Limit      int64
	// Held is what the customer had in held orders of the product when the order was refused.
	Held      int64
	Requested int64
}

func (e *HoldLimitError) Error() string {
	return fmt.Sprintf("stock: customer %q may hold at most %d of product %d at once and holds %d; requested %d",
		e.CustomerID, e.Limit, e.ProductID, e.Held, e.Requested)
}

// Is makes errors.Is(err, ErrHoldLimit) hold.
func (e *HoldLimitError) Is(target error) bool { return target == ErrHoldLimit }

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
	// LayerWindow is the sale window in the purchase statement, on Postgres's clock.
	LayerWindow Layer = "window"
	// LayerLimit is the per-customer limit in Postgres (customer_purchases_within_limit).
	LayerLimit Layer = "limit"
	// LayerHoldLimit is the cap on a customer's held units in Postgres
	// (customer_holds_within_limit).
	LayerHoldLimit Layer = "hold_limit"
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
