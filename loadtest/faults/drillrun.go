package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/model"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/traffic"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// The drill runner: one run of a scenario, as named steps in the order they happen — bring the
// world up, create the products, sell while the fault is injected, let it heal, stop the
// replicas (the end of the history), read the verdicts from Postgres, save the history, check
// it against the model, and write the page.

// runDrill runs scenario sc once and judges it.
func (h *harness) runDrill(ctx context.Context, plan drillPlan, sc scenario, run int, seed uint64) drillOutcome {
	out := drillOutcome{scenario: sc.name, run: run, seed: seed}
	d := &drillEnv{h: h, plan: plan, sc: sc, rng: traffic.NewRand(seed, 0), rec: model.NewRecorder(),
		dir: filepath.Join(h.Out, fmt.Sprintf("%s-%d", sc.name, run))}
	out.err = h.drill(ctx, d, &out)
	return out
}

// drill runs the steps of one run, filling out as they measure; the first error ends it.
func (h *harness) drill(ctx context.Context, d *drillEnv, out *drillOutcome) error {
	out.dir = d.dir
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	defer d.teardown()
	h.Printf("\n[%s] %s, run %d, seed %d\n", filepath.Base(d.dir), d.sc.about, out.run, out.seed)
	if err := d.setup(ctx); err != nil {
		return err
	}
	d.connect(out.run)
	defer d.client.Close()
	if err := d.createProducts(ctx); err != nil {
		return err
	}
	var watcher *verdict.ReleaseWatcher
	if d.sc.holds {
		w, stop, err := d.watchReleases(ctx)
		if err != nil {
			return err
		}
		defer stop()
		watcher = w
	}
	faultStart, faultEnd, err := d.sell(ctx)
	if err != nil {
		return err
	}
	if watcher != nil {
		if err := d.settleAllHolds(ctx); err != nil {
			return fmt.Errorf("wait for the holds to end: %w", err)
		}
	}
	out.catches = d.scrapeCatches(ctx)
	d.catches = out.catches

	// Nothing may take effect once every replica has stopped: that is the end of the history.
	d.stopReplicas()
	end := d.rec.Now()
	var seen map[string]time.Duration
	if watcher != nil {
		seen = watcher.Stop()
	}

	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(checkCtx, d.c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", d.c.Database, err)
	}
	defer pool.Close()
	ops, err := d.verdicts(checkCtx, pool, out, seen, end)
	if err != nil {
		return err
	}
	if err := d.saveHistory(ops, end); err != nil {
		return err
	}
	if err := d.judge(ctx, ops, end, window{faultStart, faultEnd}, out); err != nil {
		return err
	}
	// The page reads Postgres again: a context of its own, the checks' may have run out
	// while the checker searched.
	pageCtx, cancelPage := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancelPage()
	if err := d.writePage(pageCtx, pool, ops, *out); err != nil {
		h.Printf("[%s] warning: no report page: %v\n", filepath.Base(d.dir), err)
	}
	return nil
}

// connect makes the run's recording client: through the balancer, or straight to the
// replicas in turn when the plan says direct.
func (d *drillEnv) connect(run int) {
	bases := []string{fmt.Sprintf("http://127.0.0.1:%d", d.c.Front)}
	if d.plan.direct {
		bases = nil
		for _, r := range d.c.Replicas {
			bases = append(bases, fmt.Sprintf("http://127.0.0.1:%d", r.Port))
		}
	}
	d.client = client.New(bases, d.c.Token, "drill"+strconv.Itoa(run), d.plan.clientTimeout, d.rec,
		client.RetryPolicy{Attempts: 6, Budget: 12 * time.Second, Pause: 100 * time.Millisecond})
	d.client.Bearer = d.identity.Token
}

// createProducts creates the hot, scarce and limited products, and the held one when the
// scenario sells with holds.
func (d *drillEnv) createProducts(ctx context.Context) error {
	var err error
	if d.hot, err = d.client.CreateProduct(ctx, "HOT-"+rand.Text()[:6], d.hotStock()); err != nil {
		return err
	}
	if d.scarce, err = d.client.CreateProduct(ctx, "SCARCE-"+rand.Text()[:6], 4); err != nil {
		return err
	}
	if d.limited, err = d.createLimited(ctx); err != nil {
		return err
	}
	if d.sc.holds {
		if d.holds, err = d.createHolds(ctx); err != nil {
			return err
		}
	}
	return nil
}

