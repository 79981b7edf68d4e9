package stockpg_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/async/asyncpg"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestPurgeLargeBacklog purges a backlog of hundreds of thousands of old records through a pool
// whose statement_timeout is a fifth of the service's: the purge must get through it in
// statements that each finish well inside the timeout (one DELETE of the whole backlog took
// about 7 s here), delete every old record — another customer's under the keys of orders
// accepted for later too — but those of orders accepted for later, decided or not (package
// asyncpg purges them, knowing which are pending), and leave the young ones.
func TestPurgeLargeBacklog(t *testing.T) {
	t.Parallel()
	const (
		old      = 300_000
		young    = 1_000
		accepted = 400 // orders accepted for later three days ago, half of them decided, with a client key and a decision record each
	)
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	setup, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer setup.Close()
	p, err := stockpg.New(setup).CreateProduct(ctx, stock.NewProduct{SKU: "purge", Name: "purge", Stock: 10})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	orders, err := asyncpg.New(setup)
	if err != nil {
		t.Fatalf("new async store: %v", err)
	}
	group := make([]async.NewOrder, accepted)
	for i := range group {
		group[i] = async.NewOrder{ID: uuid.Must(uuid.NewV7()), Request: stock.Prepared{CustomerID: "c",
			Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}, Key: fmt.Sprintf("client-%d", i), Fingerprint: []byte{0}}}
	}
	if _, err := orders.Accept(ctx, group); err != nil {
		t.Fatalf("accept: %v", err)
	}
	// Every other row in a few statements: the backlog is the test's input, not what it measures.
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`UPDATE idempotency_keys SET created_at = now() - interval '3 days'`, nil},
		// Each order's decision record under its internal key.
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT customer_id, $1 || async_order_id, '\x00', 'sold_out', product_id, 1, 0, created_at FROM idempotency_keys`, []any{stock.AcceptedKeyPrefix}},
		// The same client keys, sent by another customer and refused: records of their own.
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT 'other', key, '\x00', 'sold_out', product_id, 1, 0, created_at FROM idempotency_keys WHERE async_order_id IS NOT NULL`, nil},
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT 'c', 'old-' || g, '\x00', 'sold_out', 1, 1, 0, now() - interval '2 days' - g * interval '1 ms'
		    FROM generate_series(1, $1) g`, []any{old}},
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT 'c', 'young-' || g, '\x00', 'sold_out', 1, 1, 0, now() - interval '23 hours'
		    FROM generate_series(1, $1) g`, []any{young}},
		{`ANALYZE idempotency_keys`, nil},
	} {
		if _, err := setup.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("set up the backlog: %v\n%s", err, st.sql)
		}
	}
	// Half the orders decided: their decision records copied into them.
	decided := make([]stock.Accepted, accepted/2)
	for i := range decided {
		decided[i] = stock.Accepted{ID: group[i].ID, CustomerID: "c", Items: group[i].Request.Items}
	}
	if d, err := orders.Record(ctx, decided, make([]stock.Decision, len(decided)), nil); err != nil || len(d) != len(decided) {
		t.Fatalf("decide half the orders: %d decided, %v; want %d", len(d), err, len(decided))
	}

	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	cfg.ConnConfig.RuntimeParams["statement_timeout"] = "2s"
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer pool.Close()

	n, err := stockpg.New(pool).PurgeIdempotencyKeys(ctx, 24*time.Hour)
	if err != nil {
		t.Fatalf("purge = %d, %v; want it to finish", n, err)
	}
	if want := int64(old + accepted); n != want {
		t.Errorf("purge deleted %d records, want %d (the old ones and the other customer's)", n, want)
	}
	var left struct{ young, old, client, decision, other int64 }
	err = setup.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE key LIKE 'young-%'),
		       count(*) FILTER (WHERE key LIKE 'old-%'),
		       count(*) FILTER (WHERE async_order_id IS NOT NULL),
		       count(*) FILTER (WHERE starts_with(key, $1)),
		       count(*) FILTER (WHERE customer_id = 'other')
		  FROM idempotency_keys`, stock.AcceptedKeyPrefix).
		Scan(&left.young, &left.old, &left.client, &left.decision, &left.other)
	if err != nil {
		t.Fatalf("count what is left: %v", err)
	}
	if left.young != young || left.old != 0 || left.client != accepted || left.decision != accepted || left.other != 0 {
		t.Errorf("left after the purge: %d young of %d, %d old, %d client keys and %d decisions of the %d orders accepted for later, "+
			"%d of another customer's under their keys; want every young one, no old one, every accepted order's two (decided or not), none of the other customer's",
			left.young, young, left.old, left.client, left.decision, accepted, left.other)
	}

	// Nothing is left to purge: a second run deletes nothing.
	if n, err := stockpg.New(pool).PurgeIdempotencyKeys(ctx, 24*time.Hour); err != nil || n != 0 {
		t.Errorf("second purge = %d, %v; want 0, nil", n, err)
	}
}
