package stock

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"golang.org/x/sync/semaphore"

	"github.com/stocksvc/stocksvc/internal/clock"
)

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

// Service sells stock: it holds the rules and runs the purchase path over a Store, a Locker
// and, optionally, Views.
//
// An order for one product joins that product's queue on this replica (batcher.go); the queue's
// worker decides what gathered as one batch (decide, below): under the product's lock, one read
// of the stock and of the batch's idempotency keys, first-fit allocation in arrival order
// (allocate.go), one write (Store.Commit). A cart — several products — is decided alone, under
// the locks of all its products.
type Service struct {
	store   Store
	locker  Locker
	cfg     Config
	metrics *Metrics
	batches *batcher
	keys    storedKeys
	lookups *recordLookups
	// customers remembers what customers bought of products with a limit (limits.go).
	customers customerMemory
	listings  listings
	scheduler holdScheduler
	audits    *semaphore.Weighted
	// afterRead, when set, runs between a batch's read and its write, with the number of
	// orders in the batch. Tests use it to open the race window at will.
	afterRead func(ctx context.Context, orders int)
}

// NewService returns a Service. metrics may be nil. Close it to let queued orders finish.
func NewService(store Store, locker Locker, cfg Config, metrics *Metrics) *Service {
	s := &Service{store: store, locker: locker, cfg: cfg.withDefaults(), metrics: metrics}
	s.keys = storedKeys{store: store, metrics: metrics}
	s.lookups = &recordLookups{store: store}
	s.audits = semaphore.NewWeighted(maxAudits)
	s.batches = newBatcher(s.cfg.MaxBatchOrders, s.cfg.MaxBatchUnits, s.cfg.QueueWait, metrics)
	s.batches.decide = s.decideQueued
	s.batches.settle = s.replayStored
	s.batches.unsettled = unsettled
	return s
}

// Close refuses new orders and returns once every queued order has been decided.
func (s *Service) Close() {
	s.batches.close()
	s.lookups.wait()
}

// CreateProduct validates p and stores it, with surrounding spaces trimmed from SKU and name,
// and the cap on a customer's held units resolved when not given: the limit per customer when
// the product has one, else one full order (Config.MaxQuantity).
// With views it answers one view lease (and a margin) after the insert has committed, once no
// replica can still say the product does not exist (Views.Created). Errors: *ValidationError,
// ErrDuplicateSKU, ErrUnavailable.
func (s *Service) CreateProduct(ctx context.Context, p NewProduct) (Product, error) {
	p.SKU, p.Name = strings.TrimSpace(p.SKU), strings.TrimSpace(p.Name)
	switch {
	case p.SKU == "":
		return Product{}, &ValidationError{Field: "sku", Reason: "must not be empty"}
	case utf8.RuneCountInString(p.SKU) > MaxSKULen:
		return Product{}, &ValidationError{Field: "sku", Reason: fmt.Sprintf("must be at most %d characters", MaxSKULen)}
	case p.Name == "":
		return Product{}, &ValidationError{Field: "name", Reason: "must not be empty"}
	case utf8.RuneCountInString(p.Name) > MaxNameLen:
		return Product{}, &ValidationError{Field: "name", Reason: fmt.Sprintf("must be at most %d characters", MaxNameLen)}
	case p.Stock < 0 || p.Stock > MaxStock:
		return Product{}, &ValidationError{Field: "stock", Reason: fmt.Sprintf("must be between 0 and %d", MaxStock)}
	}
	if err := validSale(p.Sale); err != nil {
		return Product{}, err
	}
	if p.Sale.MaxHeldPerCustomer == 0 {
		p.Sale.MaxHeldPerCustomer = cmp.Or(p.Sale.MaxPerCustomer, s.cfg.MaxQuantity)
	}
	if err := plainText("sku", p.SKU); err != nil {
		return Product{}, err
	}
	if err := plainText("name", p.Name); err != nil {
		return Product{}, err
	}
	created, err := s.store.CreateProduct(ctx, p)
	if err != nil {
		return Product{}, err
	}
	if s.cfg.Views != nil {
		// A replica may remember, for a moment, that this id did not exist: an order or read
		// that begins after this answer must not be told so.
		s.cfg.Views.Created(created.ID)
	}
	return created, nil
}

