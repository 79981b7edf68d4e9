package verdict

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// hasHolds says whether the schema has holds (issue #21): orders.expires_at.
func hasHolds(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var has bool
	err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'orders' AND column_name = 'expires_at')`).Scan(&has)
	if err != nil {
		return false, fmt.Errorf("look for holds: %w", err)
	}
	return has, nil
}

// Holds checks the holds (issue #21) from the tables alone, whatever the clients were told.
// Together with Ledgers (received = stock + held + confirmed, so the units of cancelled and
// expired orders went back exactly once in all) and Rules (customer_purchases.bought = held +
// confirmed units):
//
//   - every hold has one of the four statuses, and a decided one its decided_at;
//   - no hold was confirmed at or after its expires_at by Postgres's clock: such an order would
//     be confirmed and, by the expiry, released — its units sold twice;
//   - no hold expired before its expires_at;
//   - no order is still held grace after its expires_at, by Postgres's clock: the expiry and
//     the sweep behind it work. Called once the run has let every hold expire;
//   - with the cap on held units (issue #31, customer_holds), customer_holds.held, the count
//     the selling, confirming and releasing statements keep, equals the units of the
//     customer's held orders, and no customer holds more of a product than its
//     max_held_per_customer (the cap the product has when the check runs: the runs never lower
//     one).
//
// A schema without holds has nothing to check: Holds returns no invariant then.
func Holds(ctx context.Context, pool *pgxpool.Pool, grace time.Duration) ([]Invariant, error) {
	has, err := hasHolds(ctx, pool)
	if err != nil || !has {
		return nil, err
	}
	var counts struct{ held, confirmed, cancelled, expired int64 }
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE status = 'held'), count(*) FILTER (WHERE status = 'confirmed'),
		count(*) FILTER (WHERE status = 'cancelled'), count(*) FILTER (WHERE status = 'expired')
		FROM orders WHERE expires_at IS NOT NULL`).Scan(&counts.held, &counts.confirmed, &counts.cancelled, &counts.expired); err != nil {
		return nil, fmt.Errorf("count holds: %w", err)
	}
	malformed, err := findings(ctx, pool, `
		SELECT format('order %s: status %s, expires_at %s, decided_at %s', id, status,
		              coalesce(expires_at::text, 'null'), coalesce(decided_at::text, 'null'))
		  FROM orders
		 WHERE status NOT IN ('confirmed', 'held', 'cancelled', 'expired')
		    OR status IN ('held', 'cancelled', 'expired') AND expires_at IS NULL
		    OR expires_at IS NOT NULL AND status <> 'held' AND decided_at IS NULL
		 ORDER BY created_at`)
	if err != nil {
		return nil, fmt.Errorf("malformed holds: %w", err)
	}
	late, err := findings(ctx, pool, `
		SELECT format('order %s confirmed at %s, its hold expired at %s', id, decided_at, expires_at)
		  FROM orders WHERE status = 'confirmed' AND expires_at IS NOT NULL AND decided_at >= expires_at
		 ORDER BY decided_at`)
	if err != nil {
		return nil, fmt.Errorf("confirms after the expiry: %w", err)
	}
	early, err := findings(ctx, pool, `
		SELECT format('order %s expired at %s, its hold ran until %s', id, decided_at, expires_at)
		  FROM orders WHERE status = 'expired' AND decided_at < expires_at
		 ORDER BY decided_at`)
	if err != nil {
		return nil, fmt.Errorf("early expiries: %w", err)
	}
	stuck, err := findingsArgs(ctx, pool, `
		SELECT format('order %s still held, expired at %s (%s ago)', id, expires_at, date_trunc('millisecond', now() - expires_at))
		  FROM orders WHERE status = 'held' AND expires_at < now() - make_interval(secs => $1)
		 ORDER BY expires_at`, grace.Seconds())
	if err != nil {
		return nil, fmt.Errorf("holds left past their expiry: %w", err)
	}
	// The expiry's lag, expires_at to the units back, by Postgres's clock: a figure beside the
	// check, which only bounds it by grace.
	var lagMedian, lagMax float64
	if err := pool.QueryRow(ctx, `SELECT coalesce(percentile_disc(0.5) WITHIN GROUP (ORDER BY lag), 0), coalesce(max(lag), 0)
		FROM (SELECT extract(epoch FROM decided_at - expires_at)::float8 AS lag FROM orders WHERE status = 'expired') l`).Scan(&lagMedian, &lagMax); err != nil {
		return nil, fmt.Errorf("expiry lag: %w", err)
	}
	counted, err := heldCounts(ctx, pool)
	if err != nil {
		return nil, err
	}
	return append([]Invariant{
		{Name: "every hold has a status (held, confirmed, cancelled, expired) and a decided one its decided_at", OK: len(malformed) == 0,
			Detail: fmt.Sprintf("%d held, %d confirmed, %d cancelled, %d expired; ", counts.held, counts.confirmed, counts.cancelled, counts.expired) +
				summarise(len(malformed), "malformed", malformed)},
		{Name: "no hold confirmed at or after its expiry (Postgres's clock)", OK: len(late) == 0,
			Detail: summarise(len(late), "confirmed after the expiry", late)},
		{Name: "no hold expired before its expires_at", OK: len(early) == 0, Detail: summarise(len(early), "expired early", early)},
		{Name: fmt.Sprintf("no order still held %v after its expires_at (the expiry and the sweep work)", grace), OK: len(stuck) == 0,
			Detail: fmt.Sprintf("expiry lag (expires_at to units back) median %.2fs, max %.2fs; ", lagMedian, lagMax) +
				summarise(len(stuck), "left held", stuck)},
	}, counted...), nil
}