// watchReleases starts the watcher of the orders table that bounds each hold's release from
// above while the drill runs (the releases' moments are read back from Postgres:
// verdict.HoldOps). stop stops it and closes its pool.
func (d *drillEnv) watchReleases(ctx context.Context) (w *verdict.ReleaseWatcher, stop func(), err error) {
	cfg, err := pgxpool.ParseConfig(d.c.DatabaseURL)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	w = verdict.WatchReleases(ctx, pool, d.rec, 100*time.Millisecond)
	return w, func() { w.Stop(); pool.Close() }, nil
}

// sell runs the load, injects the scenario's fault after the warm-up, lets it heal during the
// tail, then stops the load and waits for every operation's answer. It returns when the fault
// was in force; an error only when the fault could not be injected (a signal is not one).
func (d *drillEnv) sell(ctx context.Context) (faultStart, faultEnd time.Duration, err error) {
	d.load = &traffic.Mix{Client: d.client, Rand: d.rng, Rate: d.plan.rate, MaxOpen: 400, Hot: d.hot, Scarce: d.scarce,
		Limited: d.limited, LimitedCustomer: d.regularCustomer, LimitedMax: limitedLimit, Holds: d.holds, HoldBuyer: d.holdBuyer}
	d.load.SetFactor(1)
	loadCtx, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { d.load.Run(loadCtx) })
	wg.Go(func() { d.load.Restock(loadCtx) })
	traffic.Rush(loadCtx, d.client, d.hot, d.sc.buyers)
	d.announce()
	faultStart, faultEnd, faultErr := d.injectAndHeal(ctx)
	stopLoad()
	wg.Wait()
	d.client.Wait() // every operation runs to its answer or its retry budget
	d.event("load stopped; %d arrivals dropped (too many open operations)", d.load.Dropped())
	if faultErr != nil && ctx.Err() == nil {
		return 0, 0, fmt.Errorf("inject %s: %w", d.sc.name, faultErr)
	}
	return faultStart, faultEnd, nil
}

// announce says what the run sells, and to whom.
func (d *drillEnv) announce() {
	h, plan, name := d.h, d.plan, filepath.Base(d.dir)
	h.Printf("[%s] selling: %.0f operations/s, hot product %d units, scarce product 4 units; victim %s\n",
		name, plan.rate, d.hotStock(), d.c.Replicas[d.victim].Name)
	if plan.rules {
		h.Printf("[%s] and %.0f orders/s of a product whose sale opens in %v and is ended %v after the fault, at most %d units a customer, by customers who come back\n",
			name, plan.rate/5, plan.warmup/2, plan.tail/2, limitedLimit)
	} else {
		h.Printf("[%s] and %.0f orders/s of a product without rules (-rules=false), by customers who come back\n", name, plan.rate/5)
	}
	if d.holds != 0 {
		h.Printf("[%s] and %.0f orders/s of a product held %v (%d units), whose buyers pay, cancel or walk away\n", name,
			plan.rate*20/145, holdFor, holdStock)
	}
	if d.sc.buyers > 0 {
		h.Printf("[%s] and %d closed-loop buyers of the hot product; replicas' lock wait %v\n", name, d.sc.buyers, d.lockWait())
	}
}