// plainText refuses text Postgres cannot store (NUL, invalid UTF-8) and control characters,
// which have no place in an identifier or a name and would otherwise surface as a 500.
func plainText(field, v string) error {
	if !utf8.ValidString(v) {
		return &ValidationError{Field: field, Reason: "must be valid UTF-8"}
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return &ValidationError{Field: field, Reason: "must not contain control characters"}
		}
	}
	return nil
}

// Product returns the product with id, from the views when the Service has them. Errors:
// *ProductNotFoundError, ErrUnavailable, the context's error.
func (s *Service) Product(ctx context.Context, id int64) (ProductView, error) {
	if s.cfg.Views != nil {
		return s.cfg.Views.Product(ctx, id)
	}
	p, err := s.store.Product(ctx, id)
	if err != nil {
		return ProductView{}, err
	}
	return ProductView{Product: p, Read: time.Now(), From: FromPostgres}, nil
}

// maxAudits is how many audits a replica runs at once. An audit recounts every order of the
// product, which on a product with a million orders holds a connection of the purchase path's
// pool, and a core of Postgres, for seconds: one at a time leaves the rest to the sale.
const maxAudits = 1

// auditRetry is what a refused audit is told to wait: about what a large recount takes.
const auditRetry = 5 * time.Second

// Audit accounts for product id's stock by recounting what was received and sold. One audit
// runs at a time, on this replica (refused here without a query) and across the replicas (the
// store refuses a recount while another runs); another is refused rather than queued: a queue
// would start recounts for callers long gone, and a crowd of them would keep Postgres scanning
// after the crowd had left. Errors: *ProductNotFoundError, ErrUnavailable, a *BusyError when
// another audit is running.
func (s *Service) Audit(ctx context.Context, id int64) (Audit, error) {
	if !s.audits.TryAcquire(1) {
		return Audit{}, &BusyError{RetryAfter: auditRetry, Reason: "another audit is running on this replica"}
	}
	defer s.audits.Release(1)
	a, err := s.store.Audit(ctx, id)
	if errors.Is(err, ErrBusy) {
		return Audit{}, &BusyError{RetryAfter: auditRetry, Reason: err.Error()}
	}
	return a, err
}

// Order returns the order with id. Errors: ErrOrderNotFound, ErrUnavailable.
func (s *Service) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	return s.store.Order(ctx, id)
}

// Restock adds stock to a product, under the product's lock (so a restock never races a
// batch's read-decide-write). With an idempotency key it is done once:
// a retry is answered with the first restock (Replayed), and the same key on another request is
// ErrIdempotencyKeyReused. Errors: *ValidationError, *ProductNotFoundError,
// ErrIdempotencyKeyReused, ErrBusy, ErrLockLost, ErrUnavailable.
func (s *Service) Restock(ctx context.Context, req RestockRequest) (RestockResult, error) {
	if req.Quantity < 1 || req.Quantity > MaxStock {
		return RestockResult{}, &ValidationError{Field: "quantity", Reason: fmt.Sprintf("must be between 1 and %d", MaxStock)}
	}
	if err := validKey(req.IdempotencyKey); err != nil {
		return RestockResult{}, err
	}
	r := Restocking{ProductID: req.ProductID, Quantity: req.Quantity, Key: req.IdempotencyKey}
	if r.Key != "" {
		r.Fingerprint = restockFingerprint(r.ProductID, r.Quantity)
	}
	restock := func(ctx context.Context) (RestockResult, error) {
		res, err := s.store.Restock(ctx, r)
		if errors.Is(err, ErrConflict) {
			// Another request stored the key first; nothing was written. Now it is there.
			res, err = s.store.Restock(ctx, r)
		}
		return res, err
	}
	if s.cfg.Views != nil {
		restock = s.raising(r.ProductID, restock)
	}
	// A product that does not exist needs no lock (nor a view's epoch) to say so, and taking
	// one would leave its fencing counter behind in Redis for good.
	snap, err := s.store.Snapshot(ctx, []int64{r.ProductID}, nil, nil)
	if err != nil {
		return RestockResult{}, err
	}
	if _, ok := snap.Levels[r.ProductID]; !ok {
		return RestockResult{}, &ProductNotFoundError{ProductID: r.ProductID}
	}
	var res RestockResult
	err = s.locker.WithProducts(ctx, []int64{r.ProductID}, func(ctx context.Context, g *Grant) error {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
		defer cancel()
		r.Fence = g.Fences[r.ProductID] // 0 without a lock; and no note left: the level changes
		var err error
		res, err = restock(ctx)
		return err
	})
	if layer, ok := caughtBy(err); ok {
		s.metrics.caught(layer)
	}
	return res, err
}

