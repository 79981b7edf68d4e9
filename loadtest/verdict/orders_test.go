package verdict

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestReconcile settles what clients were told against the tables of a real database: unknown
// orders found there happened (and may not have taken effect before their transaction began),
// those not found never did; orders for refused requests, a second order for one operation and
// a restock applied twice are all reported.
func TestReconcile(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	var product int64
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('R', 'r', 100, 100) RETURNING id`).Scan(&product); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute)
	insert := func(customer string, qty int64) string {
		t.Helper()
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO orders (id, customer_id, status) VALUES (gen_random_uuid(), $1, 'confirmed') RETURNING id::text`, customer).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $2, $3)`, id, product, qty); err != nil {
			t.Fatal(err)
		}
		return id
	}
	confirmedID := insert("c-confirmed", 2)
	insert("c-unknown-found", 1)
	order := func(customer string, oc model.Outcome, id string) *model.Op {
		return &model.Op{Customer: customer, OrderID: id, In: model.Input{Kind: model.KindOrder, Product: product, Quantity: map[bool]int64{true: 2, false: 1}[customer == "c-confirmed"]},
			Out: model.Output{Outcome: oc}}
	}
	ops := []*model.Op{
		order("c-confirmed", model.Confirmed, confirmedID),
		order("c-unknown-found", model.Unknown, ""),
		order("c-unknown-lost", model.Unknown, ""),
		{In: model.Input{Kind: model.KindRestock, Product: product, Quantity: 5}, Out: model.Output{Outcome: model.Confirmed, Stock: 105}},
	}
	if _, err := pool.Exec(ctx, `INSERT INTO restocks (product_id, quantity) VALUES ($1, 5)`, product); err != nil {
		t.Fatal(err)
	}
	invs, err := Orders(ctx, pool, ops, start)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invs {
		if !inv.OK {
			t.Errorf("%s: %s", inv.Name, inv.Detail)
		}
	}
	if ops[1].Out.Outcome != model.Happened || ops[1].NotBefore < 50*time.Second {
		t.Errorf("unknown order in the database: %v, not before %v; want happened, about a minute after start", ops[1].Out.Outcome, ops[1].NotBefore)
	}
	if ops[0].Txn == "" || ops[1].Txn == "" || ops[0].Txn == ops[1].Txn {
		t.Errorf("transactions of two orders inserted apart: %q and %q, want two", ops[0].Txn, ops[1].Txn)
	}
	if ops[2].Out.Outcome != model.Refused {
		t.Errorf("unknown order not in the database: %v, want refused (never happened)", ops[2].Out.Outcome)
	}

	// Now the service misbehaves: an order for a sold-out answer, a second order for one
	// operation, and the restock applied twice.
	insert("c-sold-out", 1)
	insert("c-confirmed", 2)
	if _, err := pool.Exec(ctx, `INSERT INTO restocks (product_id, quantity) VALUES ($1, 5)`, product); err != nil {
		t.Fatal(err)
	}
	insert("c-busy", 1)
	ops = append(ops, order("c-sold-out", model.SoldOut, ""), order("c-busy", model.Refused, ""))
	invs, err = Orders(ctx, pool, ops, start)
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, inv := range invs {
		failed[inv.Name] = !inv.OK
	}
	for _, want := range []string{"each restock applied once", "no order for a client told sold-out or busy, none nobody asked for",
		"one order per operation (idempotency across retries)"} {
		if !failed[want] {
			t.Errorf("%q passed, want it failed: %+v", want, invs)
		}
	}
	for _, inv := range invs {
		if inv.Name == "no order for a client told sold-out or busy, none nobody asked for" && !strings.Contains(inv.Detail, "2 orders for refused requests") {
			t.Errorf("%s: %s; want the sold-out and the busy order counted", inv.Name, inv.Detail)
		}
	}
	// The busy order that was sold is checked by the model as one that happened, so that the
	// stock adds up there; it is a violation all the same.
	if busy := ops[len(ops)-1]; busy.Out.Outcome != model.Happened || !busy.RefusedButSold || busy.NotBefore < 50*time.Second {
		t.Errorf("busy order found in the database: %v, refused but sold %v, not before %v; want happened, marked, about a minute after start",
			busy.Out.Outcome, busy.RefusedButSold, busy.NotBefore)
	}
}

// TestOrdersOfOneTransaction: orders inserted by one transaction, as a batch is, are marked
// with the same transaction, and a hold's later change of status does not change it.
func TestOrdersOfOneTransaction(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	var product int64
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('T', 't', 100, 100) RETURNING id`).Scan(&product); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, c := range []string{"t-a", "t-b"} {
		var id string
		if err := tx.QueryRow(ctx, `INSERT INTO orders (id, customer_id, status, expires_at) VALUES (gen_random_uuid(), $1, 'held', now() + interval '1 minute')
			RETURNING id::text`, c).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $2, 1)`, id, product); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE orders SET status = 'confirmed', decided_at = now() WHERE id = $1`, ids[0]); err != nil {
		t.Fatal(err)
	}
	ops := []*model.Op{
		{Customer: "t-a", OrderID: ids[0], In: model.Input{Kind: model.KindOrder, Product: product, Quantity: 1}, Out: model.Output{Outcome: model.Held}},
		{Customer: "t-b", OrderID: ids[1], In: model.Input{Kind: model.KindOrder, Product: product, Quantity: 1}, Out: model.Output{Outcome: model.Held}},
	}
	if _, err := Orders(ctx, pool, ops, time.Now().Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	if ops[0].Txn == "" || ops[0].Txn != ops[1].Txn {
		t.Errorf("transactions %q and %q, want one, the same", ops[0].Txn, ops[1].Txn)
	}
}

// TestUnknownRestockNotApplied: when a product received exactly its confirmed restocks, a
// restock whose outcome was unknown never happened and is left out of the model; when it
// received more, the unknown one stays unknown.
func TestUnknownRestockNotApplied(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	var a, b int64
	for _, p := range []*int64{&a, &b} {
		if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES (gen_random_uuid()::text, 'r', 1, 1) RETURNING id`).Scan(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO restocks (product_id, quantity) VALUES ($1, 2), ($2, 2), ($2, 3)`, a, b); err != nil {
		t.Fatal(err)
	}
	restock := func(product, qty int64, oc model.Outcome) *model.Op {
		return &model.Op{In: model.Input{Kind: model.KindRestock, Product: product, Quantity: qty}, Out: model.Output{Outcome: oc}}
	}
	ops := []*model.Op{restock(a, 2, model.Confirmed), restock(a, 3, model.Unknown), restock(b, 2, model.Confirmed), restock(b, 3, model.Unknown)}
	if _, err := Orders(ctx, pool, ops, time.Now()); err != nil {
		t.Fatal(err)
	}
	if ops[1].Out.Outcome != model.Refused {
		t.Errorf("unknown restock of a product that received only its confirmed ones: %v, want left out (refused)", ops[1].Out.Outcome)
	}
	if ops[3].Out.Outcome != model.Unknown {
		t.Errorf("unknown restock of a product that received it: %v, want still unknown", ops[3].Out.Outcome)
	}
}
