package faults

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// The drills on a highly available Postgres (issue #22): the run's database lives on a Patroni
// topology of its own (cluster.PostgresHA) — a primary and two standbys, synchronous_mode_strict
// — which the replicas reach with a multi-host URL (target_session_attrs=read-write). Each
// drill is judged like the others, on whichever node is primary at the end: every order a
// client was told of must be there, and nothing no client can account for.

// haHeal bounds how long a drill waits for Patroni to elect, or for the topology to be whole
// again (the old primary back as a standby, streaming).
const haHeal = 60 * time.Second

// pgFailover SIGKILLs the primary's Postgres, every process of it at once, mid-sale. Patroni
// (primary_start_timeout 0) does not restart it in place: it fails over to the synchronous
// standby, and brings the old primary back as a standby (pg_rewind).
func pgFailover(ctx context.Context, d *drillEnv) error {
	ha := d.c.HA
	leader, sync, err := ha.Roles(ctx)
	if err != nil {
		return err
	}
	start := d.rec.Now()
	pid, err := ha.KillPostgres(ha.Node(leader))
	if err != nil {
		return err
	}
	d.event("SIGKILL postgres of %s, the primary (postmaster %d and its children); synchronous standby %s", leader, pid, sync)
	return d.awaitFailover(ctx, start, leader, sync)
}

// pgSwitchover asks Patroni for a planned switchover to the synchronous standby, mid-sale.
func pgSwitchover(ctx context.Context, d *drillEnv) error {
	ha := d.c.HA
	leader, sync, err := ha.Roles(ctx)
	if err != nil {
		return err
	}
	start := d.rec.Now()
	d.event("POST /switchover to %s's Patroni: leader %s, candidate %s", leader, leader, sync)
	if err := ha.Switchover(ctx, leader, sync); err != nil {
		return err
	}
	d.event("patroni: switchover done")
	return d.awaitFailover(ctx, start, leader, sync)
}

// awaitFailover waits until a node other than old leads (the fault window ends then), checks it
// is want, the synchronous standby of before, notes when Patroni named its synchronous standby,
// and waits for the topology to be whole again.
func (d *drillEnv) awaitFailover(ctx context.Context, start time.Duration, old, want string) error {
	ha := d.c.HA
	leader, err := ha.WaitPrimary(ctx, old, haHeal)
	if err != nil {
		return err
	}
	d.faultWindow(start)
	d.event("%s leads", leader)
	d.note("%s led %.2fs after the fault (Patroni)", leader, (d.rec.Now() - start).Seconds())
	if leader != want {
		d.fail("patroni promoted %s, not %s, the synchronous standby when the fault came", leader, want)
	}
	if _, err := ha.WaitLeader(ctx, old, haHeal); err != nil {
		return err
	}
	_, sync, _ := ha.Roles(ctx)
	d.event("patroni named %s synchronous standby of %s", sync, leader)
	return d.awaitWhole(ctx, old)
}

// awaitWhole waits until the leader streams to both standbys again, one synchronously, after
// node came back; a topology that does not heal is noted, not failed: the sale's verdict does
// not depend on it.
func (d *drillEnv) awaitWhole(ctx context.Context, node string) error {
	if err := d.c.HA.WaitHealthy(ctx, haHeal); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.note("the topology was not whole again within %v: %v", haHeal, err)
		return nil
	}
	d.event("%s back as a standby: the leader streams to both standbys", node)
	return nil
}