// raising wraps a restock so that the views allow it: no view of the product is leased across
// the write, so that once it has returned no replica refuses an order on the level before it.
func (s *Service) raising(id int64, restock func(context.Context) (RestockResult, error)) func(context.Context) (RestockResult, error) {
	return func(ctx context.Context) (RestockResult, error) {
		done, err := s.cfg.Views.Raise(ctx, id)
		if err != nil {
			return RestockResult{}, err
		}
		res, err := restock(ctx)
		if err == nil && !res.Replayed {
			done(&res.Product)
		} else {
			// Failed, unknown, or a replay (whose product is the level an earlier restock
			// left, not today's): the next read rebuilds the view from Postgres.
			done(nil)
		}
		return res, err
	}
}

// PurgeIdempotencyKeys forgets idempotency keys older than retention on the store's clock,
// except those of orders accepted for later and still pending, and reports how many it
// deleted (also when it fails part way). Errors: as Store.PurgeIdempotencyKeys.
func (s *Service) PurgeIdempotencyKeys(ctx context.Context, retention time.Duration) (int64, error) {
	return s.store.PurgeIdempotencyKeys(ctx, retention)
}

// PlaceOrder buys every item of req, all or nothing.
//
// An order with an Idempotency-Key is decided once: a request with a key that already has a
// stored outcome — stored by an earlier batch, on any replica, or by an earlier order of the
// same batch — is answered with that outcome (Replayed), never bought again. The key's record
// is written in the same transaction as the order, so Postgres alone keeps one order per key.
//
// Errors: *ValidationError; *ProductNotFoundError; *SoldOutError (nothing was sold; Replayed
// when it is a stored answer); a sale rule's refusal, nothing sold or stored under the key
// (*SaleNotOpenError, *SaleEndedError, *CustomerLimitError, *HoldLimitError); ErrIdempotencyKeyReused; ErrBusy (the product's queue is full,
// its lock could not be had in time, or writes kept conflicting; nothing was sold — a
// *BusyError says when to retry); ErrLockLost (a lock expired mid-batch and a defense layer
// refused the write; nothing was sold); ErrUnavailable (Postgres or Redis unreachable, or —
// with ErrOutcomeUnknown — the outcome of the commit is unknown: retry with the same key;
// whatever else the error holds, an error with ErrUnavailable never means "nothing was sold");
// the context's error when the caller gave up while the order was still queued (nothing was
// sold). A keyed order is refused busy (or its lock lost) only once its key is known to have
// no stored outcome: one that has is answered with it (replayStored).
func (s *Service) PlaceOrder(ctx context.Context, req OrderRequest) (res OrderResult, err error) {
	defer func() { s.countOutcome(res, err) }()

	items, err := s.validateOrder(req)
	if err != nil {
		return OrderResult{}, err
	}
	if len(items) == 1 {
		// Before anything else is made for the order: before a sale opens, and after a
		// sell-out, this is most of them.
		if err := s.refuseFromView(ctx, items[0], req.IdempotencyKey, req.CustomerID); err != nil {
			return OrderResult{}, err
		}
	}
	t := &ticket{id: uuid.Must(uuid.NewV7()), customerID: req.CustomerID, items: items, key: req.IdempotencyKey}
	if t.key != "" {
		t.fingerprint = requestFingerprint(req.CustomerID, items)
	}
	var o outcome
	if len(items) == 1 {
		o = s.batches.submit(ctx, items[0].ProductID, t)
		if busy, ok := errors.AsType[*BusyError](o.err); ok && busy.Shed {
			// Turned away before any batch looked at it: its key may still have an
			// outcome from an earlier attempt, which a refusal must not hide.
			out := [1]outcome{o}
			s.replayStored(ctx, []*ticket{t}, out[:])
			o = out[0]
		}
	} else {
		ids := make([]int64, len(items))
		for i, it := range items {
			ids[i] = it.ProductID
		}
		out := s.decide(ctx, ids, []*ticket{t}, nil, nil)
		s.replayStored(ctx, []*ticket{t}, out)
		o = out[0]
	}
	if o.err != nil {
		return OrderResult{}, o.err
	}
	return o.result(), nil
}

