package verdict

import (
	"context"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestStockLine: the stock over time adds up the tables' moves in the order they happened: the
// initial stock (at 0, the product having been created before the run began), an order, a
// hold, a restock, the hold's expiry giving its units back, another order.
func TestStockLine(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	start := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	var product int64
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock, created_at) VALUES ('T', 't', 6, 10, $1) RETURNING id`,
		start.Add(-time.Second)).Scan(&product); err != nil {
		t.Fatal(err)
	}
	order := func(qty int64, created float64, status string, decided *float64) {
		t.Helper()
		var expires, decidedAt *time.Time
		if status != "confirmed" {
			e, d := at(created+1), at(*decided)
			expires, decidedAt = &e, &d
		}
		var id string
		if err := pool.QueryRow(ctx, `INSERT INTO orders (id, customer_id, status, created_at, expires_at, decided_at)
			VALUES (gen_random_uuid(), 'c', $1, $2, $3, $4) RETURNING id::text`, status, at(created), expires, decidedAt).Scan(&id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $2, $3)`, id, product, qty); err != nil {
			t.Fatal(err)
		}
	}
	order(3, 0.5, "confirmed", nil)
	expired := 2.5
	order(4, 1.0, "expired", &expired)
	if _, err := pool.Exec(ctx, `INSERT INTO restocks (product_id, quantity, created_at) VALUES ($1, 2, $2)`, product, at(2)); err != nil {
		t.Fatal(err)
	}
	order(5, 3, "confirmed", nil)
	line, err := StockLine(ctx, pool, product, "hot", start)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		at    float64
		stock float64
	}{{0, 10}, {0.5, 7}, {1, 3}, {2, 5}, {2.5, 9}, {3, 4}}
	if len(line.Points) != len(want) {
		t.Fatalf("points %v, want %v", line.Points, want)
	}
	for i, w := range want {
		if p := line.Points[i]; p.At != time.Duration(w.at*float64(time.Second)) || p.Value != w.stock {
			t.Errorf("point %d = %v at %v, want %v at %vs", i, p.Value, p.At, w.stock, w.at)
		}
	}
}
