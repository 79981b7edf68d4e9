package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// Holds (issue #21) in the drills: the holds-expiry scenario adds a fourth product sold with a
// short hold, whose buyers pay (confirm), cancel, or walk away; the fault — a replica killed
// and Redis paused — comes while holds expire. Every release is read back from Postgres and
// checked by the model with the rest (model/holds.go, verdict.HoldOps), and the SQL verdict
// checks the holds' books (verdict.Holds).

// The holds product of the holds-expiry drill.
const (
	holdFor   = 3 * time.Second // its hold_for: several expiries fall into the fault
	holdStock = 20              // few units, so that releases revive it while buyers wait
	// holdsGrace is how long after its expires_at a hold may stay held before the run calls
	// the expiry broken: the River job at expires_at and the sweep behind it.
	holdsGrace = 30 * time.Second
)

// createHolds creates the holds product.
func (d *drillEnv) createHolds(ctx context.Context) (int64, error) {
	return d.client.CreateSale(ctx, "HOLDS-"+rand.Text()[:6], holdStock, client.SaleRules{HoldFor: int64(holdFor / time.Second)})
}

// holdsGateSize is the most operations of the holds product's buyers (orders, confirms,
// cancels) open at once. While Redis is paused none of them is answered, and without a cap
// two dozen pile up and are answered in the same instant when it resumes, with the expiries
// the pause held back: orders of one or two units, exact sold-out answers and releases, all
// concurrent, among which Porcupine's search for an order that explains the stock could take
// longer than five minutes (one run in three, on the product of 20 units). A few buyers at
// once keep every race the drill is for — confirm against expiry, two cancels at once, an
// order against a release — and a search that ends in milliseconds.
const holdsGateSize = 6

// holdsGate admits the holds product's operations, at most holdsGateSize open at once; what
// finds it full is not sent (the buyer walks away) and is counted.
type holdsGate struct {
	open, skipped atomic.Int64
}

// enter admits one operation, or returns false when holdsGateSize are open; leave ends it.
func (g *holdsGate) enter() bool {
	if g.open.Add(1) > holdsGateSize {
		g.open.Add(-1)
		g.skipped.Add(1)
		return false
	}
	return true
}

func (g *holdsGate) leave() { g.open.Add(-1) }

// holdBuyer orders one or two units of the holds product and, when the order is held, pays
// for it (30%: confirms, after up to hold_for and a second, so that some are too late; a tenth
// of them confirm twice), cancels it (15%, a fifth of them twice, the second beside the
// first), or walks away (55%, or when the gate is full): the expiry must give those units
// back.
func (d *drillEnv) holdBuyer(ctx context.Context) {
	if !d.holdsOpen.enter() {
		return
	}
	order := d.client.Order(ctx, d.holds, int64(1+d.rng.IntN(2)))
	d.holdsOpen.leave()
	if order.Out.Outcome != model.Held || order.OrderID == "" {
		return
	}
	roll := d.rng.Float()
	if roll >= 0.45 {
		return
	}
	if clock.Sleep(ctx, d.rng.Between(0, holdFor+time.Second)) != nil {
		return
	}
	kind, twice := model.KindConfirm, d.rng.IntN(10) == 0
	if roll >= 0.30 {
		kind, twice = model.KindCancel, d.rng.IntN(5) == 0
	}
	settle := func() {
		if !d.holdsOpen.enter() {
			return
		}
		defer d.holdsOpen.leave()
		if _, bad := d.client.Settle(ctx, order, kind); bad != "" {
			d.fail("%s", bad)
		}
	}
	if twice && kind == model.KindCancel {
		d.client.Go(settle) // two cancels at once, through the balancer: units back once
	}
	settle()
	if twice && kind == model.KindConfirm {
		settle()
	}
}