// refuseFromView refuses an order for one product that the views know does not exist, is not
// on sale (ruleRefusal), or is sold out, with no query and no lock, and returns nil when they
// know none of these.
//
// "Does not exist" comes from a Postgres read that began at most one lease before the order,
// and a creation is answered only once every such read from before it is older than that
// (Views.Created), so it never hides a product whose creation has been answered. Nothing is
// stored for an order of a product that does not exist, so a key has no outcome to replay —
// unless the product came into existence since: only an order decided between the insert's
// commit and the creation's answer (its id guessed), retried within one lease, could meet
// such a refusal.
//
// A view is never above the stock in Postgres (purchases lower it after the view was read; a
// restock waits out every lease before raising it), so "sold out" from a view is true when it
// is said, and the "available" it reports, 0, is exact. An order with an Idempotency-Key is
// refused so only when the key has no stored outcome for the product to replay (storedKeys); a
// key used before for some other request is then answered sold-out, not
// idempotency-key-reused: both sell nothing.
func (s *Service) refuseFromView(ctx context.Context, it Item, key, customer string) error {
	if s.cfg.Views == nil {
		return nil
	}
	r := s.cfg.Views.Refusal(ctx, it.ProductID)
	if r.Missing {
		return &ProductNotFoundError{ProductID: it.ProductID}
	}
	if err := s.ruleRefusal(ctx, it, key, customer, r); err != nil {
		return err
	}
	if !r.SoldOut {
		return nil
	}
	if key != "" {
		if unclaimed, ok := s.keys.unclaimed(ctx, it.ProductID, r.Version, RecordKey{CustomerID: customer, Key: key}); !ok || !unclaimed {
			return nil
		}
	}
	s.metrics.refusedFromView()
	return &SoldOutError{ProductID: it.ProductID, Requested: it.Quantity, Available: 0}
}

// ruleRefusal refuses an order for one product, of customer, that the sale rules of its view
// (nil when unknown) refuse: a sale not open yet or ended, on this replica's clock (Config.Now),
// or a customer this replica knows has no room left under the limit (customerMemory). Postgres's
// clock decides every sale, so a replica whose clock runs ahead lets orders through that the
// purchase statement then refuses; one that runs behind refuses for as long as it lags, saying
// when to come back. A refusal by a rule stores nothing, so an order with a key is refused only
// once the key is known to have no stored outcome (keyUnclaimed): an order confirmed before an
// admin ended the sale is replayed, not refused.
func (s *Service) ruleRefusal(ctx context.Context, it Item, key, customer string, r Refusal) error {
	if !r.Known || s.cfg.SkipRuleChecks {
		return nil
	}
	sale, version := r.Sale, r.Version
	err := sale.closed(it.ProductID, s.cfg.Now())
	// A product sold with holds gives units back when they expire, so what a customer was seen
	// to have is no bound from below there: its batches decide the limit.
	if err == nil && sale.Limited() && sale.HoldFor == 0 {
		if over := s.customers.refusal(it.ProductID, sale.MaxPerCustomer, customer, it.Quantity); over != nil {
			err = over
		}
	}
	if err == nil {
		return nil
	}
	if key != "" && !s.keyUnclaimed(ctx, it.ProductID, RecordKey{CustomerID: customer, Key: key}, version, err) {
		return nil // the purchase path answers it, from the record
	}
	s.metrics.refusedFast(err)
	return err
}

// windowMargin is how far from the opening a replica's clock must be for an order with a key to
// be refused "not open" from the product's key set: nothing is confirmed before the opening,
// by Postgres's clock, and the margin covers a replica's clock running that much behind it.
const windowMargin = time.Second

// keyUnclaimed reports whether key is known to have no stored outcome, so that an order refused
// by a rule (err) may be answered so without the purchase path. While the sale is closed
// nothing is confirmed for the product, so, as for a sold-out product, the keys with an outcome
// for it at the view's version are loaded once per replica and version (storedKeys); an order
// of a customer at the limit has its key looked up (one query for the crowd of the moment):
// other customers' orders are confirmed meanwhile.
func (s *Service) keyUnclaimed(ctx context.Context, id int64, key RecordKey, version int64, err error) bool {
	if notOpen, ok := errors.AsType[*SaleNotOpenError](err); !errors.Is(err, ErrCustomerLimit) && (!ok || notOpen.Opens() > windowMargin) {
		unclaimed, known := s.keys.unclaimed(ctx, id, version, key)
		return known && unclaimed
	}
	records, lookupErr := s.lookups.get(ctx, []RecordKey{key})
	_, stored := records[key]
	return !stored && lookupErr == nil
}