// heldCounts checks customer_holds against the held orders (see Holds); nothing on a schema
// without it.
func heldCounts(ctx context.Context, pool *pgxpool.Pool) ([]Invariant, error) {
	var has bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('customer_holds') IS NOT NULL`).Scan(&has); err != nil {
		return nil, fmt.Errorf("look for customer_holds: %w", err)
	}
	if !has {
		return nil, nil
	}
	const held = `
		SELECT i.product_id, o.customer_id, sum(i.quantity)::bigint AS units
		  FROM orders o JOIN order_items i ON i.order_id = o.id
		 WHERE o.status = 'held' GROUP BY i.product_id, o.customer_id`
	off, err := findings(ctx, pool, `
		WITH held AS (`+held+`)
		SELECT format('customer %s, product %s: customer_holds says %s held, the held orders hold %s',
		              coalesce(h.customer_id, c.customer_id), coalesce(h.product_id, c.product_id),
		              coalesce(c.held, 0), coalesce(h.units, 0))
		  FROM held h FULL JOIN customer_holds c ON c.product_id = h.product_id AND c.customer_id = h.customer_id
		 WHERE coalesce(h.units, 0) <> coalesce(c.held, 0)`)
	if err != nil {
		return nil, fmt.Errorf("reconcile customer_holds: %w", err)
	}
	over, err := findings(ctx, pool, `
		WITH held AS (`+held+`)
		SELECT format('customer %s holds %s units of product %s, cap %s', h.customer_id, h.units, p.id, p.max_held_per_customer)
		  FROM held h JOIN products p ON p.id = h.product_id
		 WHERE h.units > p.max_held_per_customer
		 ORDER BY p.id, h.customer_id`)
	if err != nil {
		return nil, fmt.Errorf("customers above the cap: %w", err)
	}
	var rows int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM customer_holds`).Scan(&rows); err != nil {
		return nil, fmt.Errorf("count customer_holds: %w", err)
	}
	return []Invariant{
		{Name: "customer_holds.held = the customer's held units", OK: len(off) == 0,
			Detail: fmt.Sprintf("%d customers counted; ", rows) + summarise(len(off), "counts off", off)},
		{Name: "no customer holds more than the cap on held units", OK: len(over) == 0,
			Detail: summarise(len(over), "customers above the cap", over)},
	}, nil
}

