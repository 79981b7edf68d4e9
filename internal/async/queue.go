package async

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
)

// queueName is the River queue the order jobs run on.
const queueName = "stocksvc_orders"

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
	// Logger logs River's own messages (warnings and above) and the queue's. Default: none.
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
	pool *pgxpool.Pool
	// accepted is the store of orders accepted for later (all of this package's SQL).
	accepted *stockpg.Accepted
	svc      *stock.Service
	cfg      Config
	river    *river.Client[pgx.Tx]
	metrics  *metrics
	// acceptor gathers single-product orders into groups accepted in one transaction.
	acceptor acceptor
	// stopOrphans ends this replica's sweep of the holds a dead leader left (sweepOrphans),
	// and orphansDone is closed when it has returned; both are set by Start.
	stopOrphans context.CancelFunc
	orphansDone chan struct{}
	// stopping tells drains to hand their lines on at the end of the round: River's soft stop
	// waits for jobs without cancelling them, and a long line would outlast the grace.
	stopping atomic.Bool
}

// New returns a Queue over pool, whose database has the service's and River's migrations
// applied; it decides orders through svc. Start it to decide orders; a Queue that is not
// started still accepts them (another replica decides them).
func New(pool *pgxpool.Pool, svc *stock.Service, cfg Config) (*Queue, error) {
	cfg = cfg.withDefaults()
	q := &Queue{pool: pool, accepted: stockpg.NewAccepted(pool, stockpg.Reasons{SoldOut: string(ReasonSoldOut), Internal: string(ReasonInternal)}), svc: svc, cfg: cfg}
	q.acceptor.q, q.acceptor.limit = q, cfg.AcceptQueue
	q.metrics = newMetrics(cfg.Registerer, time.Now, q.pendingCount, q.openHolds, q.oldestPending)
	workers := river.NewWorkers()
	if err := river.AddWorkerSafely(workers, &drainWorker{q: q}); err != nil {
		return nil, fmt.Errorf("async: add drain worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &cartWorker{q: q}); err != nil {
		return nil, fmt.Errorf("async: add cart worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &sweepWorker{q: q}); err != nil {
		return nil, fmt.Errorf("async: add sweep worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &expireWorker{q: q}); err != nil {
		return nil, fmt.Errorf("async: add hold expiry worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &holdSweepWorker{q: q}); err != nil {
		return nil, fmt.Errorf("async: add hold sweep worker: %w", err)
	}
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues:  map[string]river.QueueConfig{queueName: {MaxWorkers: cfg.Workers}},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(cfg.Sweep),
				func() (river.JobArgs, *river.InsertOpts) { return sweepArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(cfg.Sweep),
				func() (river.JobArgs, *river.InsertOpts) { return holdSweepArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
		},
		// A new job is announced (LISTEN/NOTIFY) and fetched within a few milliseconds; River's
		// defaults (100 ms between fetches, a poll a second) suit slower work than a sale.
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    250 * time.Millisecond,
		JobTimeout:           cfg.JobTimeout,
		RescueStuckJobsAfter: cfg.JobTimeout + 30*time.Second,
		RetryPolicy:          retryPolicy{},
		Logger:               slog.New(&levelHandler{min: slog.LevelWarn, h: cfg.Logger.Handler()}),
		// River takes advisory locks only for a kind of unique job this service does not use;
		// should it ever, its keys then begin with this prefix, positive, clear of the line
		// locks' negative keys (see lineLockKey).
		AdvisoryLockPrefix: riverLockPrefix,
	})
	if err != nil {
		return nil, fmt.Errorf("async: river client: %w", err)
	}
	q.river = client
	return q, nil
}

// Start starts deciding orders: this replica's workers join the others in draining lines.
func (q *Queue) Start(ctx context.Context) error {
	if err := q.river.Start(ctx); err != nil {
		return fmt.Errorf("async: start river: %w", err)
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
	err := q.river.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = q.river.StopAndCancel(cctx)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("async: stop river: %w", err)
	}
	return nil
}

// errTaken leaves a cart's acceptance when its key already has an outcome: nothing is written.
var errTaken = errors.New("async: the idempotency key already has an outcome")

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
	case r.state == stockpg.AcceptMissing:
		return Acceptance{}, &stock.ProductNotFoundError{ProductID: p.Items[0].ProductID}
	case r.state == stockpg.AcceptTaken:
		return q.replay(ctx, p)
	}
	q.metrics.accepted.Inc()
	return Acceptance{Order: Order{ID: req.id, CustomerID: p.CustomerID, Items: p.Items, Status: StatusPending, AcceptedAt: r.at}}, nil
}

// acceptCart accepts an order of several products in a transaction of its own: carts are in no
// line, and are rare beside a hot product's crowd.
func (q *Queue) acceptCart(ctx context.Context, p stock.Prepared) (Acceptance, error) {
	id := uuid.Must(uuid.NewV7())
	var acc Acceptance
	err := q.accepted.Tx(ctx, func(tx pgx.Tx) error {
		at, taken, err := q.accepted.AcceptCart(ctx, tx, id, p)
		if err != nil {
			return err
		}
		if taken {
			return errTaken
		}
		if _, err := q.river.InsertTx(ctx, tx, cartArgs{OrderID: id}, nil); err != nil {
			return fmt.Errorf("%w: enqueue order: %w", stock.ErrUnavailable, err)
		}
		acc = Acceptance{Order: Order{ID: id, CustomerID: p.CustomerID, Items: p.Items, Status: StatusPending, AcceptedAt: at}}
		return nil
	})
	if errors.Is(err, errTaken) {
		return q.replay(ctx, p)
	}
	if err != nil {
		return Acceptance{}, err
	}
	q.metrics.accepted.Inc()
	return acc, nil
}

// replay answers an order whose key already has an outcome with that outcome, read once a
// synchronous standby has it (KeyRecord).
func (q *Queue) replay(ctx context.Context, p stock.Prepared) (Acceptance, error) {
	rec, err := q.accepted.KeyRecord(ctx, stock.RecordKey{CustomerID: p.CustomerID, Key: p.Key})
	if err != nil {
		return Acceptance{}, err
	}
	if string(rec.Fingerprint) != string(p.Fingerprint) {
		return Acceptance{}, stock.ErrIdempotencyKeyReused
	}
	switch {
	case rec.AcceptedID != nil:
		o, err := q.order(ctx, *rec.AcceptedID)
		if err != nil {
			return Acceptance{}, err
		}
		return Acceptance{Order: o, Replayed: true}, nil
	case rec.OrderID != nil:
		o, err := q.svc.Order(ctx, *rec.OrderID)
		if err != nil {
			return Acceptance{}, err
		}
		return Acceptance{Confirmed: &o, Replayed: true}, nil
	default:
		return Acceptance{}, &stock.SoldOutError{ProductID: deref(rec.ProductID), Requested: deref(rec.Requested), Available: deref(rec.Available), Replayed: true}
	}
}

// Order returns the accepted order id as it stands. Errors: stock.ErrOrderNotFound (no order
// was accepted with id), stock.ErrUnavailable.
func (q *Queue) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	return q.order(ctx, id)
}