// decideQueued decides one batch of a product's queue. It runs detached from every caller: a
// client that leaves does not cancel its batch-mates.
func (s *Service) decideQueued(q *productQueue, tickets []*ticket, more func() []*ticket) []outcome {
	return s.decide(context.Background(), []int64{q.id}, tickets, &q.hint, more)
}

// decide decides tickets, which all want the products ids (ascending), and returns an outcome
// per ticket; an outcome that needsLookup is for the caller to settle with replayStored, once
// the batch's lock is released (the batcher does it beside its next batch). When the hint says
// so (or there is none) it first reads the stock without the lock: a batch that would sell
// nothing — products missing, too little stock, replays — is answered from that read, which is
// true at the moment it was made, without locking. Everything that sells is decided under the
// products' locks. more, when not nil, is called once the locks are held, before the read: the
// tickets it returns (orders that queued while the lock was awaited) join the batch, and their
// outcomes follow those of tickets.
func (s *Service) decide(ctx context.Context, ids []int64, tickets []*ticket, h *hint, more func() []*ticket) []outcome {
	start := time.Now()
	if h.worthLooking(tickets) {
		if outcomes, ok := s.decideWithoutLock(ctx, ids, tickets, h); ok {
			s.metrics.batch(len(tickets), time.Since(start), false)
			return outcomes
		}
	}
	var (
		res    settled
		locked bool
	)
	err := s.locker.WithProducts(ctx, ids, func(ctx context.Context, g *Grant) error {
		locked = len(g.Fences) > 0
		if more != nil { // once, even if the lock layer runs this again
			tickets = append(tickets, more()...)
			more = nil
		}
		var err error
		res, err = s.settle(ctx, ids, tickets, g, h)
		return err
	})
	if res.write != nil {
		// Outside the lock, which the next batch is waiting for; before the answers, so that
		// a read that starts after a 201 sees its order.
		s.tellViews(*res.write, res.at)
	}
	if layer, ok := caughtBy(err); ok {
		s.metrics.caught(layer)
	}
	if err != nil {
		res.outcomes = failAll(len(tickets), err)
	} else {
		s.customers.learn(res.units)
		s.scheduleExpiries(res.holds)
	}
	s.metrics.batch(len(tickets), time.Since(start), locked)
	return res.outcomes
}

// settled is what settle decided: an outcome per ticket, and the write it committed (nil for
// none) with the write's time.
type settled struct {
	outcomes []outcome
	write    *Write
	at       time.Time
	// units is what the batch knows each customer has of each product with a limit.
	units customerUnits
	// holds are the orders the write held, with when each expires.
	holds map[uuid.UUID]time.Time
}

// decideWithoutLock answers tickets from a read made without the lock, if that read sells
// nothing; ok is false when something would sell, which only the lock may decide.
func (s *Service) decideWithoutLock(ctx context.Context, ids []int64, tickets []*ticket, h *hint) (outcomes []outcome, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
	defer cancel()
	snap, err := s.store.Snapshot(ctx, ids, ticketKeys(tickets), ticketCustomers(tickets))
	if err != nil {
		return failAll(len(tickets), err), true
	}
	a := allocate(snap, tickets, nil, !s.cfg.SkipRuleChecks)
	h.saw(ids[0], snap, a.write)
	if len(a.write.Decrements) > 0 {
		return nil, false
	}
	s.customers.learn(a.units)
	if len(a.write.Records) > 0 {
		// The refusals are true whether or not their records are stored: a retry whose record
		// is missing is decided afresh, which is also a true answer. But a key that another
		// request stored meanwhile must be answered from its record: that needs a new read.
		if _, err := s.store.Commit(ctx, a.write); errors.Is(err, ErrConflict) {
			return nil, false
		}
	}
	return a.outcomes, true
}

