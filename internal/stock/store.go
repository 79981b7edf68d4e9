package stock

import (
	"context"
	"time"

	"github.com/google/uuid"
)

// Store keeps products, orders and idempotency records.
//
// The purchase path needs two calls: Snapshot reads what a batch of orders is decided from, and
// Commit writes what was decided, in one transaction. Deciding — which order gets stock, which
// is refused — is the Service's, never the store's: "sold out" is an outcome, not a store error.
// Every error a method returns is one of the package's exported errors (possibly wrapped), so a
// Store can be written, or faked, outside this package.
type Store interface {
	HoldStore
	// CreateProduct stores a new product. Errors: ErrDuplicateSKU, *ValidationError (a rule
	// the table's CHECKs refuse: a window that ends before it opens, a hold outside 1s..
	// MaxHoldFor, a cap on held units below 1), ErrUnavailable.
	CreateProduct(ctx context.Context, p NewProduct) (Product, error)
	// Product returns the product with id. Errors: *ProductNotFoundError, ErrUnavailable.
	Product(ctx context.Context, id int64) (Product, error)
	// HighestProductID returns the highest id of a product that exists (committed, as one read
	// saw it), or 0 when there is none. Errors: ErrUnavailable.
	HighestProductID(ctx context.Context) (int64, error)
	// Restock adds r.Quantity units to product r.ProductID, under r.Fence when not zero. With
	// r.Key, the restock is recorded under the key in the same transaction, and a key that
	// already has a restock is answered with it (Replayed, the product as that restock left
	// it) instead of adding again. Errors: *ProductNotFoundError, a *CaughtError wrapping
	// ErrLockLost (a newer fence wrote the row), ErrIdempotencyKeyReused (the key's restock was
	// another request), ErrConflict (another request stored the key meanwhile: nothing was
	// written; trying again replays it), ErrUnavailable.
	Restock(ctx context.Context, r Restocking) (RestockResult, error)
	// Audit accounts for product id's stock. Errors: *ProductNotFoundError, ErrUnavailable,
	// ErrBusy (another recount is running, on any replica: nothing waits for it).
	Audit(ctx context.Context, id int64) (Audit, error)
	// Order returns the order with id. Errors: ErrOrderNotFound, ErrUnavailable.
	Order(ctx context.Context, id uuid.UUID) (Order, error)

	// UpdateSale changes product id's sale rules as c says, moving its version (so that a
	// batch decided from the rules before is refused and decided again), and returns the
	// product as it left it. Setting a limit counts what each customer already bought of the
	// product; a customer already above a lowered limit keeps what they have and may buy no
	// more, and one above a lowered cap on held units keeps their holds and may hold no more.
	// Errors: *ProductNotFoundError, *ValidationError (the window would end before it opens),
	// ErrUnavailable.
	UpdateSale(ctx context.Context, id int64, c SaleChange) (Product, error)
	// Products lists products by ascending id after the id after, at most limit of them; with
	// onSale, only those whose sale is open or not yet ended by the store's clock (and that
	// have stock). Errors: ErrUnavailable.
	Products(ctx context.Context, after int64, limit int, onSale bool) ([]Product, error)

	// Snapshot reads the stock level and sale rules of each product in ids that exists, with —
	// for a product with a limit per customer — the units each customer in customers bought of
	// it, — for a product sold with a hold, or any product when ids are several (a cart) — the
	// units each of them has in held orders of it, and the records stored under each key in
	// keys that has one. Errors: ErrBusy, ErrUnavailable.
	Snapshot(ctx context.Context, ids []int64, keys []RecordKey, customers []string) (Snapshot, error)
	// Commit applies w in one transaction: every decrement under the store's conditions
	// (all of the defense, but in a demonstration store), and the orders and records, all or
	// nothing — except that, when w.SkipStored is set, an order whose key already has a
	// record is left out, its units with it, and the rest is written (Committed.Skipped names
	// what was left out). Errors: ErrConflict
	// (nothing written: a condition refused a decrement, or a key already has a record and
	// w.SkipStored is not set, or every order was left out; a refused decrement is a
	// *RefusedError, which names the conditions the write carried); a *CaughtError wrapping
	// ErrConflict when the CHECK constraint refused a decrement; ErrBusy (Postgres lock
	// contention); ErrUnavailable (Postgres unreachable); ErrUnavailable with
	// ErrOutcomeUnknown (the connection failed while the write committed, and the store could
	// not find out whether it had). A write that would take a customer above a product's limit
	// or its cap on held units is refused whole, whatever the write says: a *CaughtError
	// (LayerLimit, LayerHoldLimit) wrapping ErrConflict.
	Commit(ctx context.Context, w Write) (Committed, error)

	// Records returns the records stored under each key in keys that has one. Errors:
	// ErrUnavailable.
	Records(ctx context.Context, keys []RecordKey) (map[RecordKey]IdempotencyRecord, error)

	// StoredKeys returns the idempotency keys with a stored outcome that concerns product id —
	// a confirmed order that includes it, or a refusal for lack of it — at most limit of them.
	// Errors: ErrUnavailable.
	StoredKeys(ctx context.Context, id int64, limit int) ([]RecordKey, error)

	// PurgeIdempotencyKeys deletes the records created more than retention ago, on the
	// store's own clock (the one that stamped them), except those of orders accepted for later
	// and still pending, and reports how many it deleted, also when it fails part way. It
	// deletes in bounded batches, so that no statement or lock lasts long however many have
	// piled up. Errors: ErrUnavailable, ErrBusy, the context's error.
	PurgeIdempotencyKeys(ctx context.Context, retention time.Duration) (int64, error)

	// OrderLister lists a customer's orders (orders_list.go).
	OrderLister
}

