package async

import (
	"context"
	"errors"
	"testing"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// A drain that decides an order alone, fails unexpectedly and is paused before it counts the
// failure loses its line (the lease), and another drain reads the order and begins deciding
// it. Whichever of the two then stores a decision first, the order has exactly one: given up
// first (the paused drain resumes and rejects it, internal), the other drain's purchase replays
// that rejection and sells nothing; bought first, the late rejection is not stored and the
// purchase is copied. The interleavings are made by calling the two drains' steps in turn.
func TestGivenUpOrderIsNotSoldByAnotherDrain(t *testing.T) {
	pool := testenv.Pool(t)
	svc := stock.NewService(stockpg.New(pool), &stocktest.LocalLocker{}, stock.Config{}, nil)
	t.Cleanup(svc.Close)
	q, err := New(pool, svc, Config{MaxAttempts: 1})
	if err != nil {
		t.Fatalf("new queue: %v", err)
	}
	ctx := context.Background()
	p, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: "given-up", Name: "given-up", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	accept := func(customer string) stockpg.PendingOrder {
		t.Helper()
		prepared, err := svc.Prepare(stock.OrderRequest{CustomerID: customer, Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}})
		if err != nil {
			t.Fatal(err)
		}
		acc, err := q.Accept(ctx, prepared)
		if err != nil {
			t.Fatalf("accept: %v", err)
		}
		return stockpg.PendingOrder{ID: acc.Order.ID, CustomerID: customer, Items: acc.Order.Items}
	}
	unexpected := errors.New("an error nobody expected")

	// Given up first: the paused drain resumes at its last attempt; then the drain that read
	// the order before that decides it.
	x := accept("cx")
	if err := q.fail(ctx, x, unexpected); err != nil {
		t.Fatalf("give up: %v, want nil (rejected at the cap)", err)
	}
	if err := q.decide(ctx, []stockpg.PendingOrder{x}); err != nil {
		t.Fatalf("the other drain's round: %v", err)
	}
	found, err := q.Find(ctx, x.ID)
	if err != nil || found.Confirmed != nil || found.Order.Status != StatusRejected || found.Order.Rejection == nil ||
		found.Order.Rejection.Reason != ReasonInternal {
		t.Errorf("order given up, then decided by another drain: Find = %+v (confirmed %+v), %v; want rejected, internal, no order",
			found.Order, found.Confirmed, err)
	}
	if d := svc.DecideAccepted(ctx, []stock.Accepted{{ID: x.ID, CustomerID: x.CustomerID, Items: x.Items}}); !errors.Is(d[0].Err, stock.ErrGivenUp) {
		t.Errorf("deciding it again = %+v, want stock.ErrGivenUp", d[0])
	}

	// Bought first: the other drain's purchase stores the decision (its copy not made yet);
	// then the paused drain resumes and tries to give the order up.
	y := accept("cy")
	if d := svc.DecideAccepted(ctx, []stock.Accepted{{ID: y.ID, CustomerID: y.CustomerID, Items: y.Items}}); d[0].Err != nil {
		t.Fatalf("the other drain's purchase: %v", d[0].Err)
	}
	if err := q.fail(ctx, y, unexpected); err != nil {
		t.Fatalf("give up after the purchase: %v, want nil (decided after all)", err)
	}
	if err := q.decide(ctx, []stockpg.PendingOrder{y}); err != nil {
		t.Fatalf("the copy: %v", err)
	}
	if found, err := q.Find(ctx, y.ID); err != nil || found.Confirmed == nil {
		t.Errorf("order bought, then given up late: Find = %+v, %v; want the confirmed order", found, err)
	}
	if a, err := svc.Audit(ctx, p.ID); err != nil || a.Sold != 1 || !a.Consistent() {
		t.Errorf("audit = %+v, %v; want 1 sold (the order bought first), consistent", a, err)
	}
}