// settle decides tickets under the products' locks (g): it reads, allocates and writes, and
// when the write is refused — a condition of the decrement no longer held — reads again, names
// the layer that refused it, and decides afresh, up to Config.ConflictRetries times. It returns
// what it decided, or the error that failed the whole batch (nothing was sold then, or the
// outcome is unknown and the error says so).
//
// A batch of one product given the lock with the last holder's note — its level after that
// holder's batch — is first decided from the note, without a read: one round trip less while
// the lock is held, which is what every other replica's batch waits for. The version check
// makes that safe for what sells: a stale note is a stale read, refused like one, and the batch
// then reads. What refuses and sells nothing has no write to check, so it is decided from a
// read. On the way out the batch leaves the product's level for the next holder.
func (s *Service) settle(ctx context.Context, ids []int64, tickets []*ticket, g *Grant, h *hint) (settled, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
	defer cancel()
	// The keys' records are read only once a write has been refused: almost every key is new,
	// and the write's insert of the records is what finds one that is not.
	var keys []RecordKey
	var refused *RefusedError // the last refusal, explained by the next read
	var refusedWrite Write
	// ruleCaught: Postgres refused a write for a sale rule. From then on the batch applies the
	// rules itself, even when its checks are off (Config.SkipRuleChecks), so that the orders
	// are answered with the rule that refused them rather than retried until busy.
	var ruleCaught bool
	noted, useNote := notedLevel(ids, g)
	for conflicts := 0; ; {
		var snap Snapshot
		fromNote := useNote
		useNote = false // any further pass reads
		if fromNote {
			snap = Snapshot{Now: s.cfg.Now(), Levels: map[int64]Level{ids[0]: noted}}
		} else {
			var err error
			if snap, err = s.store.Snapshot(ctx, ids, keys, ticketCustomers(tickets)); err != nil {
				return settled{}, err
			}
		}
		if refused != nil {
			window, err := s.explainRefusal(refusedWrite, refused.Conditions, snap)
			if err != nil {
				return settled{}, err
			}
			ruleCaught = ruleCaught || window
			refused = nil
		}
		if s.afterRead != nil {
			s.afterRead(ctx, len(tickets))
		}
		a := allocate(snap, tickets, g.Fences, !s.cfg.SkipRuleChecks || ruleCaught)
		if fromNote && len(a.write.Decrements) == 0 && refuses(a.outcomes) {
			// A refusal must be true when it is decided, and only a write's version check
			// tells a stale note from a true one: a batch that sells nothing has no such
			// write, so its refusals are decided from a read instead.
			continue
		}
		h.saw(ids[0], snap, a.write)
		if a.write.empty() {
			leaveLevel(g, ids, snap, a.write)
			return settled{outcomes: a.outcomes, units: a.units}, nil
		}
		c, werr := s.store.Commit(ctx, a.write)
		if werr == nil {
			return settleCommitted(ids, tickets, g, snap, a, c), nil
		}
		if !errors.Is(werr, ErrConflict) {
			return settled{}, werr
		}
		if layer, ok := caughtBy(werr); ok {
			// A CHECK constraint: the read shows what is left, and what each customer has.
			s.metrics.caught(layer)
			ruleCaught = ruleCaught || layer == LayerLimit || layer == LayerHoldLimit
		} else if errors.As(werr, &refused) {
			refusedWrite = a.write
		}
		keys = ticketKeys(tickets)
		conflicts++
		if conflicts > s.cfg.ConflictRetries {
			return settled{}, &BusyError{RetryAfter: time.Second, Reason: fmt.Sprintf("%d conflicting writes in a row: %v", conflicts, werr)}
		}
		// The first retry is at once: most refusals are a stored key, whose writer has
		// committed. After that, a short random pause lets a writer that keeps beating us
		// finish, and keeps a crowd of losers from colliding again in lockstep.
		if conflicts > 1 {
			if clock.Sleep(ctx, time.Duration(rand.Int64N(int64(conflicts)*int64(time.Millisecond)))) != nil {
				return settled{}, fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
			}
		}
	}
}

// settleCommitted settles a batch whose write committed: the orders left out because another
// request stored their key first are answered from the records the write found (or read once
// the lock is released), the rest carry the write's time, and the level the write left is
// noted for the next holder.
func settleCommitted(ids []int64, tickets []*ticket, g *Grant, snap Snapshot, a allocation, c Committed) settled {
	w := a.write
	if len(c.Skipped) > 0 {
		w = w.Without(c.Skipped)
		leaveOut(tickets, a.outcomes, c.Skipped, c.Stored)
	}
	leaveLevel(g, ids, snap, w)
	for i := range a.outcomes {
		o := &a.outcomes[i].order
		if a.outcomes[i].err != nil || !o.CreatedAt.IsZero() {
			continue
		}
		o.CreatedAt = c.At
		if expires, held := c.Holds[o.ID]; held {
			o.Status, o.ExpiresAt = OrderStatusHeld, &expires
		}
	}
	units := a.units
	if len(c.Skipped) > 0 {
		// The counts included orders the write left out: not something to remember.
		units = nil
	}
	return settled{outcomes: a.outcomes, write: &w, at: c.At, units: units, holds: c.Holds}
}

