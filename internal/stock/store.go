package stock

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Store keeps products, orders and idempotency records.
type Store interface {
	// CreateProduct stores a new product. Errors: ErrDuplicateSKU, ErrUnavailable.
	CreateProduct(ctx context.Context, p NewProduct) (Product, error)
	// Product returns the product with id. Errors: *ProductNotFoundError, ErrUnavailable.
	Product(ctx context.Context, id int64) (Product, error)
	// Restock adds quantity units to product id. fence, when not zero, is the caller's fencing
	// token. Errors: *ProductNotFoundError, ErrLockLost (a newer fence wrote the row),
	// ErrUnavailable.
	Restock(ctx context.Context, id, quantity, fence int64) (Product, error)
	// StockLevels returns the current stock of each product in ids that exists. Errors:
	// ErrUnavailable.
	StockLevels(ctx context.Context, ids []int64) (map[int64]int64, error)
	// Audit accounts for product id's stock. Errors: *ProductNotFoundError, ErrUnavailable.
	Audit(ctx context.Context, id int64) (Audit, error)
	// Order returns the order with id. Errors: ErrOrderNotFound, ErrUnavailable.
	Order(ctx context.Context, id uuid.UUID) (Order, error)
	// PlaceOrder takes the stock for every item and stores the order, all in one transaction,
	// guarded by the layers p.Defense selects. Errors: *ProductNotFoundError, *SoldOutError
	// (possibly inside a *CaughtError), a *CaughtError wrapping a version conflict or
	// ErrLockLost, errIdempotencyKeyTaken, ErrBusy, ErrUnavailable.
	PlaceOrder(ctx context.Context, p Purchase) (Order, error)
	// IdempotencyRecord returns the record stored under key. Errors: errNoRecord,
	// ErrUnavailable.
	IdempotencyRecord(ctx context.Context, key string) (IdempotencyRecord, error)
	// SaveRefusal stores a sold-out outcome under rec.Key unless the key already has a record.
	// Errors: ErrUnavailable.
	SaveRefusal(ctx context.Context, rec IdempotencyRecord) error
	// PurgeIdempotencyKeys deletes the records created before cutoff and reports how many.
	PurgeIdempotencyKeys(ctx context.Context, cutoff time.Time) (int64, error)
}

// Purchase is an order ready to be written.
type Purchase struct {
	OrderID    uuid.UUID
	CustomerID string
	// Items are sorted by ascending product id, with no product twice.
	Items []Item
	// Fences holds the fencing token for each item's product lock, aligned with Items; nil when
	// the lock layer is off.
	Fences  []int64
	Defense Defense
	// Idempotency, when not nil, is stored with the order in the same transaction.
	Idempotency *IdempotencyRecord
}

// Idempotency outcomes.
const (
	outcomeRecordConfirmed = "confirmed"
	outcomeRecordSoldOut   = "sold_out"
)

// IdempotencyRecord is the stored outcome of a request made with an idempotency key.
type IdempotencyRecord struct {
	Key         string
	Fingerprint []byte
	// Outcome is "confirmed" (OrderID is set) or "sold_out" (ProductID, Requested and
	// Available describe the refusal).
	Outcome   string
	OrderID   uuid.UUID
	ProductID int64
	Requested int64
	Available int64
}
