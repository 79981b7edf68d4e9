package stockpg_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestPurgeLargeBacklog purges a backlog of hundreds of thousands of old records through a pool
// whose statement_timeout is a fifth of the service's: the purge must get through it in
// statements that each finish well inside the timeout (one DELETE of the whole backlog, with
// its anti-join against the pending orders, took about 7 s here), delete every old record but
// those of pending orders accepted for later — not another customer's records under the same
// keys — and leave the young ones.
func TestPurgeLargeBacklog(t *testing.T) {
	t.Parallel()
	const (
		old     = 300_000
		young   = 1_000
		pending = 200 // orders accepted for later and still pending, accepted three days ago
		decided = 200 // and as many decided ones, whose records may go
	)
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	setup, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	defer setup.Close()
	// Every row in a few statements: the backlog is the test's input, not what it measures.
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO products (sku, name, stock, initial_stock) VALUES ('purge', 'purge', 10, 10)`, nil},
		{`INSERT INTO async_orders (id, customer_id, product_ids, quantities, product_id, accepted_at)
		  SELECT gen_random_uuid(), 'c', ARRAY[p.id], ARRAY[1::bigint], p.id, now() - interval '3 days'
		    FROM products p, generate_series(1, $1) g`, []any{pending + decided}},
		{`UPDATE async_orders SET status = 'rejected', reason = 'sold_out', decided_at = now() WHERE seq % 2 = 0`, nil},
		// Each order's client key, and its decision record under the internal key.
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, async_order_id, created_at)
		  SELECT customer_id, 'client-' || id, '\x00', 'accepted', id, accepted_at FROM async_orders`, nil},
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT customer_id, $1 || id, '\x00', 'sold_out', product_id, 1, 0, accepted_at FROM async_orders`, []any{stock.AcceptedKeyPrefix}},
		// The same client keys, sent by another customer and refused: records of their own.
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT 'other', 'client-' || id, '\x00', 'sold_out', product_id, 1, 0, accepted_at FROM async_orders`, nil},
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT 'c', 'old-' || g, '\x00', 'sold_out', 1, 1, 0, now() - interval '2 days' - g * interval '1 ms'
		    FROM generate_series(1, $1) g`, []any{old}},
		{`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available, created_at)
		  SELECT 'c', 'young-' || g, '\x00', 'sold_out', 1, 1, 0, now() - interval '23 hours'
		    FROM generate_series(1, $1) g`, []any{young}},
		{`ANALYZE idempotency_keys`, nil},
		{`ANALYZE async_orders`, nil},
	} {
		if _, err := setup.Exec(ctx, st.sql, st.args...); err != nil {
			t.Fatalf("set up the backlog: %v\n%s", err, st.sql)
		}
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
	if want := int64(old + 2*decided + pending + decided); n != want {
		t.Errorf("purge deleted %d records, want %d (the old ones, the decided orders' and the other customer's)", n, want)
	}
	var left struct{ young, old, pendingClient, pendingDecision, decided, other int64 }
	err = setup.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE k.key LIKE 'young-%'),
		       count(*) FILTER (WHERE k.key LIKE 'old-%'),
		       count(*) FILTER (WHERE k.async_order_id = a.id AND a.status = 'pending'),
		       count(*) FILTER (WHERE k.key = $1 || a.id AND a.status = 'pending'),
		       count(*) FILTER (WHERE a.status <> 'pending'),
		       count(*) FILTER (WHERE k.customer_id = 'other')
		  FROM idempotency_keys k
		  LEFT JOIN async_orders a ON a.id = k.async_order_id OR k.key = $1 || a.id`, stock.AcceptedKeyPrefix).
		Scan(&left.young, &left.old, &left.pendingClient, &left.pendingDecision, &left.decided, &left.other)
	if err != nil {
		t.Fatalf("count what is left: %v", err)
	}
	if left.young != young || left.old != 0 || left.pendingClient != pending || left.pendingDecision != pending || left.decided != 0 || left.other != 0 {
		t.Errorf("left after the purge: %d young of %d, %d old, %d and %d of the %d pending orders' client keys and decisions, %d of the decided orders', "+
			"%d of another customer's under the pending orders' keys; want every young one, no old one, every pending order's two, no decided order's, none of the other customer's",
			left.young, young, left.old, left.pendingClient, left.pendingDecision, pending, left.decided, left.other)
	}

	// Nothing is left to purge: a second run deletes nothing.
	if n, err := stockpg.New(pool).PurgeIdempotencyKeys(ctx, 24*time.Hour); err != nil || n != 0 {
		t.Errorf("second purge = %d, %v; want 0, nil", n, err)
	}
}