// findingsArgs is findings with arguments.
func findingsArgs(ctx context.Context, pool *pgxpool.Pool, sql string, args ...any) ([]string, error) {
	rows, _ := pool.Query(ctx, sql, args...)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// ReleaseWatcher polls the orders table during a run and notes, for every cancelled or expired
// order, the first moment (on the recorder's clock) a query that saw it released had returned:
// the release had committed by then. It bounds a release's moment from above far more tightly
// than the end of the run, which keeps Porcupine's search small.
type ReleaseWatcher struct {
	mu   sync.Mutex
	seen map[string]time.Duration
	stop context.CancelFunc
	done chan struct{}
}

// WatchReleases starts a watcher polling pool every period until Stop.
func WatchReleases(ctx context.Context, pool *pgxpool.Pool, rec *model.Recorder, period time.Duration) *ReleaseWatcher {
	ctx, cancel := context.WithCancel(ctx)
	w := &ReleaseWatcher{seen: map[string]time.Duration{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			// A failed poll (Postgres busy, the run ending) only leaves the bound looser.
			rows, _ := pool.Query(ctx, `SELECT id::text FROM orders WHERE status IN ('cancelled', 'expired')`)
			ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
			at := rec.Now()
			if err == nil {
				w.mu.Lock()
				for _, id := range ids {
					if _, ok := w.seen[id]; !ok {
						w.seen[id] = at
					}
				}
				w.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return w
}

// Stop ends the polling and returns what it saw.
func (w *ReleaseWatcher) Stop() map[string]time.Duration {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seen
}

// reviveSlack widens a release's interval past the moment the watcher saw it committed. The
// service puts released units back in the products' views after the commit (before a cancel
// is answered, before an expiry's job ends), and a sold-out answered from a view in between
// told the truth as the service is bound to know it — as one concurrent with a restock does
// until the restock is answered. An expiry has no answer to bound it, so the run allows this
// long after the watcher saw the commit; a cancel's answer bounds its release exactly.
const reviveSlack = time.Second

// lapseSlack widens the moment a hold's expires_at passes (Postgres's timestamp, moved onto
// the harness's clock) into an interval: one machine, one wall clock, read at different
// instants — as the sale window's moments are widened.
const lapseSlack = 20 * time.Millisecond

// hold is one held order's row, one item of it.
type hold struct {
	id, customer, status string
	expires              time.Time
	decided              *time.Time
	product, quantity    int64
}

// HoldOps reads the holds from Postgres once every replica has stopped (end, on the
// recorder's clock started at start) and returns the operations the model needs beside the
// clients' (model/holds.go): for each cancelled or expired hold, the release of each item's
// units on its product and, for an expired one, its expiry — both placed between decided_at
// (less the clock slack) and the first moment it was seen released (seen, from a
// ReleaseWatcher, plus reviveSlack; the end of the run when it was not), and no later than the
// first cancel answered "cancelled"; and for every hold, the moment its expires_at passed
// (widened by lapseSlack) and its final status. It marks the clients' orders
// that are holds (model.Op.Hold), so that History starts their partitions.
//
// Run it after Orders, which gives the orders whose outcome was unknown their ids.
//
// It also compares what each confirm and cancel was told with the status Postgres holds: the
// model finds the same contradictions, this names them.
func HoldOps(ctx context.Context, pool *pgxpool.Pool, ops []*model.Op, start time.Time, seen map[string]time.Duration,
	end time.Duration) ([]*model.Op, []Invariant, error) {
	has, err := hasHolds(ctx, pool)
	if err != nil || !has {
		return nil, nil, err
	}
	rows, _ := pool.Query(ctx, `SELECT o.id::text, o.customer_id, o.status, o.expires_at, o.decided_at, i.product_id, i.quantity
		FROM orders o JOIN order_items i ON i.order_id = o.id WHERE o.expires_at IS NOT NULL ORDER BY o.id, i.product_id`)
	items := map[string][]hold{}
	var ids []string
	var r hold
	if _, err := pgx.ForEachRow(rows, []any{&r.id, &r.customer, &r.status, &r.expires, &r.decided, &r.product, &r.quantity}, func() error {
		if _, ok := items[r.id]; !ok {
			ids = append(ids, r.id)
		}
		items[r.id] = append(items[r.id], r)
		return nil
	}); err != nil {
		return nil, nil, fmt.Errorf("read holds: %w", err)
	}
	// The clients' orders by id, and the earliest answer "cancelled" for each hold.
	orders := map[string]*model.Op{}
	cancelled := map[string]time.Duration{}
	var mismatched, tooEarly []string
	for _, p := range ops {
		switch p.In.Kind {
		case model.KindOrder:
			if p.OrderID == "" {
				continue
			}
			_, isHold := items[p.OrderID]
			switch {
			case p.Out.Outcome == model.Held && !isHold:
				mismatched = append(mismatched, fmt.Sprintf("order %s answered held has no expires_at", p.OrderID))
			case p.Out.Outcome == model.Confirmed && isHold:
				mismatched = append(mismatched, fmt.Sprintf("order %s answered confirmed is a hold", p.OrderID))
			}
			if isHold {
				p.Hold = true
				orders[p.OrderID] = p
			}
		case model.KindCancel:
			if p.Out.Outcome == model.Cancelled {
				if at, ok := cancelled[p.In.Hold]; !ok || p.Return < at {
					cancelled[p.In.Hold] = p.Return
				}
			}
		}
	}
	// What each confirm and cancel was told, against the status in Postgres.
	told := map[model.Outcome]string{model.Confirmed: "confirmed", model.HoldExpired: "expired", model.OrderCancelled: "cancelled",
		model.Cancelled: "cancelled", model.Expired: "expired", model.OrderConfirmed: "confirmed"}
	for _, p := range ops {
		if p.In.Kind != model.KindConfirm && p.In.Kind != model.KindCancel {
			continue
		}
		want, ok := told[p.Out.Outcome]
		if !ok {
			continue // unknown or refused: the model weighs it
		}
		got := "missing"
		if its := items[p.In.Hold]; len(its) > 0 {
			got = its[0].status
		}
		if got != want {
			verb := map[model.Kind]string{model.KindConfirm: "confirm", model.KindCancel: "cancel"}[p.In.Kind]
			mismatched = append(mismatched, fmt.Sprintf("%s of %s answered %s, Postgres says %s", verb, p.In.Hold, p.Out.Outcome, got))
		}
	}
	var out []*model.Op
	add := func(in model.Input, o model.Output, call, ret time.Duration) {
		out = append(out, &model.Op{ID: -1000 - len(out), Client: -1, In: in, Out: o, Invoke: call, Return: ret})
	}
	released := 0
	for _, id := range ids {
		its := items[id]
		h := its[0]
		order, ours := orders[id]
		if ours && order.Out.Outcome != model.Held && order.Out.Outcome != model.Happened && order.Out.Outcome != model.Confirmed {
			ours = false // refused or never happened by the client's account: Orders reports it
		}
		if !ours {
			continue
		}
		if h.status == "cancelled" || h.status == "expired" {
			released++
			lo, hi := end, end
			if h.decided != nil {
				lo = h.decided.Sub(start) - clockSlack
			}
			if at, ok := seen[id]; ok && at+reviveSlack < hi {
				hi = at + reviveSlack
			}
			if at, ok := cancelled[id]; ok && at < hi {
				hi = at
			}
			if hi < lo {
				tooEarly = append(tooEarly, fmt.Sprintf("order %s %s at %.3fs, seen or answered released at %.3fs", id, h.status, lo.Seconds(), hi.Seconds()))
				hi = lo
			}
			for _, it := range its {
				add(model.Input{Kind: model.KindRelease, Product: it.product, Quantity: it.quantity, Customer: h.customer, Hold: id},
					model.Output{Outcome: model.Confirmed}, lo, hi)
			}
			if h.status == "expired" && order.Out.Outcome != model.Confirmed {
				add(model.Input{Kind: model.KindExpire, Product: h.product, Hold: id}, model.Output{Outcome: model.Confirmed}, lo, hi)
			}
		}
		if order.Out.Outcome != model.Confirmed {
			at := h.expires.Sub(start)
			add(model.Input{Kind: model.KindLapse, Product: h.product, Hold: id}, model.Output{Outcome: model.Confirmed}, at-lapseSlack, at+lapseSlack)
			add(model.Input{Kind: model.KindStatus, Product: h.product, Hold: id},
				model.Output{Outcome: model.Confirmed, Status: model.HoldStatus(h.status)}, end+1, end+2)
		}
	}
	return out, []Invariant{
		{Name: "every confirm and cancel was told what Postgres holds; every held answer is a hold", OK: len(mismatched) == 0,
			Detail: fmt.Sprintf("%d holds, %d of the clients' released; ", len(ids), released) + summarise(len(mismatched), "contradictions", mismatched)},
		{Name: "every release committed by the time it was seen or a cancel was answered", OK: len(tooEarly) == 0,
			Detail: summarise(len(tooEarly), "released after they were seen released", tooEarly)},
	}, nil
}
