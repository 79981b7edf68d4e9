package async

import (
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// The states of an accepted order.
const (
	StatusPending   = "pending"
	StatusConfirmed = stock.OrderStatusConfirmed
	StatusRejected  = "rejected"
)

// Order is an order accepted for later, as it stands.
type Order struct {
	ID         uuid.UUID
	CustomerID string
	Items      []stock.Item // ascending product order
	Status     string       // StatusPending, StatusConfirmed or StatusRejected
	AcceptedAt time.Time
	DecidedAt  time.Time // zero while pending
	// Rejection says why a rejected order was refused.
	Rejection *Rejection
	// copied is false while the row itself still says pending: the decision, if there is
	// one, is only in its idempotency record (Status shows it), and still to be copied.
	copied bool
}

// Rejection is why an accepted order was refused: its Reason and, when the reason is
// ReasonSoldOut, the product that was short, what was asked for and what was left when the
// order's turn came.
type Rejection struct {
	Reason    Reason
	ProductID int64
	Requested int64
	Available int64
}

// Reason is why an accepted order was rejected. Its values are what async_orders.reason holds,
// as they have since the table was made (so that rows written before the type existed read the
// same); the store writes the two it decides itself as it is told (stockpg.Reasons). The
// transport chooses what each means to a client.
type Reason string

// The reasons an accepted order is rejected for.
const (
	// ReasonSoldOut: not enough stock was left when the order's turn came.
	ReasonSoldOut Reason = "sold-out"
	// ReasonProductNotFound: a product of the order no longer exists.
	ReasonProductNotFound Reason = "product-not-found"
	// ReasonInvalid: the order breaks a rule that changed since it was accepted.
	ReasonInvalid Reason = "invalid-request"
	// ReasonInternal: deciding the order failed unexpectedly Config.MaxAttempts times.
	ReasonInternal Reason = "internal"
	// ReasonSaleNotOpen: the product's sale had not opened when the order's turn came.
	ReasonSaleNotOpen Reason = "sale-not-open"
	// ReasonSaleEnded: the product's sale had ended when the order's turn came.
	ReasonSaleEnded Reason = "sale-ended"
	// ReasonCustomerLimit: the order would have taken its customer above the product's limit.
	ReasonCustomerLimit Reason = "customer-limit"
	// ReasonHoldLimit: the order would have been held, and would have taken what its customer
	// holds of a product above the product's cap on held units.
	ReasonHoldLimit Reason = "hold-limit"
)

// Acceptance is what Accept and Place answer.
type Acceptance struct {
	// Order is the accepted order: new and pending, or — when Replayed — the order the key
	// was first sent with, as it stands now.
	Order    Order
	Replayed bool
	// Confirmed, when not nil, is the order a synchronous request with the same key and body
	// confirmed earlier: the key's outcome, replayed (Order is then empty).
	Confirmed *stock.Order
}

// Found is an order found by its id (Find): the order the purchase path confirmed (Confirmed),
// or, when it has none, the order accepted for later and not confirmed yet (Order: pending or
// rejected — or confirmed a moment ago, between the two reads).
type Found struct {
	// Confirmed, when not nil, is the purchase path's order: placed at once, or accepted for
	// later and since confirmed (an accepted order is confirmed under its own id).
	Confirmed *stock.Order
	// Order is the accepted order, when Confirmed is nil.
	Order Order
}
