package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/model"
	"github.com/stocksvc/stocksvc/loadtest/traffic"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// HoldsOptions configure -holds: the sale with holds beside the plain sale.
type HoldsOptions struct {
	Stock    int
	Rate     int // arrivals per second, split evenly over the two products
	Duration time.Duration
	HoldFor  time.Duration
	Pay      float64 // share of held buyers who confirm
	Cancel   float64 // share of held buyers who cancel; the rest never pay
	Seed     uint64
}

// The sale with holds (-holds): two products with the same stock, sold in one run through the
// balancer by the drills' client (customer tokens, retries with the same key), one buyer per
// arrival at half the rate each: the plain product's orders are final at once; the other's are
// held for -hold-for, and its buyers pay (-pay, after up to two thirds of the hold), cancel
// (-cancel) or never pay, so that their units go back and are sold to the buyers behind them.
// When the load ends the run waits for every hold to end (the expiry's jobs and the sweep),
// then judges from Postgres:
//
//   - the books (verdict.Ledgers, Rules, Holds): received = stock + held + confirmed, nothing
//     left held, no confirm after the expiry, every client told what Postgres holds;
//   - every unit of the held product ends confirmed or back in stock, and released units are
//     sold again;
//
// and measures, side by side with the plain sale: holds per second (and how long the initial
// stock lasted), expiries released per second, the expiry's lag (expires_at → decided_at) and
// the time from expires_at to the units being sold again (the order that took them, in a
// replay of the stock as a line of units: its created_at − expires_at; see replayLine).
func Holds(ctx context.Context, h *env.Harness, o HoldsOptions) error {
	return (&harness{h}).holdsSale(ctx, o)
}

// holdsFigures is what one product's side of the run measured.
type holdsFigures struct {
	arrivals, answered201, soldOut, refused, unknown int
	orderP50, orderP99                               time.Duration // POST → 201, at the client
	confirmed, cancelled, expired                    int64         // orders (the plain product's are all confirmed)
	unitsConfirmed, stock, received                  int64
	perSecond                                        float64 // orders taken (201) per second of load
	settleP50, settleP99                             time.Duration
	// Of the held product.
	expiredPerSecond, expiredPeak      float64
	lagP50, lagP99, lagMax             time.Duration // expires_at → decided_at, expired holds
	resaleP50, resaleP99, resaleMax    time.Duration // expires_at → sold again
	relSaleP50, relSaleP99, relSaleMax time.Duration // released (decided_at) → sold again
	releasedUnits, resoldUnits         int64
	// How long the initial stock lasted (first order to the one that took its last unit), and
	// the units taken per second meanwhile: the sale's pace while it had stock.
	initialGone    time.Duration
	ranOut         bool
	initialRate    float64
	confirmAnswers map[model.Outcome]int
}

