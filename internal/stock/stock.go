package stock

import (
	"time"

	"github.com/google/uuid"
)

// Product is something for sale and the stock left of it, with the rules of its sale.
type Product struct {
	ID        int64
	SKU       string
	Name      string
	Stock     int64
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
	// SaleStartsAt, when set, is when the sale opens: no order is confirmed before it, by
	// Postgres's clock. Nil: on sale from creation.
	SaleStartsAt *time.Time
	// SaleEndsAt, when set, is when the sale ends: no order is confirmed from then on.
	SaleEndsAt *time.Time
	// MaxPerCustomer is the most units one customer may buy of the product; 0 means no limit.
	MaxPerCustomer int64
	// HoldFor, when not zero, is how long an order of the product is held for its customer to
	// confirm (pay) before its units go back; zero: orders are final at once.
	HoldFor time.Duration
	// MaxHeldPerCustomer is the most units of the product one customer may have in orders
	// held at once — its own holds, and its units in a cart held for another product's hold —
	// so that one customer cannot take the stock off sale by holding it. Every stored product
	// has one (see NewProduct for its default).
	MaxHeldPerCustomer int64
	// LineAdmit and LineAdmissionFor are the product's line (LineRules), flat as its columns
	// are; LineAdmit 0: no line.
	LineAdmit        int64
	LineAdmissionFor time.Duration
}

// Sale returns the rules of p's sale.
func (p Product) Sale() SaleRules {
	return SaleRules{StartsAt: p.SaleStartsAt, EndsAt: p.SaleEndsAt, MaxPerCustomer: p.MaxPerCustomer, HoldFor: p.HoldFor,
		MaxHeldPerCustomer: p.MaxHeldPerCustomer, Line: LineRules{Admit: p.LineAdmit, AdmissionFor: p.LineAdmissionFor}}
}

// SaleRules are the rules of a product's sale: when it is open, and how much one customer may
// buy. The zero value is a sale open from the product's creation, without end or limit.
type SaleRules struct {
	StartsAt       *time.Time
	EndsAt         *time.Time
	MaxPerCustomer int64
	// HoldFor and MaxHeldPerCustomer: see Product.
	HoldFor            time.Duration
	MaxHeldPerCustomer int64
	// Line, when set, puts the sale behind a line: orders need an admission (package line).
	// The purchase path itself never reads it (a batch's snapshot leaves it zero): the line
	// is a layer in front of it.
	Line LineRules
}

// LineRules are the settings of a product's line (package line). The zero value is no line.
type LineRules struct {
	// Admit is the most buyers admitted at once, MinLineAdmit to MaxLineAdmit.
	Admit int64
	// AdmissionFor is how long an admission lasts unless used: whole seconds,
	// MinAdmissionFor to MaxAdmissionFor.
	AdmissionFor time.Duration
}

// The bounds of LineRules.
const (
	MinLineAdmit    = 1
	MaxLineAdmit    = 10_000
	MinAdmissionFor = 10 * time.Second
	MaxAdmissionFor = time.Hour
)

// Lined reports whether the rules put the sale behind a line.
func (l LineRules) Lined() bool { return l.Admit > 0 }

// MaxHoldFor is the longest a hold may last: a checkout's time to pay (ticketing and shops
// reserve for 10 to 15 minutes), not a reservation. Postgres's CHECK on hold_for_seconds
// holds the same ceiling.
const MaxHoldFor = time.Hour

// Limited reports whether the rules limit what one customer may buy.
func (r SaleRules) Limited() bool { return r.MaxPerCustomer > 0 }

// Windowed reports whether the sale opens or ends at a set time.
func (r SaleRules) Windowed() bool { return r.StartsAt != nil || r.EndsAt != nil }

// closed returns the refusal of an order for product id at now when the sale is not open
// then — *SaleNotOpenError or *SaleEndedError — and nil when it is.
func (r SaleRules) closed(id int64, now time.Time) error {
	switch {
	case r.StartsAt != nil && now.Before(*r.StartsAt):
		return &SaleNotOpenError{ProductID: id, StartsAt: *r.StartsAt, Now: now}
	case r.EndsAt != nil && !now.Before(*r.EndsAt):
		return &SaleEndedError{ProductID: id, EndsAt: *r.EndsAt}
	}
	return nil
}

// NewProduct describes a product to create. A Sale.MaxHeldPerCustomer of 0 takes the default:
// the Service's is the product's MaxPerCustomer when it has one, else one full order
// (Config.MaxQuantity); a Store given 0 stores DefaultMaxQuantity, as the schema does for a
// row written without one.
type NewProduct struct {
	SKU   string
	Name  string
	Stock int64
	Sale  SaleRules
}

