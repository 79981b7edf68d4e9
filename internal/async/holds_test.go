package async_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
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
	waitExpired(t, r, res.Order.ID, 15*time.Second)
	if a := mustAudit(t, r, p.ID); !a.Consistent() || a.Stock != 1 || a.Held != 0 {
		t.Errorf("audit %+v, want the unit back", a)
	}
	if again, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "kim", Items: []stock.Item{one(p.ID, 1)}}); err != nil || again.Order.Status != stock.OrderStatusHeld {
		t.Errorf("the next buyer = %+v, %v; want the unit held for them", again, err)
	}
}

// While River's leader is gone — it died without resigning, and its lease has not lapsed — no
// replica promotes the holds' jobs or runs the leader's sweep; each replica's own sweep ends a
// hold a few seconds past its time, and its units are sold again.
func TestHoldEndsWhileTheLeaderIsGone(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	r.svc.UseHoldScheduler(r.queue)
	ctx := context.Background()
	// The lease of a leader that died: River elects no other until it lapses.
	if _, err := r.pool.Exec(ctx, `INSERT INTO river_leader (elected_at, expires_at, leader_id)
		VALUES (now(), now() + interval '1 hour', 'a-replica-that-died')`); err != nil {
		t.Fatalf("claim the leadership for a dead replica: %v", err)
	}
	r.start(t)
	p, err := r.svc.CreateProduct(ctx, stock.NewProduct{SKU: "leaderless", Name: "x", Stock: 1, Sale: stock.SaleRules{HoldFor: time.Second}})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	res, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "jo", Items: []stock.Item{one(p.ID, 1)}})
	if err != nil || res.Order.Status != stock.OrderStatusHeld {
		t.Fatalf("order = %+v, %v; want held", res, err)
	}
	waitExpired(t, r, res.Order.ID, 20*time.Second)
	if v := testenv.MetricOr(t, r.registry, "stocksvc_holds_expired_without_leader_total", 0); v != 1 {
		t.Errorf("holds ended by a replica's own sweep = %v, want 1 (no job ran, no leader swept)", v)
	}
	if a := mustAudit(t, r, p.ID); !a.Consistent() || a.Stock != 1 || a.Held != 0 {
		t.Errorf("audit %+v, want the unit back", a)
	}
}

// waitExpired polls the order until it is expired, failing the test when it is not within
// the given time of now.
func waitExpired(t *testing.T, r *replica, id uuid.UUID, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(within)
	for {
		o, err := r.svc.Order(ctx, id)
		if err != nil {
			t.Fatalf("read the order: %v", err)
		}
		if o.Status == stock.OrderStatusExpired {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hold is %s %v later, want expired", o.Status, within)
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}
