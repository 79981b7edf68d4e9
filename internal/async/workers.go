package async

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
)

// drainArgs asks for a product's line to be drained. Every group of accepted orders inserts
// one for each product in it: most find the line already being drained and end at once (see
// drain).
type drainArgs struct {
	ProductID int64 `json:"product_id"`
}

func (drainArgs) Kind() string                 { return "stocksvc_drain_line" }
func (drainArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: queueName} }

// cartArgs asks for one accepted cart (an order of several products) to be decided.
type cartArgs struct {
	OrderID uuid.UUID `json:"order_id"`
}

func (cartArgs) Kind() string                 { return "stocksvc_decide_cart" }
func (cartArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: queueName} }

// sweepArgs is the leader's periodic look for orders waiting without a job.
type sweepArgs struct{}

func (sweepArgs) Kind() string { return "stocksvc_sweep_lines" }
func (sweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queueName, MaxAttempts: 1}
}

type drainWorker struct {
	river.WorkerDefaults[drainArgs]
	q *Queue
}

func (w *drainWorker) Work(ctx context.Context, job *river.Job[drainArgs]) error {
	return w.q.drain(ctx, job.Args.ProductID, job.Attempt)
}

type cartWorker struct {
	river.WorkerDefaults[cartArgs]
	q *Queue
}

func (w *cartWorker) Work(ctx context.Context, job *river.Job[cartArgs]) error {
	o, err := w.q.order(ctx, job.Args.OrderID)
	if errors.Is(err, stock.ErrOrderNotFound) {
		return river.JobCancel(fmt.Errorf("accepted order %s does not exist", job.Args.OrderID))
	}
	if err != nil {
		return err
	}
	if o.copied {
		return nil
	}
	// Decided but not copied (its worker stopped in between) is decided again: a replay of
	// the stored decision, which decide then copies.
	return w.q.decide(ctx, []stockpg.PendingOrder{{ID: o.ID, CustomerID: o.CustomerID, Items: o.Items}})
}

type sweepWorker struct {
	river.WorkerDefaults[sweepArgs]
	q *Queue
}

// Work inserts a drain for every line whose front has waited longer than a sweep, and a job
// for every cart that has waited far longer than its own job's retries would take. A drain
// inserted for a line that is being drained ends at once, so a sweep costs little when
// nothing is stuck.
func (w *sweepWorker) Work(ctx context.Context, _ *river.Job[sweepArgs]) error {
	products, carts, err := w.q.accepted.Stale(ctx, w.q.cfg.Sweep, w.q.cfg.JobTimeout+time.Minute)
	if err != nil {
		return err
	}
	var params []river.InsertManyParams
	for _, id := range products {
		params = append(params, river.InsertManyParams{Args: drainArgs{ProductID: id}})
	}
	for _, id := range carts {
		params = append(params, river.InsertManyParams{Args: cartArgs{OrderID: id}})
	}
	if len(params) == 0 {
		return nil
	}
	if _, err := w.q.river.InsertMany(ctx, params); err != nil {
		return fmt.Errorf("async: sweep: %w", err)
	}
	w.q.metrics.swept.Add(float64(len(params)))
	return nil
}

// The service's advisory locks, and how their keys are kept apart. A product id is a positive
// bigint (an identity column; the API refuses any other), all 64 bits of which must count, or
// two products that agree in the low 32 bits would share a lock: a drain of one would make
// the other's jobs end, believing its line in hand.
//   - A line's lock (a session lock, held while the line is drained; lineLockKey) has one
//     bigint key, the product id's bitwise complement: negative for every product. The other
//     bigint keys taken on the service's database are all non-negative: golang-migrate's lock
//     (a uint32 from the database's name), River's migration lock (migrations.riverLockID),
//     River's own (riverLockPrefix) and the audit's recount (stockpg's auditLockKey).
//   - A product's accept lock (a transaction lock, ordering the groups that accept its orders;
//     acceptLockSQL) has two int4 keys, the id's high and low halves, a space of its own:
//     Postgres never takes a lock with two int4 keys as one with a bigint key, nor the other way
//     round, and nothing else here takes two-key locks.
//
// The line lock serves order and economy, not safety: two drains of one line would decide the
// same orders, and the second would replay the first's records.

