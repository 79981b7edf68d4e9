package stock

import "time"

// DefaultMaxQuantity is Config.MaxQuantity's default, and the cap on a customer's held units
// of a product that a Store is given none for (NewProduct).
const DefaultMaxQuantity = 10

// Limits on input, enforced by the Service.
const (
	MaxItems             = 20
	MaxCustomerIDLen     = 64
	MaxSKULen            = 64
	MaxNameLen           = 200
	MaxStock             = 1_000_000_000
	MaxIdempotencyKeyLen = 255
)

// Config tunes a Service. Zero fields take the defaults documented on each.
//
// The defense layers are not configured here: the Locker takes the locks (and gives the
// fencing tokens the write checks), the Store's write carries the other conditions. The
// demonstration modes, which take layers away, are a Locker, a Store and Views of their own
// (package demo), so the Service runs one path whatever is demonstrated.
type Config struct {
	// MaxQuantity is the most units of one product an order may ask for, and the default cap
	// on the units one customer may hold of a product without a limit per customer (one full
	// order: SaleRules.MaxHeldPerCustomer). Default DefaultMaxQuantity.
	MaxQuantity int64
	// PurchaseTimeout bounds the database work of one batch once its locks are held.
	// Default 5s.
	PurchaseTimeout time.Duration
	// ConflictRetries is how many times a batch is decided again after its write was refused
	// (a version conflict, say) before its orders are answered busy. Default 8.
	ConflictRetries int
	// QueueWait is the longest an order may expect to wait in its product's queue before its
	// batch begins; an order that would wait longer is refused busy at once. It keeps the
	// queue a few batches deep under overload — enough to keep the batches full — instead of
	// letting the crowd wait out the lock wait. Default 500ms.
	QueueWait time.Duration
	// MaxBatchOrders caps the orders decided in one batch. Default 256: enough that a batch
	// carries every order that gathered while the previous one committed at the highest rates
	// measured (docs/benchmarks.md), small enough that one batch's write stays a few
	// milliseconds, far inside the lock lease and the latency budget.
	MaxBatchOrders int
	// Views, when set, answers product reads, refuses orders for a product it knows is sold
	// out before they reach the queue, and is kept current with every purchase and restock.
	// The refusals need purchases that only ever lower the stock, so the naive write (which
	// can raise it) never uses them.
	Views Views
	// MaxBatchUnits caps the units one batch takes, so that one batch's decrement stays
	// bounded whatever MaxQuantity allows. Default MaxBatchOrders × MaxQuantity: at the default
	// settings the order cap binds first.
	MaxBatchUnits int64
	// SkipRuleChecks turns off every check of the sale rules this replica makes — the
	// refusals before the queue and the batch's — leaving them to Postgres alone: the
	// purchase statement's window and the per-customer CHECK. A demonstration that those
	// hold by themselves; never for production, where the checks are what answer a refusal
	// without a write.
	SkipRuleChecks bool
	// Now is this replica's clock, which decides the refusals from the views (a sale not open
	// yet, or ended) and a batch decided from a lock note; Postgres's decides every sale.
	// Default time.Now. Tests set it to a skewed clock.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.MaxQuantity <= 0 {
		c.MaxQuantity = DefaultMaxQuantity
	}
	if c.PurchaseTimeout <= 0 {
		c.PurchaseTimeout = 5 * time.Second
	}
	if c.ConflictRetries <= 0 {
		c.ConflictRetries = 8
	}
	if c.QueueWait <= 0 {
		c.QueueWait = 500 * time.Millisecond
	}
	if c.MaxBatchOrders <= 0 {
		c.MaxBatchOrders = 256
	}
	if c.MaxBatchUnits <= 0 {
		c.MaxBatchUnits = int64(c.MaxBatchOrders) * c.MaxQuantity
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}