// holdsExpiry kills the victim and pauses Redis while holds expire: the River jobs the victim
// had taken die with it, and the replicas that stay cannot reach Redis for twice the lock TTL.
// Every hold must still end exactly once, its units back (or sold) once.
func holdsExpiry(ctx context.Context, d *drillEnv) error {
	r := d.c.Replicas[d.victim]
	d.primeVictim(ctx, r)
	d.event("SIGKILL %s while holds expire", r.Name)
	r.Proc.Signal(syscall.SIGKILL)
	<-r.Proc.Done()
	pause := 2 * d.plan.lockTTL
	d.event("SIGSTOP redis for %v (lock TTL %v)", pause, d.plan.lockTTL)
	if err := d.c.Redis.Pause(); err != nil {
		return err
	}
	err := clock.Sleep(ctx, pause)
	if rerr := d.c.Redis.Resume(); rerr != nil && err == nil {
		err = rerr
	}
	d.event("SIGCONT redis")
	if err != nil {
		return err
	}
	return d.restart(ctx, r)
}

// settleHolds waits, with the replicas running, until no order is held any more, or until
// the latest hold's expires_at plus holdsGrace has passed by Postgres's clock; the SQL verdict
// then finds any hold the expiry left behind.
func (d *drillEnv) settleHolds(ctx context.Context, pool *pgxpool.Pool) error {
	began := d.rec.Now()
	for {
		var held int64
		var left float64 // seconds until the latest expiry's grace runs out
		err := pool.QueryRow(ctx, `SELECT count(*), coalesce(extract(epoch FROM max(expires_at) - now()), 0)::float8
			FROM orders WHERE status = 'held'`).Scan(&held, &left)
		if err != nil {
			return fmt.Errorf("count holds: %w", err)
		}
		wait := time.Duration(left*float64(time.Second)) + holdsGrace
		if held == 0 || wait <= 0 {
			d.event("holds settled in %.1fs: %d still held", (d.rec.Now() - began).Seconds(), held)
			return nil
		}
		if err := clock.Sleep(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// holdsChecked: holds must have come due while the fault was in force, or the drill proved
// nothing about expiry under it. What counts is a hold's expires_at passing (KindLapse, by
// Postgres's clock) inside a fault window: its release may come only after the fault, since
// units go back only once the views can be raised, which needs Redis.
func holdsChecked(d *drillEnv, ops []*model.Op, _ availability) (failed, notes []string) {
	orders, counts := map[model.Outcome]int{}, map[model.Outcome]int{}
	var duringFault, dueDuringFault, expiries int
	inFault := func(p *model.Op) bool {
		for _, w := range d.faults {
			if p.Return >= w.start && p.Invoke <= w.end {
				return true
			}
		}
		return false
	}
	for _, p := range ops {
		switch p.In.Kind {
		case model.KindOrder:
			if p.In.Product == d.holds {
				orders[p.Out.Outcome]++
			}
		case model.KindConfirm, model.KindCancel:
			counts[p.Out.Outcome]++
		case model.KindExpire:
			expiries++
			if inFault(p) {
				duringFault++
			}
		case model.KindLapse:
			if inFault(p) {
				dueDuringFault++
			}
		}
	}
	notes = append(notes, fmt.Sprintf("holds: %d held, %d sold out; confirms and cancels answered: %d confirmed, %d cancelled, %d hold-expired, "+
		"%d expired, %d order-cancelled, %d order-confirmed, %d unknown; %d expired, %d of them while the fault was in force",
		orders[model.Held], orders[model.SoldOut], counts[model.Confirmed], counts[model.Cancelled], counts[model.HoldExpired],
		counts[model.Expired], counts[model.OrderCancelled], counts[model.OrderConfirmed], counts[model.Unknown], expiries, duringFault))
	notes = append(notes, fmt.Sprintf("holds due while the fault was in force: %d; holds buyers' operations not sent, %d already open: %d",
		dueDuringFault, holdsGateSize, d.holdsOpen.skipped.Load()))
	if dueDuringFault == 0 {
		failed = append(failed, "no hold came due while the fault was in force: the drill did not test expiry under it")
	}
	return failed, notes
}
