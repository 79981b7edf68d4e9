package async_test

import (
	"context"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// A hold nobody pays for ends by itself — its River job, or the sweep behind it — and its units
// are sold again: the replica only had to be running.
func TestUnpaidHoldExpiresByItself(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	r.svc.UseHoldScheduler(r.queue)
	r.start(t)
	ctx := context.Background()
	p, err := r.svc.CreateProduct(ctx, stock.NewProduct{SKU: "unpaid", Name: "x", Stock: 1, Sale: stock.SaleRules{HoldFor: time.Second}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	res, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "jo", Items: []stock.Item{one(p.ID, 1)}})
	if err != nil || res.Order.Status != stock.OrderStatusHeld {
		t.Fatalf("order = %+v, %v; want held", res, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		o, err := r.svc.Order(ctx, res.Order.ID)
		if err != nil {
			t.Fatalf("read the order: %v", err)
		}
		if o.Status == stock.OrderStatusExpired {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hold is %s 14 s after its time, want expired", o.Status)
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if a := mustAudit(t, r, p.ID); !a.Consistent() || a.Stock != 1 || a.Held != 0 {
		t.Errorf("audit %+v, want the unit back", a)
	}
	if again, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "kim", Items: []stock.Item{one(p.ID, 1)}}); err != nil || again.Order.Status != stock.OrderStatusHeld {
		t.Errorf("the next buyer = %+v, %v; want the unit held for them", again, err)
	}
}
