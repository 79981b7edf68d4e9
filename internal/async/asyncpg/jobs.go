package asyncpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// The queue's jobs are River's, in River's tables: made in the transactions of the statements
// that need them (Accept, AcceptCart) or after (Sweep, ScheduleExpiries), and run by the
// River client Start makes, whose workers call the queue's async.Worker and turn its answers
// into River's (jobResult).

// queueName is the River queue the order jobs run on.
const queueName = "stocksvc_orders"

// drainArgs asks for a product's line to be drained. Every group of accepted orders inserts
// one for each product in it: most find the line already being drained and end at once.
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

// expireArgs asks for the holds of one batch that expire at one moment to be ended.
type expireArgs struct {
	Orders []uuid.UUID `json:"orders"`
}

func (expireArgs) Kind() string                 { return "stocksvc_expire_holds" }
func (expireArgs) InsertOpts() river.InsertOpts { return river.InsertOpts{Queue: queueName} }

// holdSweepArgs is the periodic look for holds past their time.
type holdSweepArgs struct{}

func (holdSweepArgs) Kind() string { return "stocksvc_sweep_holds" }
func (holdSweepArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: queueName, MaxAttempts: 1}
}

// jobResult turns a Worker's answer into River's: a *async.SnoozeError snoozes the job.
func jobResult(err error) error {
	if snooze, ok := errors.AsType[*async.SnoozeError](err); ok {
		return river.JobSnooze(snooze.After)
	}
	return err
}

type drainWorker struct {
	river.WorkerDefaults[drainArgs]
	w async.Worker
}

func (d *drainWorker) Work(ctx context.Context, job *river.Job[drainArgs]) error {
	return jobResult(d.w.DrainLine(ctx, job.Args.ProductID, job.Attempt))
}

type cartWorker struct {
	river.WorkerDefaults[cartArgs]
	w async.Worker
}

func (c *cartWorker) Work(ctx context.Context, job *river.Job[cartArgs]) error {
	err := c.w.DecideCart(ctx, job.Args.OrderID)
	if errors.Is(err, stock.ErrOrderNotFound) {
		return river.JobCancel(fmt.Errorf("accepted order %s does not exist", job.Args.OrderID))
	}
	return jobResult(err)
}

type sweepWorker struct {
	river.WorkerDefaults[sweepArgs]
	w async.Worker
}

func (s *sweepWorker) Work(ctx context.Context, _ *river.Job[sweepArgs]) error {
	return jobResult(s.w.SweepLines(ctx))
}

type expireWorker struct {
	river.WorkerDefaults[expireArgs]
	w async.Worker
}

func (e *expireWorker) Work(ctx context.Context, job *river.Job[expireArgs]) error {
	return jobResult(e.w.ExpireHolds(ctx, job.Args.Orders))
}

type holdSweepWorker struct {
	river.WorkerDefaults[holdSweepArgs]
	w async.Worker
}

func (h *holdSweepWorker) Work(ctx context.Context, _ *river.Job[holdSweepArgs]) error {
	return jobResult(h.w.SweepHolds(ctx))
}