// injectAndHeal waits out the warm-up, injects the fault, and waits out the tail, during which
// (with the sale rules) an admin ends the limited product's sale.
func (d *drillEnv) injectAndHeal(ctx context.Context) (faultStart, faultEnd time.Duration, err error) {
	plan := d.plan
	if err := clock.Sleep(ctx, plan.warmup); err != nil {
		return 0, 0, err
	}
	faultStart = d.rec.Now()
	err = d.sc.inject(ctx, d)
	faultEnd = d.rec.Now()
	if len(d.faults) == 0 {
		d.faultWindow(faultStart)
	}
	if err != nil {
		return faultStart, faultEnd, err
	}
	if !plan.rules {
		return faultStart, faultEnd, clock.Sleep(ctx, plan.tail)
	}
	// The limited product's sale ends early, by an admin, halfway through the tail: orders
	// after it must be refused sale-ended, whichever replica answers.
	if err := clock.Sleep(ctx, plan.tail/2); err != nil {
		return faultStart, faultEnd, err
	}
	if end := d.client.EndSale(context.WithoutCancel(ctx), d.limited); end.Out.Outcome != model.Confirmed {
		d.fail("ending the limited product's sale: %s", end.DescribeAttempts())
	}
	return faultStart, faultEnd, clock.Sleep(ctx, plan.tail-plan.tail/2)
}

// settleAllHolds waits until every hold has ended while the replicas run: the expiry's job,
// or the sweep.
func (d *drillEnv) settleAllHolds(ctx context.Context) error {
	settleCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), holdFor+holdsGrace+10*time.Second)
	defer cancel()
	pool, err := pgxpool.New(settleCtx, d.c.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	return d.settleHolds(settleCtx, pool)
}

// scrapeCatches is what the defense layers caught, by the live replicas' own counters (a
// killed replica's are lost with it): whether the fault made the fence, say, earn its keep.
func (d *drillEnv) scrapeCatches(ctx context.Context) map[string]float64 {
	catches := map[string]float64{}
	for _, r := range d.c.Replicas {
		if m, err := cluster.ScrapeReplica(ctx, r.Port, d.c.Token); err == nil {
			for layer, n := range m.Catches {
				catches[layer] += n
			}
		}
	}
	return catches
}

// stopReplicas stops every replica at once, each within 20 s.
func (d *drillEnv) stopReplicas() {
	var stopping sync.WaitGroup
	for _, r := range d.c.Replicas {
		stopping.Go(func() { _ = r.Proc.Stop(20 * time.Second) })
	}
	stopping.Wait()
}

// verdicts reads the SQL verdicts into out (invariants, reconciliation, unknown outcomes) and
// returns the history to check: the recorded operations, the holds' releases and expiries,
// and each product's final stock at end.
func (d *drillEnv) verdicts(ctx context.Context, pool *pgxpool.Pool, out *drillOutcome, seen map[string]time.Duration, end time.Duration) ([]*model.Op, error) {
	var err error
	if out.invariants, _, err = verdict.Ledgers(ctx, pool); err != nil {
		return nil, err
	}
	rules, err := verdict.Rules(ctx, pool)
	if err != nil {
		return nil, err
	}
	out.invariants = append(out.invariants, rules...)
	holds, err := verdict.Holds(ctx, pool, holdsGrace)
	if err != nil {
		return nil, err
	}
	out.invariants = append(out.invariants, holds...)
	ops := d.rec.Snapshot()
	keys, err := verdict.Keys(ctx, pool, ops, d.rec.Start)
	if err != nil {
		return nil, err
	}
	if out.reconcile, err = verdict.Orders(ctx, pool, ops, d.rec.Start); err != nil {
		return nil, err
	}
	out.reconcile = append(out.reconcile, keys...)
	// The holds' releases, expiries and final statuses, after Orders has given the orders
	// whose outcome was unknown their ids.
	holdOps, holdChecks, err := verdict.HoldOps(ctx, pool, ops, d.rec.Start, seen, end)
	if err != nil {
		return nil, err
	}
	out.reconcile = append(out.reconcile, holdChecks...)
	out.resolved, out.unknown = countUnknown(ops)
	products := []int64{d.hot, d.scarce, d.limited}
	if d.holds != 0 {
		products = append(products, d.holds)
	}
	final, err := verdict.FinalStock(ctx, pool, products, end)
	if err != nil {
		return nil, err
	}
	ops = append(ops, holdOps...)
	return append(ops, final...), nil
}

