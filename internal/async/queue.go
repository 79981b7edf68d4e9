package async

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Config tunes a Queue. Zero fields take the defaults documented on each.
type Config struct {
	// Workers is how many jobs one replica runs at once. A job drains one product's line (or
	// decides one cart), and a line is drained by one replica at a time, so this bounds how
	// many products one replica drains at once; each holds a pool connection for its line's
	// lock while it drains. Default 4.
	Workers int
	// Round is how many orders of a line are decided per round: they join the product's
	// queue on this replica together and are decided in batches of up to the service's
	// MaxBatchOrders. Default 256.
	Round int
	// JobTimeout bounds one job. A drain that has worked for half of it hands its line on
	// (snoozes its job), so that a long line does not hold a worker past the timeout.
	// Default 30s.
	JobTimeout time.Duration
	// Sweep is how often the leader looks for a line whose orders wait without a job to
	// drain it (its job was lost with a replica, say), and how old the front of a line must
	// be to count as waiting; and how often it looks for holds past their time whose expiry
	// job did not end them. Default 1s.
	Sweep time.Duration
	// AcceptQueue is how many orders may wait on one replica for a group to accept them;
	// more are refused at once (429 busy). A group takes up to 256 and commits in
	// milliseconds, so a longer wait than a few groups' worth means Postgres is not keeping
	// up, and an answer at once beats one at the request timeout. Default 1024.
	AcceptQueue int
	// MaxAttempts is how many times deciding an order may fail with an unexpected error — not
	// busy and not a dependency down, which an order waits out however long they last — before
	// the order is rejected (reason internal), so that the orders behind it in its line are
	// decided. Attempts are counted in the order's row. Default 5.
	MaxAttempts int
	// Registerer, when set, registers the queue's metrics.
	Registerer prometheus.Registerer
	// OpenHolds, when set, counts the orders held now across every replica, for the gauge
	// stocksvc_holds_open, read with the queue's other gauges (the count is the stock
	// domain's: its store's). Without it the gauge is not exported.
	OpenHolds func(ctx context.Context) (int64, error)
	// Logger logs the job runner's own messages (warnings and above) and the queue's.
	// Default: none.
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Round <= 0 {
		c.Round = 256
	}
	if c.JobTimeout <= 0 {
		c.JobTimeout = 30 * time.Second
	}
	if c.Sweep <= 0 {
		c.Sweep = time.Second
	}
	if c.AcceptQueue <= 0 {
		c.AcceptQueue = 4 * maxAcceptGroup
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Queue accepts orders for later and decides them.
type Queue struct {
	// store keeps the orders and runs their jobs; records reads the keys' outcomes.
	store   Store
	records Records
	svc     *stock.Service
	cfg     Config
	metrics *metrics
	// acceptor gathers single-product orders into groups accepted in one transaction.
	acceptor acceptor
	// stopOrphans ends this replica's sweep of the holds a dead leader left (sweepOrphans),
	// and orphansDone is closed when it has returned; both are set by Start.
	stopOrphans context.CancelFunc
	orphansDone chan struct{}
	// stopping tells drains to hand their lines on at the end of the round: the runner's soft
	// stop waits for jobs without cancelling them, and a long line would outlast the grace.
	stopping atomic.Bool
}

// New returns a Queue that keeps its orders in store and decides them through svc, whose store
// is records. Start it to decide orders; a Queue that is not started still accepts them (another
// replica decides them).
func New(store Store, records Records, svc *stock.Service, cfg Config) *Queue {
	cfg = cfg.withDefaults()
	q := &Queue{store: store, records: records, svc: svc, cfg: cfg}
	q.acceptor.q, q.acceptor.limit = q, cfg.AcceptQueue
	var holds func() (float64, error)
	if cfg.OpenHolds != nil {
		holds = q.openHolds
	}
	q.metrics = newMetrics(cfg.Registerer, time.Now, q.pendingCount, holds, q.oldestPending)
	return q
}

// Start starts deciding orders: this replica's workers join the others in draining lines.
// Errors: stock.ErrUnavailable.
func (q *Queue) Start(ctx context.Context) error {
	if err := q.store.Start(ctx, jobs{q}, RunConfig{Workers: q.cfg.Workers, JobTimeout: q.cfg.JobTimeout,
		Sweep: q.cfg.Sweep, Logger: q.cfg.Logger}); err != nil {
		return fmt.Errorf("async: start: %w", err)
	}
	sweepCtx, cancel := context.WithCancel(ctx)
	q.stopOrphans, q.orphansDone = cancel, make(chan struct{})
	go func() {
		defer close(q.orphansDone)
		q.sweepOrphans(sweepCtx, q.cfg.Sweep)
	}()
	return nil
}

// Stop stops taking jobs and waits, until ctx ends, for the running ones to finish; jobs
// still running then are cancelled and run again elsewhere (their orders stay in line).
func (q *Queue) Stop(ctx context.Context) error {
	q.stopping.Store(true)
	if q.stopOrphans != nil {
		q.stopOrphans()
		<-q.orphansDone
	}
	if err := q.store.Stop(ctx); err != nil {
		return fmt.Errorf("async: stop: %w", err)
	}
	return nil
}

// Accept puts p in its line and returns the pending order; it is decided later. With a key
// that already has an outcome, nothing is accepted and that outcome is answered instead: the
// order accepted with the key (Replayed), the order it confirmed (Confirmed), or its refusal
// (a replayed *stock.SoldOutError). Errors: *stock.ProductNotFoundError,
// stock.ErrIdempotencyKeyReused, stock.ErrUnavailable (wrapped), the context's error.
func (q *Queue) Accept(ctx context.Context, p stock.Prepared) (Acceptance, error) {
	if len(p.Items) > 1 {
		return q.acceptCart(ctx, p)
	}
	req := &acceptRequest{id: uuid.Must(uuid.NewV7()), p: p, done: make(chan acceptResult, 1)}
	r := q.acceptor.accept(ctx, req)
	switch {
	case r.err != nil:
		return Acceptance{}, r.err
	case r.state == NoSuchProduct:
		return Acceptance{}, &stock.ProductNotFoundError{ProductID: p.Items[0].ProductID}
	case r.state == KeyTaken:
		return q.replay(ctx, p)
	}
	q.metrics.accepted.Inc()
	return Acceptance{Order: Order{ID: req.id, CustomerID: p.CustomerID, Items: p.Items, Status: StatusPending, AcceptedAt: r.at}}, nil
}

// acceptCart accepts an order of several products in a transaction of its own: carts are in no
// line, and are rare beside a hot product's crowd.
func (q *Queue) acceptCart(ctx context.Context, p stock.Prepared) (Acceptance, error) {
	id := uuid.Must(uuid.NewV7())
	at, err := q.store.AcceptCart(ctx, NewOrder{ID: id, Request: p})
	if errors.Is(err, ErrKeyTaken) {
		return q.replay(ctx, p)
	}
	if err != nil {
		return Acceptance{}, err
	}
	q.metrics.accepted.Inc()
	return Acceptance{Order: Order{ID: id, CustomerID: p.CustomerID, Items: p.Items, Status: StatusPending, AcceptedAt: at}}, nil
}

// replay answers an order whose key already has an outcome with that outcome, read once a
// synchronous standby has it (Records).
func (q *Queue) replay(ctx context.Context, p stock.Prepared) (Acceptance, error) {
	key := stock.RecordKey{CustomerID: p.CustomerID, Key: p.Key}
	records, err := q.records.Records(ctx, []stock.RecordKey{key})
	if err != nil {
		return Acceptance{}, err
	}
	rec, ok := records[key]
	if !ok {
		// Found taken, and purged since: a retry claims the key afresh.
		return Acceptance{}, fmt.Errorf("%w: the idempotency key's outcome has gone since it was found taken", stock.ErrUnavailable)
	}
	if string(rec.Fingerprint) != string(p.Fingerprint) {
		return Acceptance{}, stock.ErrIdempotencyKeyReused
	}
	switch {
	case rec.Accepted != nil:
		o, err := q.store.Order(ctx, *rec.Accepted)
		if err != nil {
			return Acceptance{}, err
		}
		return Acceptance{Order: o.Order, Replayed: true}, nil
	case rec.Order != nil:
		o, err := q.svc.Order(ctx, rec.Order.ID)
		if err != nil {
			return Acceptance{}, err
		}
		return Acceptance{Confirmed: &o, Replayed: true}, nil
	case rec.SoldOut != nil:
		refusal := *rec.SoldOut
		refusal.Replayed = true
		return Acceptance{}, &refusal
	}
	return Acceptance{}, fmt.Errorf("async: the record under the key is no client's outcome")
}

// Order returns the accepted order id as it stands. Errors: stock.ErrOrderNotFound (no order
// was accepted with id), stock.ErrUnavailable.
func (q *Queue) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	o, err := q.store.Order(ctx, id)
	return o.Order, err
}

// Place accepts req to be decided later, or refuses it now. It is validated as the purchase
// path validates an order, and an order the service already knows it would refuse — its product
// missing, not on sale, sold out, or its customer at the limit, with no query and no lock
// (stock.Service.RefusedNow) — is refused at once: there is nothing to wait for. Otherwise it is
// accepted (Accept), or answered with its key's outcome. Errors: *stock.ValidationError,
// *stock.ProductNotFoundError, *stock.SaleNotOpenError, *stock.SaleEndedError,
// *stock.CustomerLimitError, *stock.SoldOutError, and Accept's.
func (q *Queue) Place(ctx context.Context, req stock.OrderRequest) (Acceptance, error) {
	p, err := q.svc.Prepare(req)
	if err != nil {
		return Acceptance{}, err
	}
	if err := q.svc.RefusedNow(ctx, p); err != nil {
		return Acceptance{}, err
	}
	return q.Accept(ctx, p)
}

// Find returns the order id names, wherever it is: the purchase path's order when there is one
// (an order accepted for later is confirmed under its own id), else the order accepted for
// later. The lookup is here because this package is the one that knows both kinds: stock knows
// nothing of orders accepted for later, and a transport that tried both in turn would hold the
// rule that one id names one order. Errors: stock.ErrOrderNotFound (neither has id),
// stock.ErrUnavailable.
func (q *Queue) Find(ctx context.Context, id uuid.UUID) (Found, error) {
	o, err := q.svc.Order(ctx, id)
	if err == nil {
		return Found{Confirmed: &o}, nil
	}
	if !errors.Is(err, stock.ErrOrderNotFound) {
		return Found{}, err
	}
	// Not an order (yet): perhaps one accepted for later, pending or rejected.
	accepted, err := q.Order(ctx, id)
	if err != nil {
		return Found{}, err
	}
	return Found{Order: accepted}, nil
}

// PurgeRecords forgets the records of orders accepted for later — the client keys they
// claimed, their decision records — created more than retention ago on the store's clock,
// except those of orders still pending, and reports how many it deleted, also when it fails
// part way. The purchase path's records are stock.Service.PurgeIdempotencyKeys's. Errors:
// stock.ErrUnavailable, the context's error.
func (q *Queue) PurgeRecords(ctx context.Context, retention time.Duration) (int64, error) {
	return q.store.PurgeRecords(ctx, retention)
}

func (q *Queue) oldestPending() ([]LineAge, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return q.store.OldestPending(ctx, oldestLines)
}

func (q *Queue) pendingCount() (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := q.store.Pending(ctx)
	return float64(n), err
}

func (q *Queue) openHolds() (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := q.cfg.OpenHolds(ctx)
	return float64(n), err
}
