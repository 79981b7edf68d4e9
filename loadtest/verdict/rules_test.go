package verdict

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// saleRulesSchema is issue #20's schema as its contract states it, for a database whose
// migrations predate it; with migration 000006 applied it changes nothing.
const saleRulesSchema = `
	ALTER TABLE products ADD COLUMN IF NOT EXISTS sale_starts_at timestamptz NULL,
	                     ADD COLUMN IF NOT EXISTS sale_ends_at timestamptz NULL,
	                     ADD COLUMN IF NOT EXISTS max_per_customer bigint NULL;
	CREATE TABLE IF NOT EXISTS customer_purchases (
	    product_id  bigint NOT NULL REFERENCES products (id),
	    customer_id text   NOT NULL,
	    bought      bigint NOT NULL,
	    max_units   bigint NOT NULL,
	    PRIMARY KEY (product_id, customer_id),
	    CHECK (bought <= max_units))`

// insertOrder writes a confirmed order of qty units of product for customer, created at at,
// with an idempotency record under key when key is not empty; it returns the order's id.
func insertOrder(t *testing.T, pool *pgxpool.Pool, customer string, product, qty int64, at time.Time, key string) string {
	t.Helper()
	ctx := context.Background()
	var id string
	if err := pool.QueryRow(ctx, `INSERT INTO orders (id, customer_id, status, created_at) VALUES (gen_random_uuid(), $1, 'confirmed', $2) RETURNING id::text`,
		customer, at).Scan(&id); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $2, $3)`, id, product, qty); err != nil {
		t.Fatal(err)
	}
	if key != "" {
		if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, order_id, product_id, requested)
			VALUES ($1, $2, '\x00', 'confirmed', $3, $4, $5)`, customer, key, id, product, qty); err != nil {
			t.Fatal(err)
		}
	}
	return id
}

// TestRules: the window, the limit and customer_purchases, checked in a real database — first
// a sale that kept them, then one that broke each.
func TestRules(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, saleRulesSchema); err != nil {
		t.Fatal(err)
	}
	var product, free int64
	var opens time.Time
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock, sale_starts_at, sale_ends_at, max_per_customer)
		VALUES ('L', 'l', 100, 100, now() - interval '1 hour', now() + interval '1 hour', 2) RETURNING id, sale_starts_at`).Scan(&product, &opens); err != nil {
		t.Fatal(err)
	}
	// A product without rules: any customer, any time.
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('F', 'f', 100, 100) RETURNING id`).Scan(&free); err != nil {
		t.Fatal(err)
	}
	in := opens.Add(time.Minute)
	insertOrder(t, pool, "c1", product, 1, opens, "")
	insertOrder(t, pool, "c1", product, 1, in, "")
	insertOrder(t, pool, "c2", product, 1, in, "")
	insertOrder(t, pool, "c1", free, 5, opens.Add(-time.Hour), "")
	if _, err := pool.Exec(ctx, `INSERT INTO customer_purchases (product_id, customer_id, bought, max_units) VALUES ($1, 'c1', 2, 2), ($1, 'c2', 1, 2)`, product); err != nil {
		t.Fatal(err)
	}
	invs, err := Rules(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	if len(invs) != 3 {
		t.Fatalf("Rules = %+v, want three invariants", invs)
	}
	for _, inv := range invs {
		if !inv.OK {
			t.Errorf("%s: %s", inv.Name, inv.Detail)
		}
	}

	// Now the sale breaks every rule: an order a microsecond before the opening (c3, whom
	// customer_purchases does not count), a third unit for c1, and an order at the end.
	insertOrder(t, pool, "c3", product, 1, opens.Add(-time.Microsecond), "")
	insertOrder(t, pool, "c1", product, 1, in, "")
	var ends time.Time
	if err := pool.QueryRow(ctx, `SELECT sale_ends_at FROM products WHERE id = $1`, product).Scan(&ends); err != nil {
		t.Fatal(err)
	}
	insertOrder(t, pool, "c2", product, 1, ends, "")
	invs, err = Rules(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"no order confirmed outside its sale window (Postgres's clock)":     "2 orders outside the window",
		"no customer above the limit":                                       "1 customers above the limit: customer c1 holds 3 units",
		"customer_purchases.bought = the customer's held + confirmed units": "3 counts off",
	}
	for _, inv := range invs {
		if inv.OK || !strings.Contains(inv.Detail, want[inv.Name]) {
			t.Errorf("%s: ok %v, %q; want failed with %q", inv.Name, inv.OK, inv.Detail, want[inv.Name])
		}
	}
}

// TestReconcileByKey: a customer with several operations (as a limit needs) has its orders
// found by their keys; an order of theirs under no key they sent is one nobody asked for.
func TestReconcileByKey(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	var product int64
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('K', 'k', 100, 100) RETURNING id`).Scan(&product); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute)
	confirmed := insertOrder(t, pool, "rep", product, 1, time.Now(), "k1")
	insertOrder(t, pool, "rep", product, 2, time.Now(), "k2")
	order := func(key string, qty int64, oc model.Outcome, id string) *model.Op {
		return &model.Op{Customer: "rep", Key: key, OrderID: id, In: model.Input{Kind: model.KindOrder, Product: product, Quantity: qty},
			Out: model.Output{Outcome: oc}}
	}
	ops := []*model.Op{
		order("k1", 1, model.Confirmed, confirmed),
		order("k2", 2, model.Unknown, ""),
		order("k3", 1, model.OverLimit, ""),
		order("k4", 1, model.Unknown, ""),
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
	if ops[1].Out.Outcome != model.Happened || ops[3].Out.Outcome != model.Refused {
		t.Errorf("unknown orders settled as %v (found by key) and %v (not found), want happened and refused", ops[1].Out.Outcome, ops[3].Out.Outcome)
	}

	// An order of the customer under no key of theirs, and one for the key refused.
	insertOrder(t, pool, "rep", product, 1, time.Now(), "")
	insertOrder(t, pool, "rep", product, 1, time.Now(), "k3")
	invs, err = Orders(ctx, pool, ops, start)
	if err != nil {
		t.Fatal(err)
	}
	for _, inv := range invs {
		if inv.Name == "no order for a client told sold-out or busy, none nobody asked for" &&
			(inv.OK || !strings.Contains(inv.Detail, "1 orders for refused requests, 1 for unknown customers")) {
			t.Errorf("%s: ok %v, %s; want the refused key's order and the keyless one found", inv.Name, inv.OK, inv.Detail)
		}
	}
}