func (h *harness) holdsSale(ctx context.Context, o HoldsOptions) error {
	sc := scenario{name: "holds-sale", about: "the sale with holds beside the plain sale"}
	d := &drillEnv{h: h, plan: drillPlan{lockTTL: 2 * time.Second}, sc: sc, rng: traffic.NewRand(o.Seed, 0), rec: model.NewRecorder(),
		dir: filepath.Join(h.Out, "holds-sale")}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	defer d.teardown()
	if err := d.setup(ctx); err != nil {
		return err
	}
	d.client = client.New([]string{fmt.Sprintf("http://127.0.0.1:%d", d.c.Front)}, d.c.Token, "holds", 10*time.Second, d.rec,
		client.RetryPolicy{Attempts: 6, Budget: 12 * time.Second, Pause: 100 * time.Millisecond})
	d.client.Bearer = d.identity.Token
	defer d.client.Close()
	plain, err := d.client.CreateProduct(ctx, "PLAIN-"+rand.Text()[:6], int64(o.Stock))
	if err != nil {
		return err
	}
	held, err := d.client.CreateSale(ctx, "HELD-"+rand.Text()[:6], int64(o.Stock), client.SaleRules{HoldFor: int64(o.HoldFor / time.Second)})
	if err != nil {
		return err
	}
	h.Printf("[holds-sale] %d replicas behind HAProxy; product %d (plain) and %d (held %v), %d units each; %d buyers/s of one unit on each for %v; "+
		"held buyers: %.0f%% pay, %.0f%% cancel, %.0f%% never pay\n", h.Cluster.Replicas, plain, held, o.HoldFor, o.Stock, o.Rate/2, o.Duration,
		100*o.Pay, 100*o.Cancel, 100*(1-o.Pay-o.Cancel))

	var unexpected []string
	var mu sync.Mutex
	var arrivals [2]atomic.Int64
	loadStart := d.rec.Now()
	loadCtx, stop := context.WithTimeout(ctx, o.Duration)
	tick := time.NewTicker(time.Second / time.Duration(o.Rate))
	for n := 0; loadCtx.Err() == nil; n++ {
		select {
		case <-loadCtx.Done():
			continue
		case <-tick.C:
		}
		bg := context.WithoutCancel(ctx)
		if n%2 == 0 {
			arrivals[0].Add(1)
			d.client.Go(func() { d.client.Order(bg, plain, 1) })
			continue
		}
		arrivals[1].Add(1)
		d.client.Go(func() {
			order := d.client.Order(bg, held, 1)
			if order.Out.Outcome != model.Held || order.OrderID == "" {
				return
			}
			roll := d.rng.Float()
			var kind model.Kind
			var wait time.Duration
			switch {
			case roll < o.Pay:
				kind, wait = model.KindConfirm, d.rng.Between(200*time.Millisecond, 2*o.HoldFor/3)
			case roll < o.Pay+o.Cancel:
				kind, wait = model.KindCancel, d.rng.Between(0, o.HoldFor/2)
			default:
				return // never pays: the expiry gives the unit back
			}
			if clock.Sleep(bg, wait) != nil { // the buyer's own time before paying
				return
			}
			if _, bad := d.client.Settle(bg, order, kind); bad != "" {
				mu.Lock()
				unexpected = append(unexpected, bad)
				mu.Unlock()
			}
		})
	}
	tick.Stop()
	stop()
	loadEnd := d.rec.Now()
	d.client.Wait()
	h.Printf("[holds-sale] load done (%.1fs); waiting for every hold to end\n", (loadEnd - loadStart).Seconds())
	pool, err := pgxpool.New(ctx, d.c.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	settleCtx, cancel := context.WithTimeout(ctx, o.HoldFor+holdsGrace+10*time.Second)
	err = d.settleHolds(settleCtx, pool)
	cancel()
	if err != nil {
		return err
	}

	// The verdict.
	checks, _, err := verdict.Ledgers(ctx, pool)
	if err != nil {
		return err
	}
	more, err := verdict.Rules(ctx, pool)
	if err != nil {
		return err
	}
	checks = append(checks, more...)
	if more, err = verdict.Holds(ctx, pool, holdsGrace); err != nil {
		return err
	}
	checks = append(checks, more...)
	ops := d.rec.Snapshot()
	if more, err = verdict.Orders(ctx, pool, ops, d.rec.Start); err != nil {
		return err
	}
	checks = append(checks, more...)
	if _, more, err = verdict.HoldOps(ctx, pool, ops, d.rec.Start, nil, d.rec.Now()); err != nil {
		return err
	}
	checks = append(checks, more...)
	checks = append(checks, verdict.Invariant{Name: "every confirm and cancel answered as the contract allows", OK: len(unexpected) == 0,
		Detail: fmt.Sprintf("%d unexpected answers %s", len(unexpected), strings.Join(unexpected[:min(3, len(unexpected))], "; "))})

	loadFor := loadEnd - loadStart
	figs := map[int64]*holdsFigures{plain: {arrivals: int(arrivals[0].Load())}, held: {arrivals: int(arrivals[1].Load()), confirmAnswers: map[model.Outcome]int{}}}
	for id, f := range figs {
		if err := f.fromClients(ops, id, loadFor); err != nil {
			return err
		}
		if err := f.fromPostgres(ctx, pool, id); err != nil {
			return err
		}
	}
	hf := figs[held]
	checks = append(checks,
		verdict.Invariant{Name: "every unit of the held product ends confirmed or back in stock", OK: hf.received == hf.unitsConfirmed+hf.stock,
			Detail: fmt.Sprintf("%d received = %d confirmed + %d in stock", hf.received, hf.unitsConfirmed, hf.stock)},
		verdict.Invariant{Name: "released units were sold again", OK: hf.releasedUnits == 0 || hf.resoldUnits > 0,
			Detail: fmt.Sprintf("%d units released, %d of them sold again", hf.releasedUnits, hf.resoldUnits)})

	rep := holdsReport(o, figs[plain], hf, checks, h.Cluster.Replicas)
	h.Printf("\n%s", rep)
	path := filepath.Join(d.dir, "holds.md")
	if err := os.WriteFile(path, []byte(rep), 0o644); err != nil {
		return err
	}
	h.Printf("written to %s\n", path)
	for _, c := range checks {
		if !c.OK {
			return env.ErrFailed
		}
	}
	return nil
}

// fromClients reads what the clients saw of one product.
func (f *holdsFigures) fromClients(ops []*model.Op, product int64, loadFor time.Duration) error {
	var took, settled []time.Duration
	for _, p := range ops {
		if p.In.Product != product {
			continue
		}
		switch p.In.Kind {
		case model.KindOrder:
			switch p.Out.Outcome {
			case model.Confirmed, model.Held:
				f.answered201++
				took = append(took, p.Return-p.Invoke)
			case model.SoldOut:
				f.soldOut++
			case model.Unknown:
				f.unknown++
			default:
				f.refused++
			}
		case model.KindConfirm, model.KindCancel:
			f.confirmAnswers[p.Out.Outcome]++
			settled = append(settled, p.Return-p.Invoke)
		}
	}
	f.orderP50, f.orderP99 = percentiles(took)
	f.settleP50, f.settleP99 = percentiles(settled)
	f.perSecond = float64(f.answered201) / loadFor.Seconds()
	return nil
}

// fromPostgres reads one product's books and, for the held product, its releases and when
// their units were sold again.
func (f *holdsFigures) fromPostgres(ctx context.Context, pool *pgxpool.Pool, product int64) error {
	if err := pool.QueryRow(ctx, `
		SELECT p.stock, p.initial_stock + coalesce((SELECT sum(quantity) FROM restocks WHERE product_id = p.id), 0),
		       count(*) FILTER (WHERE o.status = 'confirmed'), count(*) FILTER (WHERE o.status = 'cancelled'),
		       count(*) FILTER (WHERE o.status = 'expired'),
		       coalesce(sum(i.quantity) FILTER (WHERE o.status = 'confirmed'), 0)
		  FROM products p LEFT JOIN order_items i ON i.product_id = p.id LEFT JOIN orders o ON o.id = i.order_id
		 WHERE p.id = $1 GROUP BY p.id`, product).
		Scan(&f.stock, &f.received, &f.confirmed, &f.cancelled, &f.expired, &f.unitsConfirmed); err != nil {
		return fmt.Errorf("read product %d: %w", product, err)
	}
	// Expiries per second: over the span of their decisions, and in the busiest second.
	if err := pool.QueryRow(ctx, `
		SELECT coalesce(count(*) / nullif(extract(epoch FROM max(o.decided_at) - min(o.decided_at)), 0), 0)::float8,
		       coalesce((SELECT max(n) FROM (SELECT count(*) AS n FROM orders o2 JOIN order_items i2 ON i2.order_id = o2.id
		                  WHERE i2.product_id = $1 AND o2.status = 'expired' GROUP BY date_trunc('second', o2.decided_at)) b), 0)::float8
		  FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = $1 AND o.status = 'expired'`, product).
		Scan(&f.expiredPerSecond, &f.expiredPeak); err != nil {
		return fmt.Errorf("expiries per second: %w", err)
	}
	rows, _ := pool.Query(ctx, `SELECT extract(epoch FROM o.decided_at - o.expires_at)::float8 FROM orders o JOIN order_items i ON i.order_id = o.id
		WHERE i.product_id = $1 AND o.status = 'expired'`, product)
	lags, err := pgx.CollectRows(rows, pgx.RowTo[float64])
	if err != nil {
		return fmt.Errorf("expiry lags: %w", err)
	}
	f.lagP50, f.lagP99, f.lagMax = spread(lags)
	// When released units were sold again: the product's stock as a line of units, sold from
	// its head — the units it was created with first, each release's units joining at the
	// back when it happened (decided_at) — replayed over the orders in the order they were
	// created (created_at: now() of the transaction that took the units). A unit an expired
	// hold gave back is sold again when an order takes it from the head: the time from its
	// expires_at to that order's created_at. In a sold-out product, that is the next buyer.
	var initial int64
	if err := pool.QueryRow(ctx, `SELECT initial_stock FROM products WHERE id = $1`, product).Scan(&initial); err != nil {
		return fmt.Errorf("initial stock: %w", err)
	}
	rows, _ = pool.Query(ctx, `
		SELECT o.decided_at, i.quantity, true, o.status = 'expired', o.expires_at FROM orders o JOIN order_items i ON i.order_id = o.id
		 WHERE i.product_id = $1 AND o.status IN ('cancelled', 'expired')
		UNION ALL
		SELECT o.created_at, i.quantity, false, false, o.created_at FROM orders o JOIN order_items i ON i.order_id = o.id
		 WHERE i.product_id = $1
		ORDER BY 1, 3 DESC`, product)
	var events []lineEvent
	var e lineEvent
	if _, err := pgx.ForEachRow(rows, []any{&e.at, &e.units, &e.release, &e.expired, &e.expires}, func() error {
		events = append(events, e)
		return nil
	}); err != nil {
		return fmt.Errorf("releases and orders: %w", err)
	}
	r := replayLine(initial, events)
	f.releasedUnits, f.resoldUnits = r.released, r.resold
	f.resaleP50, f.resaleP99, f.resaleMax = spread(r.fromExpiry)
	f.relSaleP50, f.relSaleP99, f.relSaleMax = spread(r.fromRelease)
	f.initialGone, f.ranOut = r.initialGone, r.ranOut
	if r.ranOut && r.initialGone > 0 {
		f.initialRate = float64(initial) / r.initialGone.Seconds()
	}
	return nil
}

// spread is p50, p99 and the maximum of seconds.
func spread(secs []float64) (p50, p99, most time.Duration) {
	if len(secs) == 0 {
		return 0, 0, 0
	}
	slices.Sort(secs)
	d := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	return d(secs[len(secs)/2]), d(secs[min(len(secs)-1, len(secs)*99/100)]), d(secs[len(secs)-1])
}

// holdsReport is the run's one screen, in Markdown, as docs/benchmarks.md quotes it.
func holdsReport(o HoldsOptions, plain, held *holdsFigures, checks []verdict.Invariant, replicas int) string {
	var b strings.Builder
	ms := func(d time.Duration) string { return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond)) }
	fmt.Fprintf(&b, "## The sale with holds beside the plain sale\n\n%d replicas; %d units each; %d buyers/s of one unit on each for %v; hold %v; "+
		"held buyers: %.0f%% pay, %.0f%% cancel, %.0f%% never pay\n\n", replicas, o.Stock, o.Rate/2, o.Duration, o.HoldFor,
		100*o.Pay, 100*o.Cancel, 100*(1-o.Pay-o.Cancel))
	b.WriteString("| | plain | held |\n|---|---|---|\n")
	row := func(name, a, c string) { fmt.Fprintf(&b, "| %s | %s | %s |\n", name, a, c) }
	row("buyers", fmt.Sprint(plain.arrivals), fmt.Sprint(held.arrivals))
	row("orders taken (201 confirmed / held)", fmt.Sprint(plain.answered201), fmt.Sprint(held.answered201))
	row("taken per second of load", fmt.Sprintf("%.1f", plain.perSecond), fmt.Sprintf("%.1f holds/s", held.perSecond))
	lasted := func(f *holdsFigures) string {
		if !f.ranOut {
			return "never ran out"
		}
		return fmt.Sprintf("%.2f s (%.0f units/s)", f.initialGone.Seconds(), f.initialRate)
	}
	row("initial stock lasted (units taken per second meanwhile)", lasted(plain), lasted(held))
	row("sold out / refused / unknown", fmt.Sprintf("%d / %d / %d", plain.soldOut, plain.refused, plain.unknown),
		fmt.Sprintf("%d / %d / %d", held.soldOut, held.refused, held.unknown))
	row("POST /v1/orders → 201, p50 / p99", ms(plain.orderP50)+" / "+ms(plain.orderP99), ms(held.orderP50)+" / "+ms(held.orderP99))
	row("confirmed orders (units)", fmt.Sprintf("%d (%d)", plain.confirmed, plain.unitsConfirmed), fmt.Sprintf("%d (%d)", held.confirmed, held.unitsConfirmed))
	row("cancelled / expired", "—", fmt.Sprintf("%d / %d", held.cancelled, held.expired))
	row("stock left of received", fmt.Sprintf("%d of %d", plain.stock, plain.received), fmt.Sprintf("%d of %d", held.stock, held.received))
	row("confirm/cancel answers", "—", fmt.Sprintf("%d confirmed, %d cancelled, %d hold-expired, %d expired, %d other", held.confirmAnswers[model.Confirmed],
		held.confirmAnswers[model.Cancelled], held.confirmAnswers[model.HoldExpired], held.confirmAnswers[model.Expired],
		otherAnswers(held.confirmAnswers)))
	row("confirm/cancel → answer, p50 / p99", "—", ms(held.settleP50)+" / "+ms(held.settleP99))
	row("expiries released per second (busiest second)", "—", fmt.Sprintf("%.1f (%.0f)", held.expiredPerSecond, held.expiredPeak))
	row("expiry lag expires_at → released, p50 / p99 / max", "—", ms(held.lagP50)+" / "+ms(held.lagP99)+" / "+ms(held.lagMax))
	row("expires_at → units sold again, p50 / p99 / max", "—", ms(held.resaleP50)+" / "+ms(held.resaleP99)+" / "+ms(held.resaleMax))
	row("released → units sold again, p50 / p99 / max", "—", ms(held.relSaleP50)+" / "+ms(held.relSaleP99)+" / "+ms(held.relSaleMax))
	row("units released / sold again", "—", fmt.Sprintf("%d / %d", held.releasedUnits, held.resoldUnits))
	b.WriteString("\n")
	for _, c := range checks {
		mark := "PASS"
		if !c.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "- %s %s: %s\n", mark, c.Name, c.Detail)
	}
	return b.String()
}

