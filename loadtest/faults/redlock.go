package faults

import (
	"context"
	"fmt"
	"time"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// The Redlock drill: the run's Redlock nodes are cluster.Config.Redlock's, started by the
// cluster with everything else.

// restartRedlockNode kills one of the run's Redlock nodes in the middle of purchases, keeps
// it down for a second (the others, a quorum, go on selling), and starts it again empty, as a
// node without persistence comes back from a crash: no locks and no fencing counters, which it
// seeds again from its clock. Locks held elsewhere must stay exclusive and their fencing
// tokens must keep increasing, or Postgres refuses writes (noFenceCatches).
func restartRedlockNode(ctx context.Context, d *drillEnv) error {
	i := d.rng.IntN(len(d.c.Redlock))
	node := d.c.Redlock[i]
	d.primeVictim(ctx, d.c.Replicas[d.victim])
	d.event("SIGKILL redlock node %d of %d (%s)", i+1, len(d.c.Redlock), node.Addr())
	node.Kill()
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	d.event("redlock node %d started again, empty", i+1)
	d.note("redlock node %d of %d restarted empty mid-sale", i+1, len(d.c.Redlock))
	return nil
}

// noFenceCatches: the fence refused no write. With no lock lost (a minority of nodes down
// leaves every holder its quorum), a refused write would mean a holder's fencing token was
// below one issued earlier: Redlock's tokens went backwards.
func noFenceCatches(d *drillEnv, _ []*model.Op, _ availability) (failed, notes []string) {
	n := d.catches["fence"]
	if n > 0 {
		failed = append(failed, fmt.Sprintf("the fence refused %.0f writes: a fencing token went backwards", n))
	}
	return failed, []string{fmt.Sprintf("fence catches: %.0f", n)}
}