// riverLockPrefix is the first 32 bits of any advisory lock key River takes (River's
// AdvisoryLockPrefix): positive, so its keys are too.
const riverLockPrefix = 0x5707c5

// lineLockKey returns the bigint key of product's line lock: its bitwise complement, -1-product.
func lineLockKey(product int64) int64 { return ^product }

// errIsolate is what deciding a round of several orders returns when some failed with an
// unexpected error: the drain decides the front of its line alone next, so that the failure
// is counted against the order that fails, not against every order that shared its batch.
var errIsolate = errors.New("async: a round failed unexpectedly")

// drain decides a product's line, a round at a time, oldest orders first, while it holds the
// line's advisory lock. A drain that finds the lock taken ends at once: the holder will reach
// its order. That holds even when the holder is about to stop: a holder that finds the line
// empty lets go of the lock and only then looks once more, so an order committed before a
// drain found the lock taken (every order is committed before its job can run) is seen either
// by that last look or by whoever takes the lock next.
//
// A round that fails unexpectedly is followed by a round of the front order alone, and so is
// the start of a job's retry (attempt above 1): an order that keeps failing is then decided
// alone, its failures counted against it until it is rejected (see fail), while an order
// that only shared a failing batch is decided alone and the line goes on in full rounds.
func (q *Queue) drain(ctx context.Context, product int64, attempt int) error {
	held, err := q.lockLine(ctx, product)
	if err != nil || held == nil {
		return err
	}
	defer func() { held.Unlock() }()
	start := time.Now()
	limit := q.cfg.Round
	if attempt > 1 {
		limit = 1
	}
	for {
		// Read on the lock's own connection: each round renews its lease (see lockLine).
		line, err := q.accepted.Line(ctx, held.Conn, product, limit)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			held.Unlock()
			if line, err = q.accepted.Line(ctx, q.pool, product, 1); err != nil || len(line) == 0 {
				return err
			}
			if held, err = q.lockLine(ctx, product); err != nil || held == nil {
				return err
			}
			continue
		}
		switch err := q.decide(ctx, line); {
		case errors.Is(err, errIsolate):
			limit = 1
		case err != nil:
			return err
		default:
			limit = q.cfg.Round
		}
		if time.Since(start) > q.cfg.JobTimeout/2 || q.stopping.Load() {
			// Hand the line on: the job comes back at once, on whichever replica fetches it.
			return river.JobSnooze(0)
		}
	}
}

