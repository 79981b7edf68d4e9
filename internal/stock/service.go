package stock

import (
	"context"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/semaphore"
)

// Service sells stock: it holds the rules and runs the purchase path over a Store, a Locker
// and, optionally, Views.
//
// An order (admission.go) is validated, refused at once — no query, no lock — when the views
// already tell (refusals.go), and otherwise joins its product's queue on this replica
// (batcher.go); the queue's worker decides what gathered as one batch (decide.go): under the
// product's lock (settle.go), one read of the stock — or the level the last holder noted in
// the lock (notes.go) — first-fit allocation in arrival order (allocate.go), one write
// (Store.Commit). A cart — several products — is decided alone, under the locks of all its
// products. A refusal that could hide an order stored under the request's key is replaced by
// that order first (records.go), and every answer is counted as the outcome it is
// (classify.go). The rest of the Service is in files by concern too: products.go, restock.go,
// sale.go, holds.go, audit.go, accepted.go, and its Config in config.go.
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
	if metrics != nil {
		metrics.stockLeft.use(func(ctx context.Context, limit int) ([]Product, error) {
			page, err := s.Products(ctx, 0, limit, true)
			return page.Products, err
		})
	}
	return s
}

// Close refuses new orders and returns once every queued order has been decided.
func (s *Service) Close() {
	s.batches.close()
	s.lookups.wait()
}

// Order returns the order with id. Errors: ErrOrderNotFound, ErrUnavailable.
func (s *Service) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	return s.store.Order(ctx, id)
}

// PurgeIdempotencyKeys forgets idempotency keys older than retention on the store's clock,
// except those of orders accepted for later (package async purges those), and reports how many
// it deleted (also when it fails part way). Errors: as Store.PurgeIdempotencyKeys.
func (s *Service) PurgeIdempotencyKeys(ctx context.Context, retention time.Duration) (int64, error) {
	return s.store.PurgeIdempotencyKeys(ctx, retention)
}
