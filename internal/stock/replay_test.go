package stock_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// TestReplayDoesNotRedoItsBatch: retries of an order that another replica confirmed land in a
// batch of new orders (twice, as a client that sent its key again after a timeout might). The
// batch writes once: the retries are left out of the write and answered with the stored order,
// which the write itself brought back, the new orders are confirmed, and only their units are
// taken. (A write that failed on the stored key and was decided again would write twice; one
// that did not bring the record back would read it.)
func TestReplayDoesNotRedoItsBatch(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	other := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	store := &countingStore{Store: w.store}
	r := memReplica(t, store, w.locker, stock.Config{})
	svc := r.svc
	id := createProduct(t, r, "replayed", 20)
	ctx := context.Background()

	stored := order("c", one(id, 2))
	stored.IdempotencyKey = "stored-" + uuid.NewString()
	first, err := other.svc.PlaceOrder(ctx, stored)
	if err != nil {
		t.Fatalf("the first attempt, on another replica: %v", err)
	}

	// A first order holds its batch between read and write while the others gather behind it.
	g := newGate()
	stock.SetAfterRead(svc, g.hook)
	var wg sync.WaitGroup
	wg.Go(func() {
		if _, err := svc.PlaceOrder(ctx, order("blocker", one(id, 1))); err != nil {
			t.Errorf("blocker: %v", err)
		}
	})
	<-g.reached
	fresh1, fresh2 := order("c1", one(id, 1)), order("c2", one(id, 1))
	fresh1.IdempotencyKey, fresh2.IdempotencyKey = "fresh-"+uuid.NewString(), "fresh-"+uuid.NewString()
	reqs := []stock.OrderRequest{stored, fresh1, stored, order("plain", one(id, 1)), fresh2}
	results := make([]stock.OrderResult, len(reqs))
	errs := make([]error, len(reqs))
	for i, req := range reqs {
		wg.Go(func() { results[i], errs[i] = svc.PlaceOrder(ctx, req) })
	}
	waitForCondition(t, func() bool { return stock.Waiting(svc, id) == len(reqs) })
	before := store.commits.Load()
	close(g.open)
	wg.Wait()

	for i, err := range errs {
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
	}
	for _, i := range []int{0, 2} {
		if !results[i].Replayed || results[i].Order.ID != first.Order.ID {
			t.Errorf("retry %d = %+v, want order %s replayed", i, results[i], first.Order.ID)
		}
	}
	for _, i := range []int{1, 3, 4} {
		if results[i].Replayed || results[i].Order.ID == uuid.Nil || results[i].Order.CreatedAt.IsZero() {
			t.Errorf("new order %d = %+v, want confirmed", i, results[i])
		}
	}
	if n := store.commits.Load() - before; n != 2 {
		t.Errorf("writes = %d, want 2: the blocker's, and one for the batch with the retries", n)
	}
	if n := store.records.Load(); n != 0 {
		t.Errorf("reads of records = %d, want none: the write returns the ones it met", n)
	}
	for _, i := range []int{0, 2} {
		if !results[i].Order.CreatedAt.Equal(first.Order.CreatedAt) || results[i].Order.CustomerID != first.Order.CustomerID ||
			len(results[i].Order.Items) != 1 || results[i].Order.Items[0] != first.Order.Items[0] {
			t.Errorf("retry %d = %+v, want exactly the first order %+v", i, results[i].Order, first.Order)
		}
	}
	if a := mustAudit(t, r, id); a.Sold != 2+1+3 || !a.Consistent() {
		t.Errorf("audit = %+v, want 6 sold: the first order, the blocker and three new ones", a)
	}
}
