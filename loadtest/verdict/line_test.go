package verdict

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestLine: a line whose admissions, orders and leaves agree passes every check; admitting
// more tickets than units, an order past the line, overselling and a left ticket that was used
// each fail the check that names them, and no other.
func TestLine(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	var product int64
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock, max_per_customer, line_admit, line_admission_seconds)
		VALUES ('L', 'l', 0, 2, 1, 50, 60) RETURNING id`).Scan(&product); err != nil {
		t.Fatal(err)
	}
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
	}
	exec(`INSERT INTO lines (product_id) VALUES ($1)`, product)
	ticket := func(customer, status string, place int64) {
		t.Helper()
		switch status {
		case "waiting":
			exec(`INSERT INTO line_tickets (product_id, customer_id, status, place) VALUES ($1, $2, 'waiting', $3)`, product, customer, place)
		case "used":
			exec(`INSERT INTO line_tickets (product_id, customer_id, status, place, admitted_at, admitted_until, ended_at, used_key)
				VALUES ($1, $2, 'used', $3, now(), now() + interval '1 minute', now(), $2)`, product, customer, place)
		case "left":
			exec(`INSERT INTO line_tickets (product_id, customer_id, status, place, ended_at) VALUES ($1, $2, 'left', $3, now())`, product, customer, place)
		}
	}
	ticket("a", "used", 1)
	ticket("b", "used", 2)
	ticket("c", "waiting", 3)
	ticket("d", "left", 4)
	insertOrder(t, pool, "a", product, 1, time.Now(), "")
	insertOrder(t, pool, "b", product, 1, time.Now(), "")
	check := func(wantFailed string) {
		t.Helper()
		invs, err := Line(ctx, pool, product)
		if err != nil {
			t.Fatal(err)
		}
		for _, inv := range invs {
			if failed := !inv.OK; failed != (inv.Name == wantFailed) {
				t.Errorf("after %q: %s ok=%v (%s)", wantFailed, inv.Name, inv.OK, inv.Detail)
			}
		}
	}
	check("")
	// A third admission for two units.
	exec(`UPDATE line_tickets SET status = 'admitted', admitted_at = now(), admitted_until = now() + interval '1 minute', ended_at = NULL
		WHERE product_id = $1 AND customer_id = 'c'`, product)
	check("admissions within the units")
	exec(`UPDATE line_tickets SET status = 'waiting', admitted_at = NULL, admitted_until = NULL WHERE product_id = $1 AND customer_id = 'c'`, product)
	// An order from a customer the line never admitted.
	id := insertOrder(t, pool, "z", product, 1, time.Now(), "")
	invs, err := Line(ctx, pool, product)
	if err != nil {
		t.Fatal(err)
	}
	var failed []string
	for _, inv := range invs {
		if !inv.OK {
			failed = append(failed, inv.Name)
		}
	}
	if got := strings.Join(failed, "; "); got != "nothing oversold on the lined product; every order of the lined product was admitted" {
		t.Errorf("a third order, of a customer never admitted: failed %q", got)
	}
	exec(`DELETE FROM order_items WHERE order_id = $1`, id)
	exec(`DELETE FROM orders WHERE id = $1`, id)
	check("")
	exec(`UPDATE line_tickets SET used_key = 'k' WHERE product_id = $1 AND customer_id = 'd'`, product)
	check("no left ticket used")
}

func TestHeard(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		heard []time.Duration
		never int
		ok    bool
	}{
		{[]time.Duration{10 * time.Millisecond, time.Second}, 0, true},
		{[]time.Duration{10 * time.Millisecond, time.Second + time.Millisecond}, 0, false},
		{[]time.Duration{10 * time.Millisecond}, 1, false},
		{nil, 0, true},
	} {
		if got := Heard("h", c.heard, c.never, time.Second); got.OK != c.ok {
			t.Errorf("Heard(%v, never %d) ok = %v, want %v (%s)", c.heard, c.never, got.OK, c.ok, got.Detail)
		}
	}
}