// notedLevel returns the level the last holder noted for a batch of one product. The store's
// version check refuses a write decided from a stale one (a demonstration store without that
// check comes with a locker that gives no notes: demo.Parts).
func notedLevel(ids []int64, g *Grant) (Level, bool) {
	if len(ids) != 1 {
		return Level{}, false
	}
	return parseLevelNote(g.Notes[ids[0]])
}

// leaveLevel notes, for the next holder, the level a batch of one product left: the one it
// decided from, less what it committed.
func leaveLevel(g *Grant, ids []int64, snap Snapshot, w Write) {
	if len(ids) != 1 {
		return
	}
	l, ok := snap.Levels[ids[0]]
	if !ok || l.Sale.Limited() || l.Sale.HoldFor > 0 {
		// A product with a limit, or sold with a hold, is decided from a read of what its
		// customers bought, or hold.
		return
	}
	for _, d := range w.Decrements {
		l.Stock -= d.Quantity
		l.Version++
	}
	g.Leave[ids[0]] = levelNote(l)
}

// tellViews keeps the views current with a committed write. The store's version check means
// the write applied to exactly the row it was decided from, so the level it left is known
// without a read. (A demonstration store without that check comes with views that ignore this
// and learn of the purchase when their TTL makes them read again: demo.Parts.)
func (s *Service) tellViews(w Write, at time.Time) {
	if s.cfg.Views == nil {
		return
	}
	for _, d := range w.Decrements {
		s.cfg.Views.Committed(d.ProductID, d.Read.Stock-d.Quantity, d.Read.Version+1, at)
	}
}

// explainRefusal names, from a fresh read, the layer among the write's conditions that refused
// w's decrement and counts it; window reports that the sale window did (then the batch applies
// the rules from this read, whatever its checks: see settle).
// A fencing token newer than the batch's means its lease ran out and another holder wrote: the
// batch must not go on, and the error says so. A version that moved, or stock now short, was a
// conflict: the batch is decided again from this read. A sale not open at the read's time (the
// store's clock) refused a write decided by a clock that ran ahead (a lock note's, this
// replica's). (A key stored meanwhile by another request refuses the write too; no layer is
// named for it, and the new read replays it.)
func (s *Service) explainRefusal(w Write, d Defense, snap Snapshot) (window bool, err error) {
	for _, dec := range w.Decrements {
		now, ok := snap.Levels[dec.ProductID]
		switch {
		case !ok:
		case d.Lock && now.Fence > dec.Fence:
			return false, &CaughtError{Layer: LayerFence, ProductID: dec.ProductID,
				Err: fmt.Errorf("%w: fence %d is older than %d", ErrLockLost, dec.Fence, now.Fence)}
		case d.Version && now.Version != dec.Read.Version:
			s.metrics.caught(LayerVersion)
			s.metrics.conflict()
		case now.Sale.closed(dec.ProductID, snap.Now) != nil:
			s.metrics.caught(LayerWindow)
			window = true
		case d.Guard && now.Stock < dec.Quantity:
			s.metrics.caught(LayerGuard)
		}
	}
	return window, nil
}

// refuses reports whether some outcome is a refusal for want of stock or by a sale rule.
func refuses(outcomes []outcome) bool {
	for _, o := range outcomes {
		if errors.Is(o.err, ErrSoldOut) || refusedByRule(o.err) {
			return true
		}
	}
	return false
}

// ticketCustomers lists the tickets' customers, each once.
func ticketCustomers(tickets []*ticket) []string {
	customers := make([]string, 0, len(tickets))
	seen := make(map[string]bool, len(tickets))
	for _, t := range tickets {
		if !seen[t.customerID] {
			seen[t.customerID] = true
			customers = append(customers, t.customerID)
		}
	}
	return customers
}

func ticketKeys(tickets []*ticket) []RecordKey {
	var keys []RecordKey
	for _, t := range tickets {
		if t.key != "" {
			keys = append(keys, t.recordKey())
		}
	}
	return keys
}

func failAll(n int, err error) []outcome {
	outcomes := make([]outcome, n)
	for i := range outcomes {
		outcomes[i].err = err
	}
	return outcomes
}