// SaleChange changes a product's sale rules: each field set replaces the rule, and a Clear
// field removes it; a field neither set nor cleared is kept. EndNow ends the sale at once, by
// Postgres's clock (it replaces EndsAt).
//
// The cap on a customer's holds is never removed: ClearMaxHeldPerCustomer puts it back to its
// default, and so does a change of the limit (MaxPerCustomer set or cleared) that does not set
// the cap, since the default follows the limit. The Service says what the default is with
// DefaultMaxHeld; a Store given a change with DefaultMaxHeld (and no MaxHeldPerCustomer) sets
// the cap to the limit as the change leaves it, or to DefaultMaxHeld when there is none.
type SaleChange struct {
	StartsAt, EndsAt            *time.Time
	MaxPerCustomer              *int64
	HoldFor                     *time.Duration
	MaxHeldPerCustomer          *int64
	ClearStartsAt, ClearEndsAt  bool
	ClearMaxPerCustomer, EndNow bool
	ClearHoldFor                bool
	ClearMaxHeldPerCustomer     bool
	DefaultMaxHeld              int64
	// Line replaces the line (both settings), ClearLine removes it.
	Line      *LineRules
	ClearLine bool
}

// Item is one line of an order: a product and how many units of it.
type Item struct {
	ProductID int64
	Quantity  int64
}

// The statuses of an order. An order is only written once its stock has been taken: it is
// confirmed at once, or held (its product sold with a hold) until its customer confirms it,
// it is cancelled, or it expires — the last two give its units back.
const (
	OrderStatusConfirmed = "confirmed"
	OrderStatusHeld      = "held"
	OrderStatusCancelled = "cancelled"
	OrderStatusExpired   = "expired"
)

// Order is a confirmed purchase.
type Order struct {
	ID         uuid.UUID
	CustomerID string
	Status     string
	Items      []Item
	CreatedAt  time.Time
	// ExpiresAt is when a hold ends unless confirmed (nil for an order final at once), and
	// DecidedAt when a hold was confirmed, cancelled or expired.
	ExpiresAt, DecidedAt *time.Time
}

// OrderRequest asks for an order. Items are bought all or nothing.
type OrderRequest struct {
	CustomerID string
	Items      []Item
	// IdempotencyKey, when not empty, makes retries of the same request safe: the first outcome
	// is stored and replayed instead of buying again.
	IdempotencyKey string
	// LockWait, when longer than the locker's wait (STOCKSVC_LOCK_WAIT), is how long this
	// order may wait for its products' locks, and for its turn in its product's queue, before
	// it is refused busy. It is for an order the line admitted: such orders are at most the
	// units left, so the line bounds their wait, and refusing one busy only makes its unit wait
	// for its retry. Zero: the locker's wait.
	LockWait time.Duration
}

// OrderResult is the outcome of a successful PlaceOrder.
type OrderResult struct {
	// Order is the confirmed order; empty when Accepted is set.
	Order Order
	// Replayed is true when the outcome is that of an earlier request with the same
	// idempotency key, returned again: the order it created, or the order it was accepted as.
	Replayed bool
	// Accepted, when not nil, is the order accepted for later (asynchronously) with the
	// request's idempotency key: that order is the key's outcome, whatever it has become
	// since, and nothing was bought now. Replayed is then true and Order empty.
	Accepted *uuid.UUID
}

// RestockRequest asks for stock to be added to a product.
type RestockRequest struct {
	ProductID int64
	Quantity  int64
	// IdempotencyKey, when not empty, makes retries safe: the first restock is stored with the
	// key and returned again, instead of adding the stock once per attempt.
	IdempotencyKey string
}

// RestockResult is the outcome of a successful Restock.
type RestockResult struct {
	// Product is the product as the restock left it.
	Product Product
	// Replayed is true when an earlier request with the same idempotency key did the restock.
	Replayed bool
}

// Audit accounts for a product's stock: everything received must be either sold or still there.
type Audit struct {
	ProductID int64
	Stock     int64
	// Received is the initial stock plus every restock.
	Received int64
	// Sold is the sum of the quantities of all confirmed orders.
	Sold int64
	// Held is the sum of the quantities of the orders held now; the units of cancelled and
	// expired holds are back in Stock.
	Held int64
}

// Consistent reports whether the stock is fully accounted for and not negative.
func (a Audit) Consistent() bool {
	return a.Received-a.Sold-a.Held == a.Stock && a.Stock >= 0
}