// RefusedError is a write that a condition of its decrement refused, or — with SkipStored —
// one whose every order was left out: nothing was written. Conditions are those the write
// carried (every one of the defense in production, fewer in a demonstration store), so that
// the batch's next read can name the one that refused it.
type RefusedError struct {
	Conditions Defense
	Reason     string
}

func (e *RefusedError) Error() string { return "stock: write refused: " + e.Reason }

// Is makes a refusal ErrConflict: decided again from a new read.
func (e *RefusedError) Is(target error) bool { return target == ErrConflict }

// Restocking is a restock ready to be written.
type Restocking struct {
	ProductID int64
	Quantity  int64
	// Fence is the caller's fencing token for the product's lock; 0 without the lock layer.
	Fence int64
	// Key, when not empty, is the request's Idempotency-Key, and Fingerprint what the request
	// was (product and quantity), to tell a retry from another request under the same key.
	Key         string
	Fingerprint []byte
}

// Level is a product's row as one read saw it: the stock, and the version and fence the
// conditional decrement checks, with the rules of its sale.
type Level struct {
	Stock   int64
	Version int64
	Fence   int64
	Sale    SaleRules
	// Bought holds, for a product with a limit per customer, the units bought by each of the
	// batch's customers that has bought any.
	Bought map[string]int64
	// Held holds, for a product sold with a hold — and for every product of a cart, which is
	// held when any of its products is — the units each of the batch's customers that has any
	// has in held orders of it.
	Held map[string]int64
}

// Snapshot is what a batch of orders is decided from.
type Snapshot struct {
	// Now is when the read was made, on the store's clock: the one the purchase statement
	// checks the sale window against. A batch decided from a lock note has this replica's.
	Now time.Time
	// Levels has an entry for each product that exists.
	Levels map[int64]Level
	// Records has an entry for each idempotency key that has a stored outcome.
	Records map[RecordKey]IdempotencyRecord
}

// RecordKey names an idempotency record: an Idempotency-Key and the customer who sent it.
// Keys are each customer's own (issue #31), as payment APIs scope them to the account that
// sends them: the same key from two customers names two records, so that no customer can
// replay, refuse or learn of another's request by sending its key. The key under which an
// order accepted for later is decided (AcceptedKey) is its customer's too.
type RecordKey struct {
	CustomerID string
	Key        string
}

// IdempotencyRecord is the stored outcome of a request made with an idempotency key: a
// confirmed order, or a refusal for lack of stock.
type IdempotencyRecord struct {
	RecordKey
	Fingerprint []byte
	// Order is the confirmed order (in a Write only its ID is read); nil for a refusal.
	Order *Order
	// SoldOut describes the refusal; nil for a confirmed order.
	SoldOut *SoldOutError
	// Accepted is the order accepted for later under the key (only read, never written by a
	// batch): the key's outcome is that order, decided in its own time.
	Accepted *uuid.UUID
	// GivenUp says the order accepted for later whose AcceptedKey this is was given up (only
	// read, never written by a batch): replayed as ErrGivenUp.
	GivenUp bool
}

// Write is everything one batch commits.
type Write struct {
	// SkipStored lets the store leave out an order whose idempotency key turns out to have a
	// record already (a retry that reached another batch first), with its units, instead of
	// refusing the whole write. allocate sets it only for a write with keys that refuses
	// nobody for want of stock: leaving an order out then only leaves more stock, so every
	// other decision of the batch stays true. (A refusal decided while the left-out order was
	// counted would not be.)
	SkipStored bool
	// Decrements are the products the batch takes stock from, one entry per product, in
	// ascending id order.
	Decrements []Decrement
	// Orders are the confirmed orders (ID, CustomerID and Items are written).
	Orders []Order
	// Records are the idempotency records of the batch's keyed orders, confirmed or refused.
	Records []IdempotencyRecord
}

// Committed is what a write that committed left behind.
type Committed struct {
	// At is when the orders were created.
	At time.Time
	// Holds holds, for each order written held (its products sold with a hold), when the hold
	// expires, on the store's clock; an order not in it was confirmed at once.
	Holds map[uuid.UUID]time.Time
	// Skipped are the orders of the write that were left out because their key already had a
	// record (only with Write.SkipStored): nothing of them was written.
	Skipped []uuid.UUID
	// Stored holds, by key, the records that made the store leave orders out, as the write
	// found them, when it could read them in passing: a confirmed order's record carries the
	// order's id and time, not its customer and items — those of a request whose fingerprint
	// matches the record are the request's own. A skipped order whose key is not here is
	// answered from a read of its record.
	Stored map[RecordKey]IdempotencyRecord
}

// Decrement takes Quantity units of a product: the sum over the batch's confirmed orders.
type Decrement struct {
	ProductID int64
	Quantity  int64
	// Read is the row the batch was decided from; the version condition compares with it (and
	// the naive demonstration write writes Read.Stock - Quantity back).
	Read Level
	// Fence is the batch's fencing token for the product's lock; 0 without the lock layer.
	Fence int64
}
