package async_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// Orders accepted for later meet the sale rules when their turn comes, through the same
// purchase path: a customer's orders beyond the limit, and orders decided after the sale ended,
// are rejected with the rule's reason; nothing beyond the limit is sold.
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
	var greedy []uuid.UUID
	for range 5 {
		greedy = append(greedy, r.accept(t, "greedy", "", one(p.ID, 1)).Order.ID)
	}
	late := r.accept(t, "late", "", one(ended.ID, 1)).Order.ID
	if _, err := r.svc.UpdateSale(ctx, ended.ID, stock.SaleChange{EndNow: true}); err != nil {
		t.Fatalf("end the sale: %v", err)
	}
	r.start(t)
	got := r.awaitDecided(t, append(greedy, late), 20*time.Second)
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
