package stock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The sale rules — a window and a limit per customer: each has a refusal before the queue and
// a line in the store that holds alone. The rules run on the in-memory store and views
// (memWorld); the race for the limit runs on Postgres, whose CHECK it is.

// pgNow is Postgres's clock, the one that decides when a sale is open.
func pgNow(t testing.TB, r *replica) time.Time {
	t.Helper()
	var now time.Time
	if err := r.pool.QueryRow(context.Background(), `SELECT now()`).Scan(&now); err != nil {
		t.Fatalf("read Postgres's clock: %v", err)
	}
	return now
}

func createRuled(t testing.TB, r *replica, sku string, units int64, rules stock.SaleRules) int64 {
	t.Helper()
	p, err := r.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: sku, Name: sku, Stock: units, Sale: rules})
	if err != nil {
		t.Fatalf("create product: %v", err)
	}
	return p.ID
}

// tables reads what Postgres holds for a customer's purchases of product id: the units in its
// orders, and the count the limit is checked against (-1 when there is no row).
func tables(t testing.TB, r *replica, id int64, customer string) (units, counted int64) {
	t.Helper()
	ctx := context.Background()
	err := r.pool.QueryRow(ctx, `
		SELECT coalesce(sum(i.quantity), 0) FROM order_items i JOIN orders o ON o.id = i.order_id
		 WHERE i.product_id = $1 AND o.customer_id = $2`, id, customer).Scan(&units)
	if err != nil {
		t.Fatalf("count orders: %v", err)
	}
	err = r.pool.QueryRow(ctx, `
		SELECT coalesce((SELECT bought FROM customer_purchases WHERE product_id = $1 AND customer_id = $2), -1)`,
		id, customer).Scan(&counted)
	if err != nil {
		t.Fatalf("read customer_purchases: %v", err)
	}
	return units, counted
}

// bought is what the in-memory store holds for a customer's purchases of product id, as tables
// reads it from Postgres: the units in its orders, and the count the limit is checked against.
func bought(t testing.TB, w *memWorld, id int64, customer string) (units, counted int64) {
	t.Helper()
	ctx := context.Background()
	page, err := w.store.CustomerOrders(ctx, stock.OrdersQuery{CustomerID: customer, Limit: 1000})
	if err != nil {
		t.Fatalf("list orders: %v", err)
	}
	for _, o := range page.Orders {
		for _, it := range o.Items {
			if it.ProductID == id {
				units += it.Quantity
			}
		}
	}
	snap, err := w.store.Snapshot(ctx, []int64{id}, nil, []string{customer})
	if err != nil {
		t.Fatalf("read the counts: %v", err)
	}
	return units, snap.Levels[id].Bought[customer]
}

func ptr[T any](v T) *T { return &v }

// placed is one order's answer.
type placed struct {
	res stock.OrderResult
	err error
}

// atOnce places n orders req at the same moment, over the replicas in turn, and returns their
// answers.
func atOnce(replicas []*replica, n int, req stock.OrderRequest) []placed {
	out := make([]placed, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			out[i].res, out[i].err = replicas[i%len(replicas)].svc.PlaceOrder(context.Background(), req)
		})
	}
	close(start)
	wg.Wait()
	return out
}

// TestOneWinnerPerCustomer is the race the limit exists for: one customer, limit 1, fifty
// orders at once over three replicas — exactly one is confirmed, in the answers and in the
// tables, whether the replicas check the limit (then most are refused before the queue or in
// their batch) or leave it to Postgres alone (then the CHECK on customer_purchases refuses the
// batches that would break it, and their orders are decided again).
func TestOneWinnerPerCustomer(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("postgres alone %v", skip), func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			var replicas []*replica
			for range 3 {
				replicas = append(replicas, w.replica(t, stock.DefaultDefense(), replicaOptions{views: true, skipRules: skip}))
			}
			id := createRuled(t, replicas[0], "one-each", 100, stock.SaleRules{MaxPerCustomer: 1})
			const orders = 50
			var confirmed, limited int
			for _, p := range atOnce(replicas, orders, order("scalper", one(id, 1))) {
				var over *stock.CustomerLimitError
				switch {
				case p.err == nil:
					confirmed++
				case errors.As(p.err, &over):
					limited++
					if over.Limit != 1 || over.Bought != 1 || over.Requested != 1 {
						t.Errorf("refusal %+v, want limit 1, bought 1, requested 1", over)
					}
				default:
					t.Errorf("order: %v", p.err)
				}
			}
			if confirmed != 1 || limited != orders-1 {
				t.Errorf("confirmed %d and refused for the limit %d, want 1 and %d", confirmed, limited, orders-1)
			}
			if units, counted := tables(t, replicas[0], id, "scalper"); units != 1 || counted != 1 {
				t.Errorf("tables: %d units ordered, customer_purchases says %d; want 1 and 1", units, counted)
			}
			if a := mustAudit(t, replicas[0], id); !a.Consistent() || a.Stock != 99 {
				t.Errorf("audit %+v, want 99 left and consistent", a)
			}
			var caught float64
			for _, r := range replicas {
				caught += catches(t, r, stock.LayerLimit)
			}
			if skip && caught == 0 {
				t.Errorf("with the checks off, Postgres's CHECK caught nothing: the race never reached it")
			}
			if !skip && caught != 0 {
				t.Errorf("with the checks on, Postgres's CHECK caught %v writes: a batch was decided without the limit", caught)
			}
		})
	}
}