// decide decides orders (one line's round, or one cart) and records the decisions. Orders left
// undecided stay pending: busy ones (the lock could not be had in time) make the job snooze
// for the time the service said, and those whose dependency is down fail it, to be retried,
// however long that lasts. An unexpected error (anything else: a bug, a refusal nobody
// foresaw) is counted against the order when it was decided alone (fail), and otherwise
// returned as errIsolate.
func (q *Queue) decide(ctx context.Context, orders []stockpg.PendingOrder) error {
	accepted := make([]stock.Accepted, len(orders))
	for i, o := range orders {
		accepted[i] = stock.Accepted{ID: o.ID, CustomerID: o.CustomerID, Items: o.Items}
	}
	decisions := q.svc.DecideAccepted(ctx, accepted)
	rejects := map[uuid.UUID]string{}
	var busy *stock.BusyError
	var failed, unexpected error
	for i, d := range decisions {
		switch {
		case d.Err == nil, errors.Is(d.Err, stock.ErrSoldOut), errors.Is(d.Err, stock.ErrGivenUp):
			// Decided: its record is copied below (a given-up order's was copied when stored).
		case errors.Is(d.Err, stock.ErrProductNotFound):
			rejects[orders[i].ID] = string(ReasonProductNotFound)
		case errors.Is(d.Err, stock.ErrInvalid):
			rejects[orders[i].ID] = string(ReasonInvalid)
		case errors.Is(d.Err, stock.ErrSaleNotOpen):
			rejects[orders[i].ID] = string(ReasonSaleNotOpen)
		case errors.Is(d.Err, stock.ErrSaleEnded):
			rejects[orders[i].ID] = string(ReasonSaleEnded)
		case errors.Is(d.Err, stock.ErrCustomerLimit):
			rejects[orders[i].ID] = string(ReasonCustomerLimit)
		case errors.Is(d.Err, stock.ErrHoldLimit):
			rejects[orders[i].ID] = string(ReasonHoldLimit)
		case errors.As(d.Err, &busy), errors.Is(d.Err, stock.ErrBusy), errors.Is(d.Err, stock.ErrLockLost):
			if busy == nil {
				busy = &stock.BusyError{RetryAfter: 100 * time.Millisecond}
			}
		case errors.Is(d.Err, stock.ErrUnavailable), errors.Is(d.Err, context.Canceled), errors.Is(d.Err, context.DeadlineExceeded):
			failed = cmpErr(failed, d.Err)
		default:
			unexpected = cmpErr(unexpected, d.Err)
		}
	}
	done, err := q.accepted.Record(ctx, orders, decisions, rejects)
	for _, d := range done {
		q.metrics.decided(d)
	}
	switch {
	case err != nil:
		return err
	case unexpected != nil && len(orders) > 1:
		q.metrics.retried("unexpected")
		return fmt.Errorf("%w: %w", errIsolate, unexpected)
	case unexpected != nil:
		return q.fail(ctx, orders[0], unexpected)
	case failed != nil:
		q.metrics.retried("error")
		return fmt.Errorf("async: orders left pending: %w", failed)
	case busy != nil:
		q.metrics.retried("busy")
		return river.JobSnooze(min(busy.RetryAfter, 2*time.Second))
	}
	return nil
}

// fail counts an unexpected failure to decide o, and rejects o (reason internal) once it has
// failed MaxAttempts times: nil then, so that the line goes on. Until then it returns the
// failure, and the job is retried. The count is in o's row, so it survives the job, which
// River gives up after its own attempts (the sweep then makes another), and the replica. The
// rejection is stored as o's decision record (Accepted.Fail), so that a drain deciding o
// meanwhile — this replica paused, its line passed on — cannot sell it too.
func (q *Queue) fail(ctx context.Context, o stockpg.PendingOrder, cause error) error {
	f, err := q.accepted.Fail(ctx, o, q.cfg.MaxAttempts, cause.Error())
	switch {
	case err != nil:
		return err
	case f.Status == "":
		// No longer pending, or decided after all (a record is there): the next round copies
		// the decision.
		return nil
	case f.Status == StatusRejected:
		q.metrics.decided(stockpg.Decided{Status: StatusRejected, Waited: f.Waited})
		q.metrics.failed.Inc()
		q.cfg.Logger.Warn("async order rejected after failed attempts",
			slog.String("order_id", o.ID.String()), slog.Int("attempts", f.Attempts), slog.Any("error", cause))
		return nil
	}
	q.metrics.retried("unexpected")
	return fmt.Errorf("async: order %s left pending after %d of %d attempts: %w", o.ID, f.Attempts, q.cfg.MaxAttempts, cause)
}

// lineLease is how long a drain may go without reading its line before Postgres ends its
// session and the line passes on: the longest a round can take (a lock wait and a purchase,
// well inside half the job timeout) with room to spare.
func (q *Queue) lineLease() time.Duration { return q.cfg.JobTimeout / 2 }

func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}

// lockLine takes the line's lock if it is free; nil, nil when another drain holds it. Its
// session gets a lease of lineLease: a holder that stops reading its line loses it (see
// stockpg's lockLineSQL).
func (q *Queue) lockLine(ctx context.Context, product int64) (*stockpg.LineLock, error) {
	return q.accepted.LockLine(ctx, lineLockKey(product), q.lineLease())
}

// LineLockKeys returns how pg_locks shows product's line lock (an advisory lock with one bigint
// key): classid is the key's high 32 bits, objid its low 32 bits, and objsubid 1. Operators and
// the load harness use it to find which session — which replica — drains a line.
func LineLockKeys(product int64) (classID, objID uint32, objSubID int16) {
	k := uint64(lineLockKey(product))
	return uint32(k >> 32), uint32(k), 1
}
