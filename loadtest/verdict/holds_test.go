package verdict

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// holdsSchema is issue #21's schema as its contract states it, for a database whose
// migrations predate it; with the holds migration applied it changes nothing the checks read.
const holdsSchema = `
	ALTER TABLE orders DROP CONSTRAINT IF EXISTS orders_status_check;
	ALTER TABLE orders ADD CONSTRAINT orders_status_check CHECK (status IN ('confirmed', 'held', 'cancelled', 'expired')),
	                   ADD COLUMN IF NOT EXISTS expires_at timestamptz NULL,
	                   ADD COLUMN IF NOT EXISTS decided_at timestamptz NULL`

// insertHold writes an order of qty units of product with the given status, created at
// created, expiring at expires and decided at decided (nil: not decided), and moves the
// product's stock as the service would: down by qty when taken, up by qty when released.
func insertHold(t *testing.T, pool *pgxpool.Pool, product, qty int64, status string, created, expires time.Time, decided *time.Time) string {
	t.Helper()
	ctx := context.Background()
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO orders (id, customer_id, status, created_at, expires_at, decided_at)
		VALUES (gen_random_uuid(), 'c-' || gen_random_uuid(), $1, $2, $3, $4) RETURNING id::text`, status, created, expires, decided).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $2, $3)`, id, product, qty); err != nil {
		t.Fatal(err)
	}
	back := int64(0)
	if status == "cancelled" || status == "expired" {
		back = qty
	}
	if status == "held" { // counted as the selling statement counts it (issue #31)
		if _, err := pool.Exec(ctx, `INSERT INTO customer_holds (product_id, customer_id, held, max_held)
			SELECT $1, customer_id, $2, $2 FROM orders WHERE id = $3`, product, qty, id); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `UPDATE products SET stock = stock - $2 + $3 WHERE id = $1`, product, qty, back); err != nil {
		t.Fatal(err)
	}
	return id
}

func byName(invs []Invariant) map[string]Invariant {
	out := map[string]Invariant{}
	for _, inv := range invs {
		out[inv.Name] = inv
	}
	return out
}