// TestLimitAcrossBatchesCartsAndLowering: what a customer has is counted across batches and
// carts; lowering the limit leaves a customer above it what they have, and nothing more.
func TestLimitAcrossBatchesCartsAndLowering(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	limited := createRuled(t, r, "cart-limited", 10, stock.SaleRules{MaxPerCustomer: 3})
	other := createProduct(t, r, "cart-other", 10)

	if _, err := r.svc.PlaceOrder(ctx, order("ann", one(limited, 2), one(other, 5))); err != nil {
		t.Fatalf("cart: %v", err)
	}
	_, err := r.svc.PlaceOrder(ctx, order("ann", one(limited, 2)))
	var over *stock.CustomerLimitError
	if !errors.As(err, &over) || over.Bought != 2 || over.Limit != 3 || over.Requested != 2 {
		t.Fatalf("second order = %v, want customer-limit with 2 bought of 3", err)
	}
	if _, err := r.svc.PlaceOrder(ctx, order("ann", one(limited, 1))); err != nil {
		t.Fatalf("the last unit under the limit: %v", err)
	}
	if _, err := r.svc.PlaceOrder(ctx, order("bob", one(limited, 3))); err != nil {
		t.Fatalf("another customer: %v", err)
	}
	// Lowered to 1: both keep their 3, neither buys more; a new customer buys 1.
	p, err := r.svc.UpdateSale(ctx, limited, stock.SaleChange{MaxPerCustomer: ptr(int64(1))})
	if err != nil || p.MaxPerCustomer != 1 {
		t.Fatalf("lower the limit: %+v, %v", p, err)
	}
	if _, err := r.svc.PlaceOrder(ctx, order("ann", one(limited, 1))); !errors.As(err, &over) || over.Bought != 3 {
		t.Errorf("after lowering, ann's order = %v, want customer-limit with 3 bought", err)
	}
	if _, err := r.svc.PlaceOrder(ctx, order("cy", one(limited, 1))); err != nil {
		t.Errorf("a new customer under the lowered limit: %v", err)
	}
	if units, counted := bought(t, w, limited, "ann"); units != 3 || counted != 3 {
		t.Errorf("ann: %d units ordered, %d counted; want 3 and 3", units, counted)
	}
	// Lifted: no limit, no refusal.
	if _, err := r.svc.UpdateSale(ctx, limited, stock.SaleChange{ClearMaxPerCustomer: true}); err != nil {
		t.Fatalf("lift the limit: %v", err)
	}
	if _, err := r.svc.PlaceOrder(ctx, order("ann", one(limited, 1))); err != nil {
		t.Errorf("after lifting the limit: %v", err)
	}
}

// TestSaleNotOpenIsRefusedWithoutTheStore: before the opening, an order is refused from the
// product's view — no call to the store, no lock — saying when the sale opens; opening it early
// (an admin) is seen by every replica once the change is answered.
func TestSaleNotOpenIsRefusedWithoutTheStore(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	store := &countingStore{Store: w.store}
	locks := &askingLocker{Locker: w.locker, asked: make(chan struct{}, 16)}
	a := memReplica(t, store, locks, stock.Config{Views: w.store.Views()})
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	opens := time.Now().Add(time.Hour) // the store's clock
	id := createRuled(t, a, "not-yet", 5, stock.SaleRules{StartsAt: &opens})
	queries := &store.calls

	for _, r := range []*replica{a, b} {
		if _, err := r.svc.PlaceOrder(ctx, order("early", one(id, 1))); !errors.Is(err, stock.ErrSaleNotOpen) {
			t.Fatalf("order before the opening = %v, want sale not open", err)
		}
	}
	before := queries.Load()
	_, err := a.svc.PlaceOrder(ctx, order("early", one(id, 1)))
	var notOpen *stock.SaleNotOpenError
	if !errors.As(err, &notOpen) || !notOpen.StartsAt.Equal(opens) || notOpen.Opens() < 59*time.Minute {
		t.Fatalf("order = %v, want sale not open until %v", err, opens)
	}
	if n := queries.Load() - before; n != 0 {
		t.Errorf("a refusal before the opening made %d calls to the store, want none", n)
	}
	// Keyed orders too: the keys with an outcome for the product are loaded once (nothing can
	// be confirmed while the sale is closed), and then nothing more is asked.
	keyedOrder := func(n int) error {
		o := order("early", one(id, 1))
		o.IdempotencyKey = fmt.Sprintf("not-yet-%d-%d", id, n)
		_, err := a.svc.PlaceOrder(ctx, o)
		return err
	}
	if err := keyedOrder(0); !errors.Is(err, stock.ErrSaleNotOpen) {
		t.Fatalf("keyed order before the opening = %v, want sale not open", err)
	}
	before = queries.Load()
	for n := 1; n <= 5; n++ {
		if err := keyedOrder(n); !errors.Is(err, stock.ErrSaleNotOpen) {
			t.Fatalf("keyed order before the opening = %v, want sale not open", err)
		}
	}
	if n := queries.Load() - before; n != 0 {
		t.Errorf("keyed refusals before the opening made %d calls to the store, want none once the key set is loaded", n)
	}
	if n := len(locks.asked); n != 0 {
		t.Errorf("refusals before the opening asked for the product's lock %d times, want none", n)
	}
	if n := testenv.Metric(t, a.registry, "stocksvc_orders_refused_fast_total", "rule", "sale_not_open"); n < 1 {
		t.Errorf("stocksvc_orders_refused_fast_total{rule=sale_not_open} = %v, want the refusals counted", n)
	}
	// Opened now by an admin on a: b, whose view said "not open", sells at once.
	if _, err := a.svc.UpdateSale(ctx, id, stock.SaleChange{ClearStartsAt: true}); err != nil {
		t.Fatalf("open the sale: %v", err)
	}
	if _, err := b.svc.PlaceOrder(ctx, order("first", one(id, 1))); err != nil {
		t.Errorf("order on another replica once the opening was answered: %v", err)
	}
}

