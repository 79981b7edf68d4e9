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

// Rejection is why an accepted order was refused: Code is the problem code a synchronous order
// would have been answered with ("sold-out" for lack of stock, with the product, what was
// asked for and what was left when the order's turn came).
type Rejection struct {
	Code      string
	ProductID int64
	Requested int64
	Available int64
}

// Acceptance is what Accept answers.
type Acceptance struct {
	// Order is the accepted order: new and pending, or — when Replayed — the order the key
	// was first sent with, as it stands now.
	Order    Order
	Replayed bool
	// Confirmed, when not nil, is the order a synchronous request with the same key and body
	// confirmed earlier: the key's outcome, replayed (Order is then empty).
	Confirmed *stock.Order
}
