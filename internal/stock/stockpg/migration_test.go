package stockpg_test

import (
	"context"
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/migrations"
)

// TestHoldLimitsMigration: migration 12 (issue #31) on a database that has what it bounds — a
// product held for a day, a customer holding more than the new default cap — keeps every row
// valid: the day becomes an hour for new orders while the held ones keep their expires_at, the
// caps come from the limits, and the holds open now are counted, a hoarder's included, who
// keeps them and can hold no more. Its down migration goes back, and up again.
func TestHoldLimitsMigration(t *testing.T) {
	t.Parallel()
	url := testenv.DatabaseURL(t)
	m, err := migrations.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	before := versionBefore(t, "hold_limits")
	down := func() {
		t.Helper()
		if err := m.Migrate(before); err != nil {
			t.Fatalf("migrate down to %d: %v", before, err)
		}
	}
	up := func() {
		t.Helper()
		if err := m.Up(); err != nil {
			t.Fatalf("migrate up: %v", err)
		}
	}
	down()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var day, limited, plain int64
	err = pool.QueryRow(ctx, `
		WITH d AS (INSERT INTO products (sku, name, stock, initial_stock, hold_for_seconds) VALUES ('day', 'day', 80, 100, 86400) RETURNING id),
		     l AS (INSERT INTO products (sku, name, stock, initial_stock, hold_for_seconds, max_per_customer) VALUES ('limited', 'l', 8, 10, 600, 3) RETURNING id),
		     p AS (INSERT INTO products (sku, name, stock, initial_stock) VALUES ('plain', 'p', 10, 10) RETURNING id)
		SELECT d.id, l.id, p.id FROM d, l, p`).Scan(&day, &limited, &plain)
	if err != nil {
		t.Fatalf("products: %v", err)
	}
	order := func(customer, status string, product, qty int64) uuid.UUID {
		t.Helper()
		id := uuid.Must(uuid.NewV7())
		_, err := pool.Exec(ctx, `
			WITH o AS (INSERT INTO orders (id, customer_id, status, created_at, expires_at, decided_at)
			           VALUES ($1, $2, $3, now(), now() + interval '1 day', CASE WHEN $3 = 'held' THEN NULL ELSE now() END))
			INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $4, $5)`, id, customer, status, product, qty)
		if err != nil {
			t.Fatalf("order: %v", err)
		}
		return id
	}
	hoards := []uuid.UUID{order("hoarder", "held", day, 5), order("hoarder", "held", day, 5), order("hoarder", "held", day, 5)}
	order("hoarder", "cancelled", day, 5)
	order("amy", "held", limited, 2)
	expires := func() []time.Time {
		t.Helper()
		rows, _ := pool.Query(ctx, `SELECT expires_at FROM orders WHERE id = ANY($1) ORDER BY id`, hoards)
		var out []time.Time
		for rows.Next() {
			var at time.Time
			if err := rows.Scan(&at); err != nil {
				t.Fatal(err)
			}
			out = append(out, at)
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return out
	}
	held := expires()

	up()
	s := stockpg.New(pool)
	for id, want := range map[int64]struct {
		hold time.Duration
		cap  int64
	}{day: {time.Hour, stock.DefaultMaxQuantity}, limited: {10 * time.Minute, 3}, plain: {0, stock.DefaultMaxQuantity}} {
		p, err := s.Product(ctx, id)
		if err != nil || p.HoldFor != want.hold || p.MaxHeldPerCustomer != want.cap {
			t.Errorf("product %d after the migration: %+v, %v; want hold %v, cap %d", id, p, err, want.hold, want.cap)
		}
	}
	for i, at := range expires() {
		if !at.Equal(held[i]) {
			t.Errorf("a held order's expires_at moved from %v to %v", held[i], at)
		}
	}
	var counts []string
	rows, _ := pool.Query(ctx, `SELECT format('%s %s %s/%s', p.sku, c.customer_id, c.held, c.max_held)
		FROM customer_holds c JOIN products p ON p.id = c.product_id ORDER BY p.sku`)
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, c)
	}
	if rows.Err() != nil || len(counts) != 2 || counts[0] != "day hoarder 15/15" || counts[1] != "limited amy 2/3" {
		t.Errorf("customer_holds = %q, %v; want the open holds: day hoarder 15/15, limited amy 2/3", counts, rows.Err())
	}
	var def string
	if err := pool.QueryRow(ctx, `SELECT column_default FROM information_schema.columns
		WHERE table_name = 'products' AND column_name = 'max_held_per_customer'`).Scan(&def); err != nil || def != strconv.Itoa(stock.DefaultMaxQuantity) {
		t.Errorf("the column's default = %q, %v; want stock.DefaultMaxQuantity, %d", def, err, stock.DefaultMaxQuantity)
	}

	// The hoarder keeps 15 held and can hold no more until fewer than the cap (10) are held.
	hold := func() error {
		t.Helper()
		_, err := s.Commit(ctx, heldWrite("hoarder", customerLevels(t, s, "hoarder", day), stock.Item{ProductID: day, Quantity: 1}))
		return err
	}
	if err := hold(); !errors.Is(err, stock.ErrConflict) {
		t.Errorf("a hold of the hoarder's after the migration = %v, want refused by the cap", err)
	}
	if _, err := s.ReleaseHolds(ctx, hoards[:2], []int64{day}, false); err != nil {
		t.Fatalf("cancel two holds: %v", err)
	}
	if err := hold(); err != nil {
		t.Errorf("a hold once 5 of 10 are held: %v", err)
	}

	down()
	if _, err := pool.Exec(ctx, `UPDATE products SET hold_for_seconds = 86400 WHERE id = $1`, limited); err != nil {
		t.Errorf("a day's hold after the down migration: %v", err)
	}
	up()
}

// versionBefore returns the version of the migration applied before the one named name.
func versionBefore(t *testing.T, name string) uint {
	t.Helper()
	files, err := fs.Glob(migrations.Files, "*.up.sql")
	if err != nil {
		t.Fatal(err)
	}
	var versions []uint
	target := uint(0)
	for _, f := range files {
		n, err := strconv.ParseUint(f[:strings.IndexByte(f, '_')], 10, 64)
		if err != nil {
			t.Fatalf("migration %s: %v", f, err)
		}
		versions = append(versions, uint(n))
		if strings.HasSuffix(f, "_"+name+".up.sql") {
			target = uint(n)
		}
	}
	slices.Sort(versions)
	i := slices.Index(versions, target)
	if i < 1 {
		t.Fatalf("no migration %s after another among %v", name, files)
	}
	return versions[i-1]
}
