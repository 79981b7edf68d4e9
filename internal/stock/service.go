package stock

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

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
type Config struct {
	// Defense selects the layers every purchase goes through. It has no default: the zero
	// value is the naive write. Use DefaultDefense.
	Defense Defense
	// MaxQuantity is the most units of one product an order may ask for. Default 10.
	MaxQuantity int64
	// KeyPrefix starts every lock name, so that several deployments (or tests) can share one
	// Redis. Default "stocksvc:".
	KeyPrefix string
	// PurchaseTimeout bounds the database work of one purchase once its locks are held.
	// Default 5s.
	PurchaseTimeout time.Duration
	// ConflictRetries is how many times a purchase is retried after a version conflict before
	// the order is refused as busy. Default 8.
	ConflictRetries int
	// ClaimTTL is the longest a request can keep its idempotency key marked in flight; it
	// must outlast the longest request. Default 30s.
	ClaimTTL time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxQuantity <= 0 {
		c.MaxQuantity = 10
	}
	if c.KeyPrefix == "" {
		c.KeyPrefix = "stocksvc:"
	}
	if c.PurchaseTimeout <= 0 {
		c.PurchaseTimeout = 5 * time.Second
	}
	if c.ConflictRetries <= 0 {
		c.ConflictRetries = 8
	}
	if c.ClaimTTL <= 0 {
		c.ClaimTTL = 30 * time.Second
	}
	return c
}

// Service sells stock through the defense layers its Config selects.
type Service struct {
	store   Store
	locker  Locker
	cfg     Config
	metrics *Metrics
}

// NewService returns a Service. metrics may be nil.
func NewService(store Store, locker Locker, cfg Config, metrics *Metrics) *Service {
	return &Service{store: store, locker: locker, cfg: cfg.withDefaults(), metrics: metrics}
}

// CreateProduct validates p and stores it, with surrounding spaces trimmed from SKU and name.
// Errors: *ValidationError, ErrDuplicateSKU,
// ErrUnavailable.
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
	if err := plainText("sku", p.SKU); err != nil {
		return Product{}, err
	}
	if err := plainText("name", p.Name); err != nil {
		return Product{}, err
	}
	return s.store.CreateProduct(ctx, p)
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

// Product returns the product with id. Errors: *ProductNotFoundError, ErrUnavailable.
func (s *Service) Product(ctx context.Context, id int64) (Product, error) {
	return s.store.Product(ctx, id)
}

// Audit accounts for product id's stock. Errors: *ProductNotFoundError, ErrUnavailable.
func (s *Service) Audit(ctx context.Context, id int64) (Audit, error) {
	return s.store.Audit(ctx, id)
}

// Order returns the order with id. Errors: ErrOrderNotFound, ErrUnavailable.
func (s *Service) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	return s.store.Order(ctx, id)
}

// Restock adds quantity units to product id, under the product's lock when the lock layer is
// on (so a restock never races a purchase's read-check-write). Errors: *ValidationError,
// *ProductNotFoundError, ErrBusy, ErrLockLost, ErrUnavailable.
func (s *Service) Restock(ctx context.Context, id, quantity int64) (Product, error) {
	if quantity < 1 || quantity > MaxStock {
		return Product{}, &ValidationError{Field: "quantity", Reason: fmt.Sprintf("must be between 1 and %d", MaxStock)}
	}
	if !s.cfg.Defense.Lock {
		return s.store.Restock(ctx, id, quantity, 0)
	}
	// A product that does not exist needs no lock to say so, and taking one would leave its
	// fencing counter behind in Redis for good.
	levels, err := s.store.StockLevels(ctx, []int64{id})
	if err != nil {
		return Product{}, err
	}
	if _, ok := levels[id]; !ok {
		return Product{}, &ProductNotFoundError{ProductID: id}
	}
	var prod Product
	err = s.locker.WithLocks(ctx, []string{s.productLock(id)}, func(ctx context.Context, fences []int64) error {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
		defer cancel()
		var err error
		prod, err = s.store.Restock(ctx, id, quantity, fences[0])
		return err
	})
	if layer, ok := caughtBy(err); ok {
		s.metrics.caught(layer)
	}
	return prod, err
}

// PurgeIdempotencyKeys forgets idempotency keys older than retention and reports how many.
func (s *Service) PurgeIdempotencyKeys(ctx context.Context, retention time.Duration, now time.Time) (int64, error) {
	return s.store.PurgeIdempotencyKeys(ctx, now.Add(-retention))
}