// validateOrder checks req against the rules and returns its items sorted by product id: the
// order in which rows are written, so that concurrent carts never deadlock in Postgres.
func (s *Service) validateOrder(req OrderRequest) ([]Item, error) {
	if err := ValidateCustomerID(req.CustomerID); err != nil {
		return nil, err
	}
	switch {
	case len(req.Items) == 0:
		return nil, &ValidationError{Field: "items", Reason: "must not be empty"}
	case len(req.Items) > MaxItems:
		return nil, &ValidationError{Field: "items", Reason: fmt.Sprintf("must have at most %d entries", MaxItems)}
	}
	if err := validKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	items := slices.Clone(req.Items)
	slices.SortStableFunc(items, func(a, b Item) int { return cmpInt64(a.ProductID, b.ProductID) })
	// The field is named by the item's place in the request, not in the sorted copy.
	field := func(it Item, name string) string {
		return fmt.Sprintf("items[%d].%s", slices.Index(req.Items, it), name)
	}
	for i, it := range items {
		switch {
		case it.ProductID < 1:
			return nil, &ValidationError{Field: field(it, "product_id"), Reason: "must be a positive product id"}
		case it.Quantity < 1 || it.Quantity > s.cfg.MaxQuantity:
			return nil, &ValidationError{Field: field(it, "quantity"), Reason: fmt.Sprintf("must be between 1 and %d", s.cfg.MaxQuantity)}
		case i > 0 && items[i-1].ProductID == it.ProductID:
			return nil, &ValidationError{Field: field(it, "product_id"), Reason: fmt.Sprintf("product %d appears more than once", it.ProductID)}
		}
	}
	return items, nil
}

// validKey checks an Idempotency-Key: empty (none), or at most MaxIdempotencyKeyLen characters
// of plain text (characters, as every other limit here counts them, not bytes).
func validKey(key string) error {
	if utf8.RuneCountInString(key) > MaxIdempotencyKeyLen {
		return &ValidationError{Field: "Idempotency-Key", Reason: fmt.Sprintf("must be at most %d characters", MaxIdempotencyKeyLen)}
	}
	return plainText("Idempotency-Key", key)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// restockFingerprint identifies a restock request's meaning: the product and the quantity.
func restockFingerprint(productID, quantity int64) []byte {
	var buf [16]byte
	binary.BigEndian.PutUint64(buf[:8], uint64(productID))
	binary.BigEndian.PutUint64(buf[8:], uint64(quantity))
	sum := sha256.Sum256(append([]byte("restock\x00"), buf[:]...))
	return sum[:]
}

// requestFingerprint identifies a request's meaning: the same customer buying the same items,
// in whatever order they were listed.
func requestFingerprint(customerID string, sortedItems []Item) []byte {
	h := sha256.New()
	h.Write([]byte(customerID))
	h.Write([]byte{0})
	var buf [16]byte
	for _, it := range sortedItems {
		binary.BigEndian.PutUint64(buf[:8], uint64(it.ProductID))
		binary.BigEndian.PutUint64(buf[8:], uint64(it.Quantity))
		h.Write(buf[:])
	}
	return h.Sum(nil)
}

func (s *Service) countOutcome(res OrderResult, err error) {
	switch {
	case err == nil && res.Replayed: // a key's accepted order too
		s.metrics.outcome(outcomeReplayed)
	case err == nil:
		s.metrics.outcome(outcomeConfirmed)
		for _, it := range res.Order.Items {
			s.metrics.sold(it.Quantity)
		}
	case errors.Is(err, ErrSoldOut):
		s.metrics.outcome(outcomeSoldOut)
	case refusedByRule(err):
		s.metrics.outcome(ruleOutcome(err))
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrProductNotFound), errors.Is(err, ErrIdempotencyKeyReused):
		s.metrics.outcome(outcomeRejected)
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// What the API answers 503, whatever else the error holds (a lock lost while the
		// commit's reply was lost, say): a dependency down or slow, or an outcome unknown.
		s.metrics.outcome(outcomeUnavailable)
	case errors.Is(err, ErrBusy), errors.Is(err, ErrLockLost):
		s.metrics.outcome(outcomeBusy)
	case errors.Is(err, context.Canceled):
		s.metrics.outcome(outcomeCancelled)
	default:
		s.metrics.outcome(outcomeError)
	}
}

// caughtBy returns the layer that refused a write, if one did.
func caughtBy(err error) (Layer, bool) {
	var caught *CaughtError
	if errors.As(err, &caught) {
		return caught.Layer, true
	}
	return "", false
}