// order reads the accepted order id from its store.
func (q *Queue) order(ctx context.Context, id uuid.UUID) (Order, error) {
	o, err := q.accepted.Order(ctx, id)
	if err != nil {
		return Order{}, err
	}
	out := Order{ID: o.ID, CustomerID: o.CustomerID, Items: o.Items, Status: o.Status,
		AcceptedAt: o.AcceptedAt, DecidedAt: o.DecidedAt, copied: o.Copied}
	if o.Reason != "" {
		out.Rejection = &Rejection{Reason: Reason(o.Reason), ProductID: o.ProductID, Requested: o.Requested, Available: o.Available}
	}
	return out, nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
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
	accepted, err := q.order(ctx, id)
	if err != nil {
		return Found{}, err
	}
	return Found{Order: accepted}, nil
}

func (q *Queue) oldestPending() ([]stockpg.LineAge, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	return q.accepted.OldestPending(ctx, oldestLines)
}

func (q *Queue) pendingCount() (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := q.accepted.PendingCount(ctx)
	return float64(n), err
}

func (q *Queue) openHolds() (float64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	n, err := stockpg.OpenHolds(ctx, q.pool)
	return float64(n), err
}

// retryPolicy retries a job that failed (Postgres or Redis unreachable, a lock lost) soon: a
// sale lasts seconds, and River's default (attempt⁴ seconds) would leave a line waiting for
// minutes after the dependency came back. 100 ms doubling to at most 5 s, with jitter.
type retryPolicy struct{}

func (retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	d := 100 * time.Millisecond << min(max(job.Attempt-1, 0), 6)
	d = min(d, 5*time.Second)
	return time.Now().Add(d/2 + rand.N(d/2+1))
}

// levelHandler passes on only records at or above min: River's info logs (every leader
// election, every queue start) are noise in a service's log.
type levelHandler struct {
	min slog.Level
	h   slog.Handler
}

func (l *levelHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= l.min && l.h.Enabled(ctx, level)
}
func (l *levelHandler) Handle(ctx context.Context, r slog.Record) error { return l.h.Handle(ctx, r) }
func (l *levelHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return &levelHandler{min: l.min, h: l.h.WithAttrs(a)}
}
func (l *levelHandler) WithGroup(name string) slog.Handler {
	return &levelHandler{min: l.min, h: l.h.WithGroup(name)}
}