// PlaceOrder buys every item of req, all or nothing.
//
// Errors: *ValidationError; *ProductNotFoundError; *SoldOutError (nothing was sold);
// ErrIdempotencyKeyReused; ErrIdempotencyKeyInFlight; ErrBusy (contention: locks not obtained
// in time, or version conflicts beyond the retry budget; nothing was sold); ErrLockLost (a
// lock expired mid-purchase and a defense layer refused the write; nothing was sold);
// ErrUnavailable (Postgres or Redis unreachable).
func (s *Service) PlaceOrder(ctx context.Context, req OrderRequest) (res OrderResult, err error) {
	defer func() { s.countOutcome(res, err) }()

	items, err := s.validateOrder(req)
	if err != nil {
		return OrderResult{}, err
	}
	if req.IdempotencyKey == "" {
		order, err := s.purchase(ctx, req.CustomerID, items, nil)
		return OrderResult{Order: order}, err
	}

	fingerprint := requestFingerprint(req.CustomerID, items)
	release, err := s.locker.Claim(ctx, s.claimName(req.IdempotencyKey), s.cfg.ClaimTTL)
	if errors.Is(err, errClaimed) {
		// Someone holds the key. If they have finished, what they stored is the answer.
		res, err := s.replay(ctx, req.IdempotencyKey, fingerprint)
		if errors.Is(err, errNoRecord) {
			return OrderResult{}, ErrIdempotencyKeyInFlight
		}
		return res, err
	}
	if err != nil {
		return OrderResult{}, err
	}
	defer release()

	res, err = s.replay(ctx, req.IdempotencyKey, fingerprint)
	if !errors.Is(err, errNoRecord) {
		return res, err
	}
	rec := &IdempotencyRecord{Key: req.IdempotencyKey, Fingerprint: fingerprint}
	order, err := s.purchase(ctx, req.CustomerID, items, rec)
	switch {
	case errors.Is(err, errIdempotencyKeyTaken):
		// Our claim lapsed and another request stored its outcome first; Postgres refused
		// our duplicate, so nothing was sold twice. Answer with theirs.
		return s.replay(ctx, req.IdempotencyKey, fingerprint)
	case errors.Is(err, ErrSoldOut):
		var sold *SoldOutError
		if errors.As(err, &sold) {
			rec.Outcome, rec.ProductID, rec.Requested, rec.Available = outcomeRecordSoldOut, sold.ProductID, sold.Requested, sold.Available
			// Storing the refusal is best effort: if it fails, a retry is simply evaluated
			// afresh, which is also a correct answer.
			_ = s.store.SaveRefusal(context.WithoutCancel(ctx), *rec)
		}
	}
	return OrderResult{Order: order}, err
}

// precheck refuses, without taking any lock, an order that cannot succeed: a product that does
// not exist, or one whose committed stock is already short. Stock only grows by restocks, so a
// short read is a true answer at the moment it was read; after a flash sale sells out, this is
// what answers the crowd, instead of every buyer queueing for the lock to learn the same thing.
// It decides nothing for the orders it lets through: those take the whole defended path.
func (s *Service) precheck(ctx context.Context, items []Item) error {
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.ProductID
	}
	levels, err := s.store.StockLevels(ctx, ids)
	if err != nil {
		return err
	}
	// A product that does not exist makes the whole cart wrong, whatever else is short: it is
	// answered first, so the answer does not depend on the order of the items.
	for _, it := range items {
		if _, ok := levels[it.ProductID]; !ok {
			return &ProductNotFoundError{ProductID: it.ProductID}
		}
	}
	for _, it := range items {
		if level := levels[it.ProductID]; level < it.Quantity {
			return &SoldOutError{ProductID: it.ProductID, Requested: it.Quantity, Available: level}
		}
	}
	return nil
}

// purchase runs the defended purchase of items, retrying version conflicts.
func (s *Service) purchase(ctx context.Context, customerID string, items []Item, rec *IdempotencyRecord) (Order, error) {
	if err := s.precheck(ctx, items); err != nil {
		return Order{}, err
	}
	p := Purchase{OrderID: uuid.Must(uuid.NewV7()), CustomerID: customerID, Items: items, Defense: s.cfg.Defense, Idempotency: rec}
	var order Order
	run := func(ctx context.Context, fences []int64) error {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
		defer cancel()
		p.Fences = fences
		for attempt := 1; ; attempt++ {
			var err error
			order, err = s.store.PlaceOrder(ctx, p)
			if layer, ok := caughtBy(err); ok {
				s.metrics.caught(layer)
			}
			if !errors.Is(err, errVersionConflict) {
				return err
			}
			if attempt > s.cfg.ConflictRetries {
				return fmt.Errorf("%w: %d version conflicts in a row: %w", ErrBusy, attempt, err)
			}
			s.metrics.conflict()
			// A short random pause lets the writer that beat us finish, and keeps a crowd of
			// losers from colliding again in lockstep.
			if err := sleep(ctx, time.Duration(rand.Int64N(int64(attempt)*int64(time.Millisecond)))); err != nil {
				return fmt.Errorf("%w: %w", ErrBusy, err)
			}
		}
	}
	if !s.cfg.Defense.Lock {
		// Without a lock there is no lease to lose; detach from the caller so a purchase that
		// has begun runs to a known outcome, as it does under the lock.
		return order, run(context.WithoutCancel(ctx), nil)
	}
	names := make([]string, len(items))
	for i, it := range items {
		names[i] = s.productLock(it.ProductID)
	}
	err := s.locker.WithLocks(ctx, names, run)
	return order, err
}