// otherAnswers counts the confirms' and cancels' answers the report does not name.
func otherAnswers(m map[model.Outcome]int) int {
	n := 0
	for k, c := range m {
		switch k {
		case model.Confirmed, model.Cancelled, model.HoldExpired, model.Expired:
		default:
			n += c
		}
	}
	return n
}

// lineEvent is one change of a held product's stock: an order taking units (at its
// created_at), or a hold giving them back (release, at its decided_at).
type lineEvent struct {
	at      time.Time
	units   int64
	release bool
	expired bool      // a release by the expiry (not a cancel)
	expires time.Time // the released hold's expires_at
}

// replay is what replayLine found.
type replay struct {
	released, resold int64
	// fromExpiry: for each unit an expired hold gave back and an order took again, the
	// seconds from the hold's expires_at to that order; fromRelease: from the release itself
	// (its decided_at), for expired and cancelled holds alike.
	fromExpiry, fromRelease []float64
	// initialGone is how long the product's initial units lasted: from the first order to the
	// one that took the last of them, when they ran out (ranOut).
	initialGone time.Duration
	ranOut      bool
}

// replayLine replays a product's stock as a line of units sold from its head: the initial
// units first, each release's units joining at the back. events are in time order, releases
// before orders at the same instant.
func replayLine(initial int64, events []lineEvent) replay {
	type segment struct {
		units    int64
		release  bool
		expired  bool
		expires  time.Time
		released time.Time
	}
	var r replay
	line := []segment{{units: initial}}
	var first time.Time
	for _, ev := range events {
		if ev.release {
			r.released += ev.units
			line = append(line, segment{units: ev.units, release: true, expired: ev.expired, expires: ev.expires, released: ev.at})
			continue
		}
		if first.IsZero() {
			first = ev.at
		}
		for need := ev.units; need > 0 && len(line) > 0; {
			head := &line[0]
			take := min(need, head.units)
			if head.release {
				r.resold += take
				for range take {
					r.fromRelease = append(r.fromRelease, ev.at.Sub(head.released).Seconds())
					if head.expired {
						r.fromExpiry = append(r.fromExpiry, ev.at.Sub(head.expires).Seconds())
					}
				}
			}
			need -= take
			if head.units -= take; head.units == 0 {
				if !head.release && !r.ranOut {
					r.initialGone, r.ranOut = ev.at.Sub(first), true
				}
				line = line[1:]
			}
		}
	}
	return r
}
