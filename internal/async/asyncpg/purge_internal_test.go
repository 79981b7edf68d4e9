package asyncpg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestPurgeRecords purges the records of orders accepted for later three days ago through a
// pool whose statement_timeout is a fifth of the service's, behind a backlog of other old
// records: it deletes the decided orders' client keys and decision records, keeps the pending
// orders' — however old: a retry must find its order, and the copy its decision — and leaves
// every other record, another customer's under the same keys too, to the purchase path's purge.
func TestPurgeRecords(t *testing.T) {
	t.Parallel()
	const (
		others  = 100_000 // old records of the purchase path's
		pending = 200     // orders accepted for later three days ago, still pending
		decided = 200     // and as many decided ones, whose records may go
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
		{`UPDATE async_orders SET status = 'rejected', reason = 'sold-out', decided_at = now() WHERE seq % 2 = 0`, nil},
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
		    FROM generate_series(1, $1) g`, []any{others}},
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
	s, err := New(pool)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}

	n, err := s.PurgeRecords(ctx, 24*time.Hour)
	if err != nil {
		t.Fatalf("purge = %d, %v; want it to finish", n, err)
	}
	if want := int64(2 * decided); n != want {
		t.Errorf("purge deleted %d records, want %d (the decided orders' two each)", n, want)
	}
	var left struct{ others, pendingClient, pendingDecision, decided, other int64 }
	err = setup.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE k.key LIKE 'old-%'),
		       count(*) FILTER (WHERE k.async_order_id = a.id AND a.status = 'pending'),
		       count(*) FILTER (WHERE k.key = $1 || a.id AND a.status = 'pending'),
		       count(*) FILTER (WHERE a.status <> 'pending' AND k.customer_id = a.customer_id),
		       count(*) FILTER (WHERE k.customer_id = 'other')
		  FROM idempotency_keys k
		  LEFT JOIN async_orders a ON a.id = k.async_order_id OR k.key = $1 || a.id`, stock.AcceptedKeyPrefix).
		Scan(&left.others, &left.pendingClient, &left.pendingDecision, &left.decided, &left.other)
	if err != nil {
		t.Fatalf("count what is left: %v", err)
	}
	if left.others != others || left.pendingClient != pending || left.pendingDecision != pending || left.decided != 0 || left.other != decided+pending {
		t.Errorf("left after the purge: %d of the %d others, %d and %d of the %d pending orders' client keys and decisions, %d of the decided orders', "+
			"%d of another customer's under the orders' keys; want every other, every pending order's two, no decided order's, all of the other customer's",
			left.others, others, left.pendingClient, left.pendingDecision, pending, left.decided, left.other)
	}

	// Nothing is left to purge: a second run deletes nothing.
	if n, err := s.PurgeRecords(ctx, 24*time.Hour); err != nil || n != 0 {
		t.Errorf("second purge = %d, %v; want 0, nil", n, err)
	}
}