// replay answers from the record stored under key, or returns errNoRecord.
func (s *Service) replay(ctx context.Context, key string, fingerprint []byte) (OrderResult, error) {
	rec, err := s.store.IdempotencyRecord(ctx, key)
	if err != nil {
		return OrderResult{}, err
	}
	if string(rec.Fingerprint) != string(fingerprint) {
		return OrderResult{}, ErrIdempotencyKeyReused
	}
	if rec.Outcome == outcomeRecordSoldOut {
		return OrderResult{}, &SoldOutError{ProductID: rec.ProductID, Requested: rec.Requested, Available: rec.Available, Replayed: true}
	}
	order, err := s.store.Order(ctx, rec.OrderID)
	if err != nil {
		return OrderResult{}, fmt.Errorf("replay order %s: %w", rec.OrderID, err)
	}
	return OrderResult{Order: order, Replayed: true}, nil
}

// validateOrder checks req against the rules and returns its items sorted by product id: the
// order in which rows are written, so that concurrent carts never deadlock in Postgres.
func (s *Service) validateOrder(req OrderRequest) ([]Item, error) {
	switch {
	case strings.TrimSpace(req.CustomerID) == "":
		return nil, &ValidationError{Field: "customer_id", Reason: "must not be empty"}
	case utf8.RuneCountInString(req.CustomerID) > MaxCustomerIDLen:
		return nil, &ValidationError{Field: "customer_id", Reason: fmt.Sprintf("must be at most %d characters", MaxCustomerIDLen)}
	case len(req.Items) == 0:
		return nil, &ValidationError{Field: "items", Reason: "must not be empty"}
	case len(req.Items) > MaxItems:
		return nil, &ValidationError{Field: "items", Reason: fmt.Sprintf("must have at most %d entries", MaxItems)}
	case len(req.IdempotencyKey) > MaxIdempotencyKeyLen:
		return nil, &ValidationError{Field: "Idempotency-Key", Reason: fmt.Sprintf("must be at most %d characters", MaxIdempotencyKeyLen)}
	}
	if err := plainText("customer_id", req.CustomerID); err != nil {
		return nil, err
	}
	if err := plainText("Idempotency-Key", req.IdempotencyKey); err != nil {
		return nil, err
	}
	items := slices.Clone(req.Items)
	slices.SortStableFunc(items, func(a, b Item) int { return cmpInt64(a.ProductID, b.ProductID) })
	for i, it := range items {
		field := fmt.Sprintf("items[%d]", slices.Index(req.Items, it))
		switch {
		case it.ProductID < 1:
			return nil, &ValidationError{Field: field + ".product_id", Reason: "must be a positive product id"}
		case it.Quantity < 1 || it.Quantity > s.cfg.MaxQuantity:
			return nil, &ValidationError{Field: field + ".quantity", Reason: fmt.Sprintf("must be between 1 and %d", s.cfg.MaxQuantity)}
		case i > 0 && items[i-1].ProductID == it.ProductID:
			return nil, &ValidationError{Field: field + ".product_id", Reason: fmt.Sprintf("product %d appears more than once", it.ProductID)}
		}
	}
	return items, nil
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

func (s *Service) productLock(id int64) string {
	return s.cfg.KeyPrefix + "lock:product:{" + strconv.FormatInt(id, 10) + "}"
}

// claimName hashes the key: it is client input, and must neither grow Redis keys without bound
// nor smuggle a hash tag of its own.
func (s *Service) claimName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.cfg.KeyPrefix + "idem:{" + hex.EncodeToString(sum[:16]) + "}"
}

func (s *Service) countOutcome(res OrderResult, err error) {
	switch {
	case err == nil && res.Replayed:
		s.metrics.outcome(outcomeReplayed)
	case err == nil:
		s.metrics.outcome(outcomeConfirmed)
		for _, it := range res.Order.Items {
			s.metrics.sold(it.Quantity)
		}
	case errors.Is(err, ErrSoldOut):
		s.metrics.outcome(outcomeSoldOut)
	case errors.Is(err, ErrBusy), errors.Is(err, ErrLockLost), errors.Is(err, ErrIdempotencyKeyInFlight):
		s.metrics.outcome(outcomeBusy)
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrProductNotFound), errors.Is(err, ErrIdempotencyKeyReused):
		s.metrics.outcome(outcomeRejected)
	case errors.Is(err, context.Canceled):
		s.metrics.outcome(outcomeCancelled)
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// What the API answers 503: a dependency down or slow, not a fault of the service.
		s.metrics.outcome(outcomeUnavailable)
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

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