// pgSyncStandbyLost loses the synchronous standby's machine (its Patroni agent and its
// Postgres, SIGKILLed) mid-sale. Commits wait — strict synchronous mode acknowledges none that
// no standby has — until Patroni names the other standby synchronous. Then, to prove that what
// was acknowledged meanwhile is on that standby, the primary's Postgres is SIGKILLed too: the
// remaining standby is promoted, and the verdict is taken on it. The lost node comes back last.
func pgSyncStandbyLost(ctx context.Context, d *drillEnv) error {
	ha := d.c.HA
	leader, sync, err := ha.Roles(ctx)
	if err != nil {
		return err
	}
	lost := ha.Node(sync)
	start := d.rec.Now()
	ha.KillNode(lost)
	d.event("SIGKILL %s, the synchronous standby (patroni and postgres); primary %s", sync, leader)
	var next string
	deadline := time.Now().Add(haHeal)
	for {
		var l string
		if l, next, err = ha.Roles(ctx); err == nil && l == leader && next != "" && next != sync {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("patroni named no other synchronous standby within %v (leader %q, sync %q, %v)", haHeal, l, next, err)
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	d.faultWindow(start)
	d.event("patroni named %s synchronous: commits can be acknowledged again", next)
	d.note("patroni named %s synchronous standby %.2fs after %s was lost (its /sync key)", next, (d.rec.Now() - start).Seconds(), sync)

	if err := clock.Sleep(ctx, 2*time.Second); err != nil {
		return err
	}
	start = d.rec.Now()
	pid, err := ha.KillPostgres(ha.Node(leader))
	if err != nil {
		return err
	}
	d.event("SIGKILL postgres of %s, the primary (postmaster %d): %s, the standby that was made synchronous, must have every acknowledged order", leader, pid, next)
	promoted, err := ha.WaitPrimary(ctx, leader, haHeal)
	if err != nil {
		return err
	}
	d.faultWindow(start)
	d.event("%s leads", promoted)
	d.note("%s led %.2fs after the fault (Patroni)", promoted, (d.rec.Now() - start).Seconds())
	if promoted != next {
		d.fail("patroni promoted %s, not %s, the synchronous standby", promoted, next)
	}
	if err := ha.StartNode(lost); err != nil {
		return err
	}
	d.event("%s's patroni started again", sync)
	return d.awaitWhole(ctx, sync+" and "+leader)
}

// haReport is the check of every HA drill (and of redis-sentinel-failover): the window without selling in each fault, and
// Patroni's timing, as notes (and the worst window in the outcome, for the table).
func haReport(d *drillEnv, ops []*model.Op, _ availability) (failed, notes []string) {
	if d.c.HA != nil {
		notes = append(notes, "patroni "+d.c.HA.Timing.String()+", synchronous_mode_strict, primary_start_timeout 0")
	}
	if d.c.Sentinel != nil {
		notes = append(notes, "sentinel quorum 2 of 3, down-after-milliseconds 1000, failover-timeout 5000")
	}
	d.mu.Lock()
	faults := append([]window(nil), d.faults...)
	d.mu.Unlock()
	for _, w := range faults {
		gap, at, ok := noSaleWindow(ops, w)
		if !ok {
			failed = append(failed, fmt.Sprintf("no order sent after the fault at %.2fs was confirmed", w.start.Seconds()))
			continue
		}
		notes = append(notes, fmt.Sprintf("window without selling: %.2fs (from %.2fs; fault at %.2fs)", gap.Seconds(), at.Seconds(), w.start.Seconds()))
		d.noSale = max(d.noSale, gap)
	}
	return failed, notes
}

// noSaleWindow is the longest a buyer who ordered during the fault w could wait for the next
// confirmed order (201) among those sent after theirs: from each moment t in w — its start,
// or just after an order that was later confirmed was sent — to the first answer 201 to an
// attempt sent after t. An order sent before t that is confirmed after it may have committed
// before the fault and says nothing about selling; a switchover, which lets the old primary
// sell for a while after the fault began, has its window in its middle. It returns the window
// and where it starts.
func noSaleWindow(ops []*model.Op, w window) (gap, from time.Duration, ok bool) {
	type answer struct{ sent, confirmed time.Duration }
	var confirmed []answer
	for _, p := range ops {
		if p.In.Kind != model.KindOrder {
			continue
		}
		for _, at := range p.Attempts {
			if at.Status == http.StatusCreated && at.Start >= w.start {
				confirmed = append(confirmed, answer{at.Start, at.End})
			}
		}
	}
	if len(confirmed) == 0 {
		return 0, 0, false
	}
	slices.SortFunc(confirmed, func(a, b answer) int { return cmp.Compare(a.sent, b.sent) })
	// next[i] is the first confirmation among the attempts sent at confirmed[i].sent or later.
	next := make([]time.Duration, len(confirmed))
	for i := len(confirmed) - 1; i >= 0; i-- {
		next[i] = confirmed[i].confirmed
		if i+1 < len(confirmed) {
			next[i] = min(next[i], next[i+1])
		}
	}
	gap, from, ok = next[0]-w.start, w.start, true
	for i := 0; i+1 < len(confirmed) && confirmed[i].sent <= w.end; i++ {
		t := confirmed[i].sent
		if g := next[i+1] - t; g > gap {
			gap, from = g, t
		}
	}
	return gap, from, ok
}

// redisSentinelFailover SIGKILLs the Redis master mid-sale. The sentinels agree it is down
// after a second, and promote its replica, which Redis fed asynchronously: it may lack the
// master's last writes (a lock, a fencing counter's last numbers, a view's last move). The
// replicas ask the sentinels for the new master. The old master comes back empty, and the
// sentinels make it a replica of the new one.
func redisSentinelFailover(ctx context.Context, d *drillEnv) error {
	g := d.c.Sentinel
	old, err := g.MasterAddr(ctx)
	if err != nil {
		return err
	}
	master := g.Master
	if old == g.Replica.Addr() {
		master = g.Replica
	}
	start := d.rec.Now()
	master.Kill()
	d.event("SIGKILL the Redis master %s", old)
	deadline := time.Now().Add(haHeal)
	var promoted string
	for {
		if promoted, err = g.MasterAddr(ctx); err == nil && promoted != old {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sentinels promoted no replica within %v (master %q, %v)", haHeal, promoted, err)
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	d.faultWindow(start)
	d.event("the sentinels promoted %s", promoted)
	d.note("the sentinels promoted %s %.2fs after the master's SIGKILL", promoted, (d.rec.Now() - start).Seconds())
	if err := master.Start(ctx); err != nil {
		return err
	}
	d.event("%s started again, empty", old)
	return nil
}