// countUnknown counts the operations whose outcome the client never learnt (unknown), and the
// orders among them the database showed to have happened (resolved); an order refused but
// sold is a violation, not an unknown outcome.
func countUnknown(ops []*model.Op) (resolved, unknown int) {
	for _, p := range ops {
		if p.RefusedButSold {
			continue
		}
		if p.In.Kind == model.KindOrder && len(p.Attempts) > 0 && p.Out.Outcome == model.Happened {
			resolved++
		}
		if p.Out.Outcome == model.Unknown || p.Out.Outcome == model.Happened {
			unknown++
		}
	}
	return resolved, unknown
}

// saveHistory writes the history as text (to read) and JSON (to check again: -recheck).
func (d *drillEnv) saveHistory(ops []*model.Op, end time.Duration) error {
	if err := model.WriteText(filepath.Join(d.dir, "history.txt"), ops); err != nil {
		return err
	}
	return model.Save(filepath.Join(d.dir, "history.json"), ops, end)
}

// judge checks the history against the model, measures availability, and collects why the
// run proves nothing, what failed and what is worth a note (the scenario's own checks too).
func (d *drillEnv) judge(ctx context.Context, ops []*model.Op, end time.Duration, fault window, out *drillOutcome) error {
	d.h.Printf("[%s] checking the history against the model\n", filepath.Base(d.dir))
	var err error
	if out.writes, out.reads, err = checkBoth(d.plan, ops, end, d.annotations(), d.dir); err != nil {
		return err
	}
	out.ops, out.concurrent = out.reads.Ops, out.reads.Concurrent
	out.avail = measureAvailability(ops, d.faults)
	out.invalid = d.validity(ops, fault.start, fault.end)
	if ctx.Err() != nil {
		out.invalid = append([]string{"stopped by a signal: the checks cover what ran"}, out.invalid...)
	}
	out.failed, out.notes = d.failed, d.notes
	if d.sc.check != nil {
		f, n := d.sc.check(d, ops, out.avail)
		out.failed = append(out.failed, f...)
		out.notes = append(out.notes, n...)
	}
	out.noSale = d.noSale
	return nil
}

// pageName is the run's report page, beside its history.
const pageName = "report.html"

// writePage writes the run's page (report.DrillPage) to its directory; it reads the hot
// product's stock from Postgres.
func (d *drillEnv) writePage(ctx context.Context, pool *pgxpool.Pool, ops []*model.Op, out drillOutcome) error {
	hot, err := verdict.StockLine(ctx, pool, d.hot, "hot product", d.rec.Start)
	if err != nil {
		return err
	}
	a := out.avail
	page := report.Drill{
		Scenario: d.sc.name, About: d.sc.about, Run: out.run, Seed: out.seed, Verdict: out.verdict(),
		Params: report.DrillParams{Replicas: d.h.Cluster.Replicas, Victim: d.c.Replicas[d.victim].Name, Rate: d.plan.rate,
			Defense: d.h.Cluster.Defense, LockTTL: d.plan.lockTTL, LockWait: d.lockWait(), ClientTimeout: d.plan.clientTimeout,
			HotStock: d.hotStock(), Buyers: d.sc.buyers},
		Checks: verdict.Checks(append(append([]verdict.Invariant{}, out.invariants...), out.reconcile...)),
		Failed: out.failed, Invalid: out.invalid, Notes: out.notes,
		History: ops, Operations: out.ops, AtOnce: out.concurrent, Orders: a.orders, Unknown: out.unknown, Resolved: out.resolved,
		Writes: out.writes, Reads: out.reads, Busy: a.busy, Unavailable: a.unavailable, LongestStall: a.longestStall, StallAt: a.stallAt,
		Catches: out.catches, Hot: hot,
	}
	d.mu.Lock()
	for _, w := range d.faults {
		page.Faults = append(page.Faults, report.Window{Start: w.start, End: w.end, Label: d.sc.name})
	}
	for _, e := range d.events {
		page.Events = append(page.Events, report.Mark{At: e.at, Label: e.what})
	}
	d.mu.Unlock()
	command := "go run -C loadtest . " + strings.Join(d.h.Args, " ")
	return report.Write(filepath.Join(d.dir, pageName), report.DrillPage(command, page))
}
