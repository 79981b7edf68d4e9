package async

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// The holds' delay queue: each batch's holds get a job due at their expires_at, made once the
// batch has committed, and a periodic sweep behind them ends any hold whose job was never made
// (a replica that died between its commit and the insert) or failed for good. Both call the
// Service, whose release is decided in Postgres by the hold's status: a job that runs twice, or
// races a confirm or a cancel, gives nothing back twice.

var _ stock.HoldScheduler = (*Queue)(nil)

// holdGrace is how long past its expires_at the sweep leaves a hold to its own job. The job
// runner (River, in asyncpg) makes a scheduled job available when its scheduler next runs —
// every 5 s — so a hold's own job ends it within about 5 s, durably; the sweep, every
// Config.Sweep (1 s), ends most holds within about a second of their time.
const holdGrace = 250 * time.Millisecond

// sweepBatch is the most holds one round of the sweep ends.
const sweepBatch = 500

// orphanGrace is how long past its expires_at a hold must be before every replica's own sweep
// (sweepOrphans) ends it. The runner's scheduler and its periodic jobs run on one replica, its
// leader, and a leader that dies without resigning is replaced only when its lease lapses (15 s
// in River, not settable by a client): for that long neither the holds' jobs nor the leader's
// sweep would end a hold, and its units would stay out of the sale. Three sweep periods is well
// past what a live leader leaves, so the replicas' sweeps find nothing while it lives.
const orphanGrace = 3 * time.Second

// sweepOrphans ends, every period until ctx ends, the holds orphanGrace past their time: the
// holds a dead leader left. Any replica may end any hold (the release is decided by the
// hold's row), so replicas that sweep at once give nothing back twice.
func (q *Queue) sweepOrphans(ctx context.Context, period time.Duration) {
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		n, err := q.svc.ExpireDue(ctx, nil, orphanGrace, sweepBatch)
		switch {
		case err != nil && ctx.Err() == nil:
			// Nothing else sees this loop's errors: the next period tries again.
			q.cfg.Logger.WarnContext(ctx, "async: sweep holds past their time", "error", err)
		case n > 0:
			q.metrics.orphansEnded.Add(float64(n))
		}
	}
}

func (j jobs) ExpireHolds(ctx context.Context, orders []uuid.UUID) error {
	if _, err := j.q.svc.ExpireDue(ctx, orders, 0, len(orders)); err != nil {
		return fmt.Errorf("async: expire holds: %w", err)
	}
	return nil
}

func (j jobs) SweepHolds(ctx context.Context) error {
	for {
		n, err := j.q.svc.ExpireDue(ctx, nil, holdGrace, sweepBatch)
		if err != nil {
			return fmt.Errorf("async: sweep holds: %w", err)
		}
		if n < sweepBatch {
			return nil
		}
	}
}

// ScheduleExpiries implements stock.HoldScheduler: a job per moment of expiry (a batch's holds
// of one product share it), due then.
func (q *Queue) ScheduleExpiries(ctx context.Context, holds map[uuid.UUID]time.Time) error {
	if err := q.store.ScheduleExpiries(ctx, holds); err != nil {
		return fmt.Errorf("async: schedule hold expiries: %w", err)
	}
	return nil
}
