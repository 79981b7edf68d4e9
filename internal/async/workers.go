package async

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// jobs is the queue's Worker: what the jobs its store runs do.
type jobs struct{ q *Queue }

var _ Worker = jobs{}

func (j jobs) DrainLine(ctx context.Context, product int64, attempt int) error {
	return j.q.drain(ctx, product, attempt)
}

// DecideCart decides a cart unless its decision is already copied into it. Decided but not
// copied (its worker stopped in between) is decided again: a replay of the stored decision,
// which decide then copies.
func (j jobs) DecideCart(ctx context.Context, id uuid.UUID) error {
	o, err := j.q.store.Order(ctx, id)
	if err != nil {
		return err
	}
	if o.Copied {
		return nil
	}
	return j.q.decide(ctx, []stock.Accepted{{ID: o.ID, CustomerID: o.CustomerID, Items: o.Items}})
}

// SweepLines makes a drain for every line whose front has waited longer than a sweep, and a job
// for every cart that has waited far longer than its own job's retries would take. A drain made
// for a line that is being drained ends at once, so a sweep costs little when nothing is stuck.
func (j jobs) SweepLines(ctx context.Context) error {
	n, err := j.q.store.Sweep(ctx, j.q.cfg.Sweep, j.q.cfg.JobTimeout+time.Minute)
	if err != nil {
		return fmt.Errorf("async: sweep: %w", err)
	}
	j.q.metrics.swept.Add(float64(n))
	return nil
}

// errIsolate is what deciding a round of several orders returns when some failed with an
// unexpected error: the drain decides the front of its line alone next, so that the failure
// is counted against the order that fails, not against every order that shared its batch.
var errIsolate = errors.New("async: a round failed unexpectedly")

// drain decides a product's line, a round at a time, oldest orders first, while it has the
// line's claim. A drain that finds the line claimed ends at once: the holder will reach its
// order. That holds even when the holder is about to stop: a holder that finds the line empty
// lets go of it and only then looks once more, so an order committed before a drain found the
// line claimed (every order is committed before its job can run) is seen either by that last
// look or by whoever claims the line next.
//
// A round that fails unexpectedly is followed by a round of the front order alone, and so is
// the start of a job's retry (attempt above 1): an order that keeps failing is then decided
// alone, its failures counted against it until it is rejected (see fail), while an order
// that only shared a failing batch is decided alone and the line goes on in full rounds.
func (q *Queue) drain(ctx context.Context, product int64, attempt int) error {
	held, err := q.store.ClaimLine(ctx, product, q.lineLease())
	if err != nil || held == nil {
		return err
	}
	defer func() { held.Release() }()
	start := time.Now()
	limit := q.cfg.Round
	if attempt > 1 {
		limit = 1
	}
	for {
		// Each read renews the claim's lease (see lineLease).
		line, err := held.Front(ctx, limit)
		if err != nil {
			return err
		}
		if len(line) == 0 {
			held.Release()
			if waiting, err := q.store.Waiting(ctx, product); err != nil || !waiting {
				return err
			}
			if held, err = q.store.ClaimLine(ctx, product, q.lineLease()); err != nil || held == nil {
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
			return &SnoozeError{}
		}
	}
}

// decide decides orders (one line's round, or one cart) and records the decisions. Orders left
// undecided stay pending: busy ones (the lock could not be had in time) make the job snooze
// for the time the service said, and those whose dependency is down fail it, to be retried,
// however long that lasts. An unexpected error (anything else: a bug, a refusal nobody
// foresaw) is counted against the order when it was decided alone (fail), and otherwise
// returned as errIsolate.
func (q *Queue) decide(ctx context.Context, orders []stock.Accepted) error {
	decisions := q.svc.DecideAccepted(ctx, orders)
	rejects := map[uuid.UUID]Reason{}
	var busy *stock.BusyError
	var failed, unexpected error
	for i, d := range decisions {
		switch {
		case d.Err == nil, errors.Is(d.Err, stock.ErrSoldOut), errors.Is(d.Err, stock.ErrGivenUp):
			// Decided: its record is copied below (a given-up order's was copied when stored).
		case errors.Is(d.Err, stock.ErrProductNotFound):
			rejects[orders[i].ID] = ReasonProductNotFound
		case errors.Is(d.Err, stock.ErrInvalid):
			rejects[orders[i].ID] = ReasonInvalid
		case errors.Is(d.Err, stock.ErrSaleNotOpen):
			rejects[orders[i].ID] = ReasonSaleNotOpen
		case errors.Is(d.Err, stock.ErrSaleEnded):
			rejects[orders[i].ID] = ReasonSaleEnded
		case errors.Is(d.Err, stock.ErrCustomerLimit):
			rejects[orders[i].ID] = ReasonCustomerLimit
		case errors.Is(d.Err, stock.ErrHoldLimit):
			rejects[orders[i].ID] = ReasonHoldLimit
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
	done, err := q.store.Record(ctx, orders, decisions, rejects)
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
		return &SnoozeError{After: min(busy.RetryAfter, 2*time.Second)}
	}
	return nil
}

// fail counts an unexpected failure to decide o, and rejects o (reason internal) once it has
// failed MaxAttempts times: nil then, so that the line goes on. Until then it returns the
// failure, and the job is retried. The count is in o's row, so it survives the job, which the
// runner gives up after its own attempts (the sweep then makes another), and the replica. The
// rejection is stored as o's decision record (Store.Fail), so that a drain deciding o
// meanwhile — this replica paused, its line passed on — cannot sell it too.
func (q *Queue) fail(ctx context.Context, o stock.Accepted, cause error) error {
	f, err := q.store.Fail(ctx, o, q.cfg.MaxAttempts, cause.Error())
	switch {
	case err != nil:
		return err
	case f.Status == "":
		// No longer pending, or decided after all (a record is there): the next round copies
		// the decision.
		return nil
	case f.Status == StatusRejected:
		q.metrics.decided(Decided{Status: StatusRejected, Waited: f.Waited})
		q.metrics.failed.Inc()
		q.cfg.Logger.Warn("async order rejected after failed attempts",
			slog.String("order_id", o.ID.String()), slog.Int("attempts", f.Attempts), slog.Any("error", cause))
		return nil
	}
	q.metrics.retried("unexpected")
	return fmt.Errorf("async: order %s left pending after %d of %d attempts: %w", o.ID, f.Attempts, q.cfg.MaxAttempts, cause)
}

// lineLease is how long a drain may go without reading its line before its claim lapses and the
// line passes on: the longest a round can take (a lock wait and a purchase, well inside half
// the job timeout) with room to spare.
func (q *Queue) lineLease() time.Duration { return q.cfg.JobTimeout / 2 }

func cmpErr(first, next error) error {
	if first != nil {
		return first
	}
	return next
}
