package stock_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestCountersMatchTheAudit sells with holds over two replicas — some confirmed, some
// cancelled, some left to expire, some held still, a product sold at once beside them, and a
// refusal of each cause — and holds the counters, summed over the replicas as a dashboard
// sums them, to the audit's figures (issue #34, item 2: "sold" counted the held units, and
// "rejected" three causes at once).
func TestCountersMatchTheAudit(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	replicas := []*replica{a, b}
	ctx := context.Background()

	long := createHeld(t, a, "counted-long", 20, time.Hour, 0)
	short := createHeld(t, a, "counted-short", 5, time.Second, 0)
	now := createProduct(t, a, "counted-now", 4)

	// Six holds of long, alternating replicas, of 1, 2, 1, 2, 1, 2 units: 9 units held.
	var held []stock.Order
	for i := range 6 {
		held = append(held, mustHold(t, replicas[i%2], "buyer"+strconv.Itoa(i), long, int64(1+i%2)))
	}
	// Confirmed: 1+2+1 units (on a); cancelled: 2+1 (on b); 2 units held still.
	for _, o := range held[:3] {
		if _, err := a.svc.Confirm(ctx, o.ID, ""); err != nil {
			t.Fatalf("confirm: %v", err)
		}
	}
	for _, o := range held[3:5] {
		if _, err := b.svc.Cancel(ctx, o.ID, ""); err != nil {
			t.Fatalf("cancel: %v", err)
		}
	}
	// Two holds of short (3 units) left to expire; b's sweep ends them.
	var expiring []stock.Order
	for i, qty := range []int64{2, 1} {
		expiring = append(expiring, mustHold(t, replicas[i], "late"+strconv.Itoa(i), short, qty))
	}
	until(t, "the short holds' time", func() bool { return pgNow(t, a).After(*expiring[1].ExpiresAt) })
	if n, err := b.svc.ExpireDue(ctx, nil, 0, 100); err != nil || n != 2 {
		t.Fatalf("sweep: %d, %v; want the 2 holds expired", n, err)
	}

	// Sold at once: 3 units of now, then an order of 2 refused sold out.
	if _, err := a.svc.PlaceOrder(ctx, order("cash", one(now, 3))); err != nil {
		t.Fatalf("order: %v", err)
	}
	if _, err := b.svc.PlaceOrder(ctx, order("cash2", one(now, 2))); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("order past the stock = %v, want sold out", err)
	}
	// A refusal of each of the causes "rejected" used to count together.
	if _, err := a.svc.PlaceOrder(ctx, order("x", one(now, 0))); !errors.Is(err, stock.ErrInvalid) {
		t.Fatalf("order of 0 = %v, want invalid", err)
	}
	if _, err := a.svc.PlaceOrder(ctx, order("x", one(now+1_000_000, 1))); !errors.Is(err, stock.ErrProductNotFound) {
		t.Fatalf("order of no product = %v, want not found", err)
	}
	keyed := order("y", one(now, 1))
	keyed.IdempotencyKey = "counted-key"
	if _, err := b.svc.PlaceOrder(ctx, keyed); err != nil {
		t.Fatalf("keyed order: %v", err)
	}
	keyed.Items = []stock.Item{one(now, 2)}
	if _, err := b.svc.PlaceOrder(ctx, keyed); !errors.Is(err, stock.ErrIdempotencyKeyReused) {
		t.Fatalf("key reused = %v, want refused", err)
	}

	// Postgres's listing filters by status: buyer3's order was cancelled.
	for st, want := range map[string]int{"cancelled": 1, "held": 0} {
		page, err := a.svc.CustomerOrders(ctx, stock.OrdersQuery{CustomerID: "buyer3", Limit: 10, Statuses: []string{st}})
		if err != nil || len(page.Orders) != want {
			t.Errorf("buyer3's %s orders = %+v, %v; want %d", st, page.Orders, err, want)
		}
	}

	sum := func(name, label, value string) float64 {
		var n float64
		for _, r := range replicas {
			n += testenv.Metric(t, r.registry, name, label, value)
		}
		return n
	}
	var audit stock.Audit
	for _, id := range []int64{long, short, now} {
		au := mustAudit(t, a, id)
		if !au.Consistent() {
			t.Fatalf("audit of %d: %+v", id, au)
		}
		audit.Sold += au.Sold
		audit.Held += au.Held
	}
	if audit.Sold != 4+4 || audit.Held != 2 {
		t.Fatalf("audits: sold %d, held %d; want 8 and 2", audit.Sold, audit.Held)
	}
	units := func(status string) float64 { return sum("stocksvc_units_total", "status", status) }
	if got := units("confirmed"); got != float64(audit.Sold) {
		t.Errorf("units confirmed = %v, want the audits' sold, %d", got, audit.Sold)
	}
	for status, want := range map[string]float64{"held": 9 + 3, "cancelled": 3, "expired": 3} {
		if got := units(status); got != want {
			t.Errorf("units %s = %v, want %v", status, got, want)
		}
	}
	// Held now: every unit held, less those whose hold ended (the confirmed ones of holds are
	// the confirmed units less those sold at once: 3 of now, 1 of the keyed order).
	if got := units("held") - units("cancelled") - units("expired") - (units("confirmed") - 4); got != float64(audit.Held) {
		t.Errorf("units held now by the counters = %v, want the audits' held, %d", got, audit.Held)
	}
	for outcome, want := range map[string]float64{"confirmed": 2, "held": 8, "sold_out": 1, "invalid": 1,
		"product_not_found": 1, "key_reused": 1} {
		if got := sum("stocksvc_orders_total", "outcome", outcome); got != want {
			t.Errorf("orders %s = %v, want %v", outcome, got, want)
		}
	}
	for outcome, want := range map[string]float64{"held": 8, "confirmed": 3, "cancelled": 2, "expired": 2} {
		if got := sum("stocksvc_holds_total", "outcome", outcome); got != want {
			t.Errorf("holds %s = %v, want %v", outcome, got, want)
		}
	}

	// The stock left of the products on sale, the same on each replica; none for the product
	// sold out before the gauge was first read.
	for _, r := range replicas {
		for _, id := range []int64{long, short} {
			want := mustAudit(t, a, id).Stock
			if got := testenv.Metric(t, r.registry, "stocksvc_product_stock", "product_id", strconv.FormatInt(id, 10)); got != float64(want) {
				t.Errorf("stock left of %d = %v, want the audit's %d", id, got, want)
			}
		}
		if got := testenv.MetricOr(t, r.registry, "stocksvc_product_stock", -1, "product_id", strconv.FormatInt(now, 10)); got != -1 {
			t.Errorf("stock left of the product sold out = %v, want no series", got)
		}
	}
}
