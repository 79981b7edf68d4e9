package async_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// Orders accepted for later meet the sale rules when their turn comes, through the same
// purchase path: a customer's orders beyond the limit, or beyond the cap on what they hold, and
// orders decided after the sale ended, are rejected with the rule's reason; nothing beyond the
// limit is sold, nothing beyond the cap held.
func TestAcceptedOrdersMeetTheSaleRules(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{round: 4})
	ctx := context.Background()
	p, err := r.svc.CreateProduct(ctx, stock.NewProduct{SKU: "async-limited", Name: "x", Stock: 10, Sale: stock.SaleRules{MaxPerCustomer: 2}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	ended, err := r.svc.CreateProduct(ctx, stock.NewProduct{SKU: "async-ended", Name: "y", Stock: 10})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	held, err := r.svc.CreateProduct(ctx, stock.NewProduct{SKU: "async-held", Name: "z", Stock: 10,
		Sale: stock.SaleRules{HoldFor: time.Hour, MaxHeldPerCustomer: 2}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	var greedy, hoards []uuid.UUID
	for range 5 {
		greedy = append(greedy, r.accept(t, "greedy", "", one(p.ID, 1)).Order.ID)
		hoards = append(hoards, r.accept(t, "hoarder", "", one(held.ID, 1)).Order.ID)
	}
	late := r.accept(t, "late", "", one(ended.ID, 1)).Order.ID
	if _, err := r.svc.UpdateSale(ctx, ended.ID, stock.SaleChange{EndNow: true}); err != nil {
		t.Fatalf("end the sale: %v", err)
	}
	r.start(t)
	got := r.awaitDecided(t, slices.Concat(greedy, hoards, []uuid.UUID{late}), 20*time.Second)
	for i, id := range hoards {
		o := got[id]
		switch {
		case i < 2 && o.Status == async.StatusRejected:
			t.Errorf("hoarder's order %d = %+v, want it decided within the cap", i, o.Rejection)
		case i >= 2 && (o.Status != async.StatusRejected || o.Rejection == nil || o.Rejection.Reason != async.ReasonHoldLimit):
			t.Errorf("hoarder's order %d = %s %+v, want rejected hold-limit", i, o.Status, o.Rejection)
		}
	}
	if a := mustAudit(t, r, held.ID); a.Held != 2 {
		t.Errorf("audit %+v, want 2 held by the one customer", a)
	}
	for i, id := range greedy {
		o := got[id]
		switch {
		case i < 2 && o.Status != async.StatusConfirmed:
			t.Errorf("greedy order %d is %s, want confirmed (within the limit)", i, o.Status)
		case i >= 2 && (o.Status != async.StatusRejected || o.Rejection == nil || o.Rejection.Reason != async.ReasonCustomerLimit):
			t.Errorf("greedy order %d = %s %+v, want rejected customer-limit", i, o.Status, o.Rejection)
		}
	}
	if o := got[late]; o.Status != async.StatusRejected || o.Rejection == nil || o.Rejection.Reason != async.ReasonSaleEnded {
		t.Errorf("the order decided after the end = %s %+v, want rejected sale-ended", o.Status, o.Rejection)
	}
	if a := mustAudit(t, r, p.ID); a.Sold != 2 {
		t.Errorf("audit %+v, want 2 sold to the one customer", a)
	}
}