// Start implements async.Store: a River client with a worker for each kind of job, and the two
// periodic sweeps, started. Call it once.
func (s *Store) Start(ctx context.Context, w async.Worker, c async.RunConfig) error {
	workers := river.NewWorkers()
	for _, add := range []func() error{
		func() error { return river.AddWorkerSafely(workers, &drainWorker{w: w}) },
		func() error { return river.AddWorkerSafely(workers, &cartWorker{w: w}) },
		func() error { return river.AddWorkerSafely(workers, &sweepWorker{w: w}) },
		func() error { return river.AddWorkerSafely(workers, &expireWorker{w: w}) },
		func() error { return river.AddWorkerSafely(workers, &holdSweepWorker{w: w}) },
	} {
		if err := add(); err != nil {
			return fmt.Errorf("asyncpg: add worker: %w", err)
		}
	}
	logger := c.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	runner, err := river.NewClient(riverpgxv5.New(s.pool), &river.Config{
		Queues:  map[string]river.QueueConfig{queueName: {MaxWorkers: c.Workers}},
		Workers: workers,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(c.Sweep),
				func() (river.JobArgs, *river.InsertOpts) { return sweepArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
			river.NewPeriodicJob(river.PeriodicInterval(c.Sweep),
				func() (river.JobArgs, *river.InsertOpts) { return holdSweepArgs{}, nil }, &river.PeriodicJobOpts{RunOnStart: true}),
		},
		// A new job is announced (LISTEN/NOTIFY) and fetched within a few milliseconds; River's
		// defaults (100 ms between fetches, a poll a second) suit slower work than a sale.
		FetchCooldown:        5 * time.Millisecond,
		FetchPollInterval:    250 * time.Millisecond,
		JobTimeout:           c.JobTimeout,
		RescueStuckJobsAfter: c.JobTimeout + 30*time.Second,
		RetryPolicy:          retryPolicy{},
		Logger:               slog.New(&levelHandler{min: slog.LevelWarn, h: logger.Handler()}),
		AdvisoryLockPrefix:   riverLockPrefix,
	})
	if err != nil {
		return fmt.Errorf("asyncpg: river client: %w", err)
	}
	if err := runner.Start(ctx); err != nil {
		return storeError("start river", err)
	}
	s.runner = runner
	return nil
}

// Stop implements async.Store: River's soft stop, and, when ctx ends first, its hard stop
// (the jobs still running are cancelled, and rescued later).
func (s *Store) Stop(ctx context.Context) error {
	if s.runner == nil {
		return nil
	}
	err := s.runner.Stop(ctx)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err = s.runner.StopAndCancel(cctx)
	}
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return storeError("stop river", err)
	}
	return nil
}

// staleSQL finds what waits without being drained: the lines whose front is older than $1, and
// the carts older than $2 (a cart's own job retries it long before that).
const staleSQL = `
SELECT DISTINCT product_id, NULL::uuid FROM async_orders
 WHERE status = 'pending' AND product_id IS NOT NULL AND accepted_at < now() - $1::interval
UNION ALL
SELECT NULL, id FROM async_orders
 WHERE status = 'pending' AND product_id IS NULL AND accepted_at < now() - $2::interval
 LIMIT 1000`

// Sweep implements async.Store: one query, and one insert of the jobs.
func (s *Store) Sweep(ctx context.Context, line, cart time.Duration) (int, error) {
	rows, _ := s.pool.Query(ctx, staleSQL, line, cart)
	var params []river.InsertManyParams
	var product *int64
	var cartID *uuid.UUID
	_, err := pgx.ForEachRow(rows, []any{&product, &cartID}, func() error {
		if product != nil {
			params = append(params, river.InsertManyParams{Args: drainArgs{ProductID: *product}})
		} else if cartID != nil {
			params = append(params, river.InsertManyParams{Args: cartArgs{OrderID: *cartID}})
		}
		return nil
	})
	if err != nil {
		return 0, storeError("find stale lines", err)
	}
	if len(params) == 0 {
		return 0, nil
	}
	if _, err := s.inserts.InsertMany(ctx, params); err != nil {
		return 0, storeError("insert sweep jobs", err)
	}
	return len(params), nil
}

// ScheduleExpiries implements async.Store: a job per moment of expiry (a batch's holds of one
// product share it), due then.
func (s *Store) ScheduleExpiries(ctx context.Context, holds map[uuid.UUID]time.Time) error {
	byTime := map[time.Time][]uuid.UUID{}
	for id, at := range holds {
		byTime[at] = append(byTime[at], id)
	}
	params := make([]river.InsertManyParams, 0, len(byTime))
	for at, ids := range byTime {
		slices.SortFunc(ids, func(a, b uuid.UUID) int { return slices.Compare(a[:], b[:]) })
		params = append(params, river.InsertManyParams{Args: expireArgs{Orders: ids},
			InsertOpts: &river.InsertOpts{Queue: queueName, ScheduledAt: at}})
	}
	if _, err := s.inserts.InsertMany(ctx, params); err != nil {
		return storeError("insert hold expiry jobs", err)
	}
	return nil
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
