package stockpg

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestSaleEndsAfterWhatItWaitedFor: a sale ended now is stamped when its row is written, not
// when its transaction began. A sale that sold while the end waited for the row lock committed
// before the end did, so its orders must fall inside the window the end leaves — not after an
// end stamped with the admin's earlier now() (a pause-redis drill caught an order 1.3 ms past
// such an end).
func TestSaleEndsAfterWhatItWaitedFor(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := New(pool)
	ctx := context.Background()
	p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "ending", Name: "ending", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	admin, err := pool.Begin(ctx) // its now() is fixed here, before the sale's
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Rollback(ctx)
	if _, err := admin.Exec(ctx, `SELECT 1`); err != nil {
		t.Fatal(err)
	}
	sale, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sale.Rollback(ctx)
	var sold time.Time
	if err := sale.QueryRow(ctx, `UPDATE products SET stock = stock - 1, version = version + 1 WHERE id = $1 RETURNING now()`, p.ID).Scan(&sold); err != nil {
		t.Fatalf("sell: %v", err)
	}
	var adminPID uint32
	if err := admin.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&adminPID); err != nil {
		t.Fatal(err)
	}
	ended := make(chan error, 1)
	var ends *time.Time
	go func() {
		rows, _ := admin.Query(ctx, updateSaleSQL, p.ID, nil, nil, nil, false, false, false, true, nil, false, nil, 0, nil, nil, false)
		got, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[stock.Product])
		ends = got.SaleEndsAt
		ended <- err
	}()
	// The end waits for the sale's row lock.
	for {
		var waiting bool
		if err := pool.QueryRow(ctx, `SELECT count(*) > 0 FROM pg_stat_activity WHERE pid = $1 AND wait_event_type = 'Lock'`, adminPID).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
		if waiting {
			break
		}
		if err := clock.Sleep(ctx, 5*time.Millisecond); err != nil {
			t.Fatal(err)
		}
	}
	if err := sale.Commit(ctx); err != nil {
		t.Fatalf("commit the sale: %v", err)
	}
	if err := <-ended; err != nil {
		t.Fatalf("end the sale: %v", err)
	}
	if err := admin.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if ends == nil || !ends.After(sold) {
		t.Errorf("the sale ended at %v, before the sale it waited for, at %v", ends, sold)
	}
}