// TestHolds: the holds' SQL verdict in a real database — a run that kept every rule, then one
// that broke each: a confirm after the expiry, an early expiry, a hold the sweep left behind,
// and units given back twice.
func TestHolds(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, holdsSchema); err != nil {
		t.Fatal(err)
	}
	var product int64
	var now time.Time
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('H', 'h', 10, 10) RETURNING id, now()`).
		Scan(&product, &now); err != nil {
		t.Fatal(err)
	}
	ago := func(d time.Duration) time.Time { return now.Add(-d) }
	at := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	insertHold(t, pool, product, 2, "confirmed", ago(time.Minute), ago(50*time.Second), at(55*time.Second))
	insertHold(t, pool, product, 1, "expired", ago(time.Minute), ago(50*time.Second), at(49*time.Second))
	insertHold(t, pool, product, 3, "cancelled", ago(time.Minute), ago(50*time.Second), at(58*time.Second))
	insertHold(t, pool, product, 1, "held", ago(time.Second), now.Add(time.Minute), nil)
	// Held past its expiry, but within the grace: the sweep may not have come yet.
	insertHold(t, pool, product, 1, "held", ago(20*time.Second), ago(10*time.Second), nil)
	// A final order (no hold) beside them.
	insertOrder(t, pool, "plain", product, 1, ago(time.Minute), "")
	if _, err := pool.Exec(ctx, `UPDATE products SET stock = stock - 1 WHERE id = $1`, product); err != nil {
		t.Fatal(err)
	}

	ledgers, byID, err := Ledgers(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if l := byID[product]; l.Stock != 5 || l.Held != 2 || l.Sold != 3 || l.Received != 10 {
		t.Errorf("ledger = %+v, want stock 5, held 2, sold 3 of 10", l)
	}
	holds, err := Holds(ctx, pool, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if len(holds) != 6 {
		t.Fatalf("Holds returned %d invariants, want 6", len(holds))
	}
	for _, inv := range append(ledgers, holds...) {
		if !inv.OK {
			t.Errorf("a clean run: %s failed: %s", inv.Name, inv.Detail)
		}
	}

	// Now break each rule.
	insertHold(t, pool, product, 1, "confirmed", ago(time.Minute), ago(50*time.Second), at(40*time.Second))
	insertHold(t, pool, product, 1, "expired", ago(time.Minute), ago(50*time.Second), at(51*time.Second))
	insertHold(t, pool, product, 1, "held", ago(2*time.Minute), ago(time.Minute), nil)
	if _, err := pool.Exec(ctx, `UPDATE products SET stock = stock + 1 WHERE id = $1`, product); err != nil { // a release applied twice
		t.Fatal(err)
	}
	// A release that gave the units back but left them counted, and a customer above the cap.
	if _, err := pool.Exec(ctx, `
		WITH c AS (SELECT customer_id FROM customer_holds WHERE product_id = $1 LIMIT 1)
		UPDATE customer_holds h SET held = held + 1, max_held = max_held + 1 FROM c WHERE h.product_id = $1 AND h.customer_id = c.customer_id`, product); err != nil {
		t.Fatal(err)
	}
	insertHold(t, pool, product, 2, "held", ago(time.Second), now.Add(time.Minute), nil)
	if _, err := pool.Exec(ctx, `UPDATE products SET max_held_per_customer = 1 WHERE id = $1`, product); err != nil {
		t.Fatal(err)
	}
	ledgers, _, err = Ledgers(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	holds, err = Holds(ctx, pool, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := byName(append(ledgers, holds...))
	want := map[string]string{
		"conservation: received = stock + held + sold (released units back once)":      "1 of 1 products off",
		"no hold confirmed at or after its expiry (Postgres's clock)":                  "1 confirmed after the expiry",
		"no hold expired before its expires_at":                                        "1 expired early",
		"no order still held 30s after its expires_at (the expiry and the sweep work)": "1 left held",
		"customer_holds.held = the customer's held units":                              "1 counts off",
		"no customer holds more than the cap on held units":                            "customer c-",
	}
	for name, detail := range want {
		inv, ok := got[name]
		if !ok || inv.OK || !strings.Contains(inv.Detail, detail) {
			t.Errorf("%s: %+v; want failed with %q", name, inv, detail)
		}
	}
	if inv := got["every hold has a status (held, confirmed, cancelled, expired) and a decided one its decided_at"]; !inv.OK {
		t.Errorf("statuses: %s", inv.Detail)
	}
}

// TestHoldOps: the operations the model gets from Postgres — a release (and an expiry) between
// decided_at and the moment the run saw it, no later than a cancel's answer; every hold's
// final status — and the clients' answers compared with the statuses.
func TestHoldOps(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, holdsSchema); err != nil {
		t.Fatal(err)
	}
	var product int64
	var now time.Time
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('O', 'o', 10, 10) RETURNING id, now()`).
		Scan(&product, &now); err != nil {
		t.Fatal(err)
	}
	start := now.Add(-time.Minute) // the recorder's start
	after := func(d time.Duration) time.Time { return start.Add(d) }
	ptr := func(t time.Time) *time.Time { return &t }
	expired := insertHold(t, pool, product, 2, "expired", after(time.Second), after(4*time.Second), ptr(after(5*time.Second)))
	cancelled := insertHold(t, pool, product, 1, "cancelled", after(time.Second), after(4*time.Second), ptr(after(2*time.Second)))
	confirmed := insertHold(t, pool, product, 1, "confirmed", after(time.Second), after(4*time.Second), ptr(after(3*time.Second)))
	s := time.Second
	order := func(id string, qty int64) *model.Op {
		return &model.Op{In: model.Input{Kind: model.KindOrder, Product: product, Quantity: qty}, Out: model.Output{Outcome: model.Held},
			OrderID: id, Invoke: s, Return: s + 10*time.Millisecond}
	}
	on := func(kind model.Kind, id string, oc model.Outcome, call, ret time.Duration) *model.Op {
		return &model.Op{In: model.Input{Kind: kind, Product: product, Hold: id}, Out: model.Output{Outcome: oc}, Invoke: call, Return: ret}
	}
	ops := []*model.Op{order(expired, 2), order(cancelled, 1), order(confirmed, 1),
		on(model.KindCancel, cancelled, model.Cancelled, 2*s-100*time.Millisecond, 2*s+100*time.Millisecond),
		on(model.KindConfirm, confirmed, model.Confirmed, 3*s-100*time.Millisecond, 3*s+100*time.Millisecond),
		on(model.KindConfirm, expired, model.HoldExpired, 6*s, 6*s+100*time.Millisecond),
	}
	end := 30 * s
	seen := map[string]time.Duration{expired: 5*s + 300*time.Millisecond}
	extra, invs, err := HoldOps(ctx, pool, ops, start, seen, end)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invs {
		if !inv.OK {
			t.Errorf("%s: %s", inv.Name, inv.Detail)
		}
	}
	for _, p := range ops[:3] {
		if !p.Hold {
			t.Errorf("order %s not marked a hold", p.OrderID)
		}
	}
	type key struct {
		kind model.Kind
		hold string
	}
	got := map[key]*model.Op{}
	for _, p := range extra {
		got[key{p.In.Kind, p.In.Hold}] = p
	}
	if len(extra) != 9 {
		t.Errorf("%d operations, want 9 (two releases, one expiry, three lapses, three statuses): %+v", len(extra), extra)
	}
	check := func(k key, call, ret time.Duration) {
		t.Helper()
		p, ok := got[k]
		if !ok {
			t.Errorf("no %v of %s", k.kind, k.hold)
			return
		}
		if p.Invoke != call || p.Return != ret {
			t.Errorf("%v of %s over [%v, %v], want [%v, %v]", k.kind, k.hold, p.Invoke, p.Return, call, ret)
		}
	}
	check(key{model.KindRelease, expired}, 5*s-clockSlack, 5*s+300*time.Millisecond+reviveSlack)
	check(key{model.KindExpire, expired}, 5*s-clockSlack, 5*s+300*time.Millisecond+reviveSlack)
	// Not seen by a watcher: its cancel's answer bounds it.
	check(key{model.KindRelease, cancelled}, 2*s-clockSlack, 2*s+100*time.Millisecond)
	check(key{model.KindStatus, confirmed}, end+1, end+2)
	check(key{model.KindLapse, confirmed}, 4*s-lapseSlack, 4*s+lapseSlack)
	if st := got[key{model.KindStatus, expired}]; st == nil || st.Out.Status != model.StatusExpired {
		t.Errorf("final status of the expired hold: %+v", st)
	}
	// The whole history, with the product's creation and final stock, is linearizable.
	all := append([]*model.Op{{In: model.Input{Kind: model.KindCreate, Product: product}, Out: model.Output{Outcome: model.Confirmed, Stock: 10}, Return: 1}}, ops...)
	all = append(all, extra...)
	all = append(all, &model.Op{In: model.Input{Kind: model.KindRead, Product: product}, Final: true, Out: model.Output{Outcome: model.Confirmed, Stock: 9},
		Invoke: end + 3, Return: end + 4})
	for i, p := range all {
		p.Client = i
	}
	if res, err := model.Check("holds", model.New(model.Options{}), model.History(all, model.HistoryOptions{End: end}), 10*time.Second, nil, "", ""); err != nil || res.Result != porcupine.Ok {
		t.Errorf("check = %v, %v; want linearizable", res.Result, err)
	}
	// Had the service given a released hold's units back twice, the final stock would show one
	// release more than the orders table holds: not linearizable.
	all[len(all)-1].Out.Stock = 11
	if res, err := model.Check("holds", model.New(model.Options{}), model.History(all, model.HistoryOptions{End: end}), 10*time.Second, nil, "", ""); err != nil || res.Result != porcupine.Illegal {
		t.Errorf("check with a unit released twice = %v, %v; want a violation", res.Result, err)
	}

	// A client told confirmed for a hold Postgres expired, and a release later than the
	// cancel that reported it.
	ops = append(ops, on(model.KindConfirm, expired, model.Confirmed, 6*s, 6*s+100*time.Millisecond),
		on(model.KindCancel, cancelled, model.Cancelled, s+100*time.Millisecond, s+200*time.Millisecond))
	_, invs, err = HoldOps(ctx, pool, ops, start, seen, end)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invs {
		if inv.OK {
			t.Errorf("%s passed: %s", inv.Name, inv.Detail)
		}
	}
}