// TestSkewedClockCannotSellEarly: a replica whose clock runs an hour ahead thinks the sale is
// open; the store's clock (Postgres's, in production) refuses it — from the batch's read when
// the replica checks the rules, and by the write itself (the window layer, counted) when it
// leaves them to the store. Nothing is sold either way, and the buyer is told when the sale
// opens.
func TestSkewedClockCannotSellEarly(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("store alone %v", skip), func(t *testing.T) {
			t.Parallel()
			w := newMemWorld()
			ahead := func() time.Time { return time.Now().Add(time.Hour) }
			r := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true, now: ahead, skipRules: skip})
			opens := time.Now().Add(30 * time.Minute) // the store's clock
			id := createRuled(t, r, "skewed", 5, stock.SaleRules{StartsAt: &opens})
			for i := range 3 {
				_, err := r.svc.PlaceOrder(context.Background(), order(fmt.Sprint("c", i), one(id, 1)))
				var notOpen *stock.SaleNotOpenError
				if !errors.As(err, &notOpen) || !notOpen.StartsAt.Equal(opens) {
					t.Fatalf("order on a replica an hour ahead = %v, want sale not open until %v", err, opens)
				}
				if d := notOpen.Opens(); d < 29*time.Minute || d > 31*time.Minute {
					t.Errorf("the refusal says the sale opens in %v, want about 30m by Postgres's clock", d)
				}
			}
			if a := mustAudit(t, r, id); a.Stock != 5 || a.Sold != 0 {
				t.Errorf("audit %+v: something was sold before the opening", a)
			}
			if n := testenv.Metric(t, r.registry, "stocksvc_orders_refused_fast_total", "rule", "sale_not_open"); n != 0 {
				t.Errorf("the skewed replica refused %v orders from its own clock, want none: it thinks the sale is open", n)
			}
			if caught := catches(t, r, stock.LayerWindow); skip && caught == 0 {
				t.Errorf("with the checks off, the purchase statement's window caught nothing")
			}
		})
	}
}

// TestSaleEnded: an order after the end is refused; an admin can end a sale early; an order
// confirmed before the end and retried with its key after it is replayed, not refused.
func TestSaleEnded(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	id := createProduct(t, r, "ending", 5)
	keyed := order("kim", one(id, 1))
	keyed.IdempotencyKey = "ending-" + fmt.Sprint(time.Now().UnixNano())
	first, err := r.svc.PlaceOrder(ctx, keyed)
	if err != nil {
		t.Fatalf("order before the end: %v", err)
	}
	p, err := r.svc.UpdateSale(ctx, id, stock.SaleChange{EndNow: true})
	if err != nil || p.SaleEndsAt == nil {
		t.Fatalf("end the sale: %+v, %v", p, err)
	}
	var ended *stock.SaleEndedError
	if _, err := r.svc.PlaceOrder(ctx, order("late", one(id, 1))); !errors.As(err, &ended) || !ended.EndsAt.Equal(*p.SaleEndsAt) {
		t.Errorf("order after the end = %v, want sale ended at %v", err, p.SaleEndsAt)
	}
	again, err := r.svc.PlaceOrder(ctx, keyed)
	if err != nil || !again.Replayed || again.Order.ID != first.Order.ID {
		t.Errorf("the keyed order retried after the end = %+v, %v; want its order replayed", again, err)
	}
	// An end before the start is refused, whichever request set which.
	if _, err := r.svc.UpdateSale(ctx, id, stock.SaleChange{StartsAt: ptr(p.SaleEndsAt.Add(time.Hour))}); !errors.Is(err, stock.ErrInvalid) {
		t.Errorf("a start after the end = %v, want invalid", err)
	}
}
