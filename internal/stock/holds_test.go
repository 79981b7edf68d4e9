package stock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// Holds on real Postgres and Redis: every tie between confirm, cancel and expiry has exactly
// one winner, and units go back once. What ends a hold frees its customer's cap, on the
// in-memory store.

func createHeld(t testing.TB, r *replica, sku string, units int64, hold time.Duration, limit int64) int64 {
	t.Helper()
	return createRuled(t, r, sku, units, stock.SaleRules{HoldFor: hold, MaxPerCustomer: limit})
}

func mustHold(t testing.TB, r *replica, customer string, id, qty int64) stock.Order {
	t.Helper()
	res, err := r.svc.PlaceOrder(context.Background(), order(customer, one(id, qty)))
	if err != nil {
		t.Fatalf("order: %v", err)
	}
	o := res.Order
	if o.Status != stock.OrderStatusHeld || o.ExpiresAt == nil {
		t.Fatalf("order %+v, want held with expires_at", o)
	}
	return o
}

// gateOrder takes order id's row lock in a transaction of its own, so that every statement
// that changes the order waits behind it; open commits it, and the waiting statements go in
// the order they queued.
func gateOrder(t *testing.T, r *replica, id uuid.UUID) (waiting func() int, open func()) {
	t.Helper()
	ctx := context.Background()
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM orders WHERE id = $1 FOR UPDATE`, id).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	// Waiting behind the gate, directly or behind one who does (a release takes its
	// products' rows before the order's, so a second release waits for the first).
	waiting = func() int {
		var n int
		err := r.pool.QueryRow(ctx, `
			WITH RECURSIVE behind(pid) AS (
			  SELECT a.pid FROM pg_stat_activity a WHERE $1 = ANY(pg_blocking_pids(a.pid))
			  UNION
			  SELECT a.pid FROM pg_stat_activity a, behind b WHERE b.pid = ANY(pg_blocking_pids(a.pid))
			) SELECT count(*) FROM behind`, pid).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	var once sync.Once
	open = func() {
		once.Do(func() {
			if err := tx.Commit(ctx); err != nil {
				t.Error(err)
			}
		})
	}
	// A test that fails before it opens the gate must not leave the statements behind it
	// waiting for ever (the pools would never close).
	t.Cleanup(open)
	return waiting, open
}

// until polls cond (a fact about Postgres or the clock, not a guess at timing) until it holds.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		if err := clock.Sleep(context.Background(), 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
}

// TestHoldTies: confirm queued before the expiry against the expiry; cancel against the expiry;
// two cancels on two replicas. Each tie has exactly one winner, and the stock and the
// customer's count say the same.
func TestHoldTies(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()

	t.Run("confirm queued before the expiry wins", func(t *testing.T) {
		id := createHeld(t, a, "tie-confirm", 5, time.Second, 2)
		o := mustHold(t, a, "cat", id, 2)
		waiting, open := gateOrder(t, a, o.ID)
		var wg sync.WaitGroup
		var confirmErr error
		var expired int
		wg.Go(func() { _, confirmErr = a.svc.Confirm(ctx, o.ID, "") })
		until(t, "the confirm to queue", func() bool { return waiting() == 1 })
		until(t, "the hold's time", func() bool { return pgNow(t, a).After(*o.ExpiresAt) })
		wg.Go(func() {
			n, err := b.svc.ExpireDue(ctx, []uuid.UUID{o.ID}, 0, 1)
			if err != nil {
				t.Errorf("expire: %v", err)
			}
			expired = n
		})
		until(t, "the expiry to queue", func() bool { return waiting() == 2 })
		open()
		wg.Wait()
		if confirmErr != nil || expired != 0 {
			t.Fatalf("confirm %v, expired %d: want the confirm (queued first) to win and the expiry to end nothing", confirmErr, expired)
		}
		if a := mustAudit(t, a, id); !a.Consistent() || a.Sold != 2 || a.Held != 0 || a.Stock != 3 {
			t.Errorf("audit %+v, want 2 sold, 3 left", a)
		}
	})

	t.Run("cancel against the expiry", func(t *testing.T) {
		id := createHeld(t, a, "tie-cancel", 5, time.Second, 0)
		o := mustHold(t, a, "dan", id, 3)
		waiting, open := gateOrder(t, a, o.ID)
		until(t, "the hold's time", func() bool { return pgNow(t, a).After(*o.ExpiresAt) })
		var wg sync.WaitGroup
		var cancelled stock.Order
		var cancelErr error
		wg.Go(func() { cancelled, cancelErr = a.svc.Cancel(ctx, o.ID, "") })
		wg.Go(func() {
			if _, err := b.svc.ExpireDue(ctx, []uuid.UUID{o.ID}, 0, 1); err != nil {
				t.Errorf("expire: %v", err)
			}
		})
		until(t, "both to queue", func() bool { return waiting() == 2 })
		open()
		wg.Wait()
		if cancelErr != nil || (cancelled.Status != stock.OrderStatusCancelled && cancelled.Status != stock.OrderStatusExpired) {
			t.Fatalf("cancel = %+v, %v; want cancelled or expired", cancelled, cancelErr)
		}
		if a := mustAudit(t, a, id); !a.Consistent() || a.Stock != 5 || a.Held != 0 || a.Sold != 0 {
			t.Errorf("audit %+v, want the 3 units back once: 5 in stock", a)
		}
	})

	t.Run("two cancels on two replicas", func(t *testing.T) {
		id := createHeld(t, a, "tie-twice", 4, time.Hour, 1)
		o := mustHold(t, a, "eve", id, 1)
		waiting, open := gateOrder(t, a, o.ID)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, r := range []*replica{a, b} {
			wg.Go(func() { _, errs[i] = r.svc.Cancel(ctx, o.ID, "") })
		}
		until(t, "both cancels to queue", func() bool { return waiting() == 2 })
		open()
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Errorf("cancel: %v", err)
			}
		}
		if a := mustAudit(t, a, id); !a.Consistent() || a.Stock != 4 {
			t.Errorf("audit %+v, want the unit back once: 4 in stock", a)
		}
		if units, counted := tables(t, a, id, "eve"); units != 1 || counted != 0 {
			t.Errorf("eve: %d units in orders, counted %d; want the cancelled order's unit counted no more", units, counted)
		}
		// Her limit is free again.
		mustHold(t, b, "eve", id, 1)
	})
}

// TestHoldLifecycle: a hold takes units at once and counts toward the limit; a confirm after
// the expiry is refused and never confirms; units put back are sold at once on another
// replica, whose view said sold out.
func TestHoldLifecycle(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	id := createHeld(t, a, "lifecycle", 1, time.Second, 1)
	o := mustHold(t, a, "fay", id, 1)
	if d := o.ExpiresAt.Sub(o.CreatedAt); d != time.Second {
		t.Errorf("held for %v, want 1s from created_at", d)
	}
	// Sold out while held, on both replicas' views.
	for _, r := range []*replica{a, b} {
		if _, err := r.svc.PlaceOrder(ctx, order("gus", one(id, 1))); !errors.Is(err, stock.ErrSoldOut) {
			t.Fatalf("order while held = %v, want sold out", err)
		}
	}
	if _, err := a.svc.PlaceOrder(ctx, order("fay", one(id, 1))); !errors.Is(err, stock.ErrCustomerLimit) && !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("fay's second order = %v, want refused", err)
	}
	// The views carry the hold, as they carry the other rules.
	for _, r := range []*replica{a, b} {
		if v, err := r.svc.Product(ctx, id); err != nil || v.HoldFor != time.Second || v.MaxPerCustomer != 1 {
			t.Errorf("the product's view (%s) = %+v, %v; want the hold and the limit", v.From, v.Product, err)
		}
	}
	until(t, "the hold's time", func() bool { return pgNow(t, a).After(*o.ExpiresAt) })
	if _, err := a.svc.Confirm(ctx, o.ID, ""); !errors.Is(err, stock.ErrHoldExpired) {
		t.Fatalf("confirm after the expiry = %v, want hold expired", err)
	}
	// The sweep (no scheduler here) ends it; b, whose view said sold out, sells the unit at once.
	if n, err := a.svc.ExpireDue(ctx, nil, 0, 100); err != nil || n < 1 {
		t.Fatalf("sweep: %d, %v", n, err)
	}
	got, err := b.svc.PlaceOrder(ctx, order("gus", one(id, 1)))
	if err != nil || got.Order.Status != stock.OrderStatusHeld {
		t.Fatalf("the next buyer after the expiry = %+v, %v; want the unit held for them", got, err)
	}
	if o, err := a.svc.Order(ctx, o.ID); err != nil || o.Status != stock.OrderStatusExpired || o.DecidedAt == nil {
		t.Errorf("the expired order reads %+v, %v", o, err)
	}
	if _, err := a.svc.Cancel(ctx, got.Order.ID, ""); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if _, err := a.svc.Confirm(ctx, got.Order.ID, ""); !errors.Is(err, stock.ErrOrderCancelled) {
		t.Errorf("confirm after a cancel = %v, want order cancelled", err)
	}
	if a := mustAudit(t, a, id); !a.Consistent() || a.Stock != 1 || a.Held != 0 || a.Sold != 0 {
		t.Errorf("audit %+v, want the unit back", a)
	}
}

// heldCount reads customer_holds: the units customer holds of product id by Postgres's count
// (-1 when it has no row).
func heldCount(t testing.TB, r *replica, id int64, customer string) int64 {
	t.Helper()
	var n int64
	err := r.pool.QueryRow(context.Background(), `
		SELECT coalesce((SELECT held FROM customer_holds WHERE product_id = $1 AND customer_id = $2), -1)`, id, customer).Scan(&n)
	if err != nil {
		t.Fatalf("read customer_holds: %v", err)
	}
	return n
}

// TestOneHoarderGetsTheCap is the race the cap on held units exists for (issue #31): a product
// of 30 units sold with a hold and no limit, one customer, thirty orders of one unit at once
// over three replicas — exactly the default cap, one full order (10), is held, in the answers
// and in the tables; every other order is refused for it. With the replicas' checks on, they
// refuse every one of them (Postgres's CHECK catches nothing); with them off, the CHECK on
// customer_holds alone keeps the hoarder to the cap.
func TestOneHoarderGetsTheCap(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("postgres alone %v", skip), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			var replicas []*replica
			for range 3 {
				replicas = append(replicas, w.replica(t, stock.DefaultDefense(), replicaOptions{views: true, skipRules: skip}))
			}
			id := createHeld(t, replicas[0], "hoard", 30, time.Hour, 0)
			const orders, limit = 30, stock.DefaultMaxQuantity
			var held, refused int
			for _, p := range atOnce(replicas, orders, order("hoarder", one(id, 1))) {
				var over *stock.HoldLimitError
				switch {
				case p.err == nil && p.res.Order.Status == stock.OrderStatusHeld:
					held++
				case errors.As(p.err, &over):
					refused++
					if over.Limit != limit || over.Held != limit || over.Requested != 1 {
						t.Errorf("refusal %+v, want cap %d, %d held, 1 requested", over, limit, limit)
					}
				default:
					t.Errorf("order: %+v, %v", p.res, p.err)
				}
			}
			if held != limit || refused != orders-limit {
				t.Errorf("held %d and refused for the cap %d, want %d and %d", held, refused, limit, orders-limit)
			}
			if n := heldCount(t, replicas[0], id, "hoarder"); n != limit {
				t.Errorf("customer_holds says the hoarder holds %d, want %d", n, limit)
			}
			if a := mustAudit(t, replicas[0], id); !a.Consistent() || a.Held != limit || a.Stock != 30-limit {
				t.Errorf("audit %+v, want %d held and consistent", a, limit)
			}
			var caught, counted float64
			for _, r := range replicas {
				caught += catches(t, r, stock.LayerHoldLimit)
				counted += testenv.Metric(t, r.registry, "stocksvc_orders_total", "outcome", "hold_limit")
			}
			if skip && caught == 0 {
				t.Errorf("with the checks off, Postgres's CHECK caught nothing: the race never reached it")
			}
			if !skip && caught != 0 {
				t.Errorf("with the checks on, Postgres's CHECK caught %v writes: a batch was decided without the cap", caught)
			}
			if counted != orders-limit {
				t.Errorf("stocksvc_orders_total{outcome=hold_limit} = %v across the replicas, want %d", counted, orders-limit)
			}
		})
	}
}

// TestHoldsEndedFreeTheCap: units held count against the cap until their hold ends — cancelled,
// confirmed or expired, each in the write that ends it (the store contract) — and then free it;
// confirmed units stay bought (the limit), but are no longer held.
func TestHoldsEndedFreeTheCap(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	a := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	p, err := a.svc.CreateProduct(ctx, stock.NewProduct{SKU: "cap", Name: "cap", Stock: 20,
		Sale: stock.SaleRules{HoldFor: time.Second, MaxHeldPerCustomer: 2, MaxPerCustomer: 5}})
	if err != nil || p.MaxHeldPerCustomer != 2 {
		t.Fatalf("create: %+v, %v", p, err)
	}
	id := p.ID
	full := func(r *replica, held int64) {
		t.Helper()
		_, err := r.svc.PlaceOrder(ctx, order("gil", one(id, 1)))
		var over *stock.HoldLimitError
		if !errors.As(err, &over) || over.Held != held || over.Limit != 2 {
			t.Fatalf("an order over the cap = %v, want hold-limit with %d held of 2", err, held)
		}
		if n := heldOf(t, w, id, "gil"); n != held {
			t.Fatalf("customer_holds: %d held, want %d", n, held)
		}
	}
	first, second := mustHold(t, a, "gil", id, 1), mustHold(t, b, "gil", id, 1)
	full(a, 2)

	if _, err := b.svc.Cancel(ctx, first.ID, ""); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	third := mustHold(t, a, "gil", id, 1)
	full(b, 2)

	if _, err := a.svc.Confirm(ctx, second.ID, ""); err != nil {
		t.Fatalf("confirm: %v", err)
	}
	fourth := mustHold(t, b, "gil", id, 1)
	full(a, 2)
	if units, bought := bought(t, w, id, "gil"); units != 4 || bought != 3 {
		t.Errorf("gil: %d units in orders, %d counted bought; want 4 and 3 (the cancelled one no more)", units, bought)
	}

	// The holds' time comes, on the store's clock.
	later := *fourth.ExpiresAt
	if third.ExpiresAt.After(later) {
		later = *third.ExpiresAt
	}
	w.store.SetClock(func() time.Time { return later })
	if n, err := b.svc.ExpireDue(ctx, nil, 0, 100); err != nil || n != 2 {
		t.Fatalf("sweep: %d, %v; want the two holds expired", n, err)
	}
	if n := heldOf(t, w, id, "gil"); n != 0 {
		t.Errorf("customer_holds after every hold ended: %d held, want 0", n)
	}
	mustHold(t, a, "gil", id, 2)
	// The limit still counts what was confirmed: 1 bought + 2 held of 5.
	if _, err := b.svc.PlaceOrder(ctx, order("gil", one(id, 1))); !errors.Is(err, stock.ErrHoldLimit) {
		t.Errorf("a third unit while 2 are held = %v, want hold-limit", err)
	}
}

// TestHoldingSaysWhenUnitsAreHeld: what a sold-out line tells its tickets — units may come
// back — is whether some order of the product is held, on Postgres as in memory.
func TestHoldingSaysWhenUnitsAreHeld(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	ctx := context.Background()
	id := createHeld(t, r, "holding", 1, time.Hour, 0)
	other := createRuled(t, r, "not-held", 1, stock.SaleRules{})
	store := stockpg.New(r.pool)
	holding := func() bool {
		t.Helper()
		held, err := store.Holding(ctx, id)
		if err != nil {
			t.Fatalf("holding: %v", err)
		}
		return held
	}
	if holding() {
		t.Fatal("holding before any order")
	}
	o := mustHold(t, r, "hal", id, 1)
	if _, err := r.svc.PlaceOrder(ctx, order("hal", one(other, 1))); err != nil {
		t.Fatal(err)
	}
	if !holding() {
		t.Fatal("not holding with an order held")
	}
	if held, err := store.Holding(ctx, other); err != nil || held {
		t.Errorf("the product sold at once holds: %v, %v", held, err)
	}
	if _, err := r.svc.Cancel(ctx, o.ID, ""); err != nil {
		t.Fatal(err)
	}
	if holding() {
		t.Error("holding once the hold was cancelled")
	}

	mem := stocktest.NewMemStore()
	svc := stock.NewService(mem, &stocktest.LocalLocker{}, stock.Config{}, nil)
	defer svc.Close()
	p, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: "m", Name: "m", Stock: 1, Sale: stock.SaleRules{HoldFor: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := mem.Holding(ctx, p.ID); held {
		t.Fatal("memory: holding before any order")
	}
	if _, err := svc.PlaceOrder(ctx, order("hal", one(p.ID, 1))); err != nil {
		t.Fatal(err)
	}
	if held, _ := mem.Holding(ctx, p.ID); !held {
		t.Error("memory: not holding with an order held")
	}
}

// TestHoldDecisionsCounted: a confirm and a cancel are the caller's to make only on their own
// orders (another customer's is not found, and changes nothing), each is counted once however
// often it is repeated, and the wrong one after the other is refused — on the in-memory store,
// with the views raised around the cancel.
func TestHoldDecisionsCounted(t *testing.T) {
	t.Parallel()
	r := newMemWorld().replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	id := createHeld(t, r, "counted", 10, time.Hour, 0)
	paid, gaveUp := mustHold(t, r, "ann", id, 2), mustHold(t, r, "bea", id, 3)
	stockOf := func() int64 {
		t.Helper()
		v, err := r.svc.Product(ctx, id)
		if err != nil {
			t.Fatalf("product: %v", err)
		}
		return v.Stock
	}
	decided := func(outcome string) float64 {
		t.Helper()
		return testenv.Metric(t, r.registry, "stocksvc_holds_total", "outcome", outcome)
	}
	if _, err := r.svc.Confirm(ctx, paid.ID, "bea"); !errors.Is(err, stock.ErrOrderNotFound) {
		t.Errorf("bea's confirm of ann's order: %v, want ErrOrderNotFound", err)
	}
	if _, err := r.svc.Cancel(ctx, paid.ID, "bea"); !errors.Is(err, stock.ErrOrderNotFound) {
		t.Errorf("bea's cancel of ann's order: %v, want ErrOrderNotFound", err)
	}
	if _, err := r.svc.Cancel(ctx, uuid.Must(uuid.NewV7()), ""); !errors.Is(err, stock.ErrOrderNotFound) {
		t.Errorf("cancel of no order: %v, want ErrOrderNotFound", err)
	}
	if got := stockOf(); got != 5 || decided(stock.OrderStatusConfirmed)+decided(stock.OrderStatusCancelled) != 0 {
		t.Fatalf("after the refusals: stock %d, %v decisions counted; want 5 and none", got, decided(stock.OrderStatusConfirmed)+decided(stock.OrderStatusCancelled))
	}
	for range 2 {
		if o, err := r.svc.Confirm(ctx, paid.ID, "ann"); err != nil || o.Status != stock.OrderStatusConfirmed {
			t.Errorf("ann's confirm = %+v, %v; want confirmed", o, err)
		}
		if o, err := r.svc.Cancel(ctx, gaveUp.ID, ""); err != nil || o.Status != stock.OrderStatusCancelled {
			t.Errorf("an admin's cancel = %+v, %v; want cancelled", o, err)
		}
	}
	if c, x := decided(stock.OrderStatusConfirmed), decided(stock.OrderStatusCancelled); c != 1 || x != 1 {
		t.Errorf("counted %v confirmed and %v cancelled, want 1 and 1", c, x)
	}
	if _, err := r.svc.Cancel(ctx, paid.ID, "ann"); !errors.Is(err, stock.ErrOrderConfirmed) {
		t.Errorf("cancel of the confirmed order: %v, want ErrOrderConfirmed", err)
	}
	if _, err := r.svc.Confirm(ctx, gaveUp.ID, "bea"); !errors.Is(err, stock.ErrOrderCancelled) {
		t.Errorf("confirm of the cancelled order: %v, want ErrOrderCancelled", err)
	}
	if got := stockOf(); got != 8 {
		t.Errorf("stock %d, want 8: the cancelled units back once", got)
	}
}
