package async_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// An order whose decision keeps failing with an error nobody expected (here a trigger that
// refuses its row in orders: a Postgres error the purchase path does not classify) is tried
// MaxAttempts times, alone, then rejected with reason internal; the order behind it in the line,
// which shared its first batch, is decided as if nothing had happened.
func TestFailingOrderIsRejectedAfterItsAttempts(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{maxAttempts: 3})
	id := createProduct(t, r, "POISON-1", 5)
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, `
		CREATE FUNCTION refuse_poison() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
		  IF NEW.customer_id = 'poison' THEN RAISE EXCEPTION 'poisoned order'; END IF;
		  RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_poison BEFORE INSERT ON orders FOR EACH ROW EXECUTE FUNCTION refuse_poison();`); err != nil {
		t.Fatalf("create the trigger: %v", err)
	}
	bad := r.accept(t, "poison", "", one(id, 1))
	good := r.accept(t, "c-good", "", one(id, 2))
	r.start(t)
	got := r.awaitDecided(t, []uuid.UUID{bad.Order.ID, good.Order.ID}, 60*time.Second)
	if o := got[bad.Order.ID]; o.Status != async.StatusRejected || o.Rejection == nil || o.Rejection.Reason != async.ReasonInternal {
		t.Errorf("failing order = %+v (rejection %+v), want rejected, reason internal", o, o.Rejection)
	}
	if o := got[good.Order.ID]; o.Status != async.StatusConfirmed {
		t.Errorf("the order behind it = %+v, want confirmed", o)
	}
	var attempts int
	var lastError string
	if err := r.pool.QueryRow(ctx, `SELECT attempts, last_error FROM async_orders WHERE id = $1`, bad.Order.ID).Scan(&attempts, &lastError); err != nil {
		t.Fatalf("read attempts: %v", err)
	}
	if attempts != 3 || !strings.Contains(lastError, "poisoned order") {
		t.Errorf("attempts = %d, last error %q; want 3 and the trigger's message", attempts, lastError)
	}
	if n := testenv.MetricOr(t, r.registry, "stocksvc_async_orders_failed_total", 0); n != 1 {
		t.Errorf("orders failed = %v, want 1", n)
	}
	if a := mustAudit(t, r, id); a.Sold != 2 {
		t.Errorf("audit = %+v, want 2 sold (the good order only)", a)
	}
}

// The age of the oldest pending order is exported per line, for the lines that have waited
// longest (at most 10, the carts counting as one line), and a line that empties leaves no
// series.
func TestOldestPendingPerLine(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	ctx := context.Background()
	if got := testenv.Samples(t, r.registry, "stocksvc_async_oldest_pending_seconds", "product_id"); len(got) != 0 {
		t.Errorf("with nothing pending: %v, want no series", got)
	}
	var ids []uuid.UUID
	var products []int64
	for i := range 12 {
		p := createProduct(t, r, fmt.Sprintf("OLD-%d", i), 10)
		products = append(products, p)
		for range 2 {
			ids = append(ids, r.accept(t, "c", "", one(p, 1)).Order.ID)
		}
		// Line i's oldest order has waited 100·(i+1) s, the other a second less.
		if _, err := r.pool.Exec(ctx, `UPDATE async_orders SET accepted_at = now() - make_interval(secs => $2 - seq % 2)
			WHERE product_id = $1`, p, 100*(i+1)); err != nil {
			t.Fatalf("age line %d: %v", i, err)
		}
	}
	cart := r.accept(t, "c", "", one(products[0], 1), one(products[1], 1))
	ids = append(ids, cart.Order.ID)
	if _, err := r.pool.Exec(ctx, `UPDATE async_orders SET accepted_at = now() - interval '5000 s' WHERE id = $1`, cart.Order.ID); err != nil {
		t.Fatalf("age the cart: %v", err)
	}

	want := map[string]float64{"cart": 5000}
	for i := 3; i < 12; i++ { // the nine oldest products' lines
		want[strconv.FormatInt(products[i], 10)] = float64(100 * (i + 1))
	}
	// The gauges read from Postgres are computed at most once a second: the scrape above
	// answers for a second.
	var got map[string]float64
	testenv.Poll(t, 10*time.Second, "the pending lines to be exported", func() bool {
		got = testenv.Samples(t, r.registry, "stocksvc_async_oldest_pending_seconds", "product_id")
		return len(got) > 0
	})
	if len(got) != len(want) {
		t.Errorf("%d lines exported, want %d: %v", len(got), len(want), got)
	}
	for line, age := range want {
		// The scrape comes after the update, by however long the machine takes.
		if g, ok := got[line]; !ok || g < age || g > age+60 {
			t.Errorf("line %s: age %v (exported %t), want %v s and a little", line, g, ok, age)
		}
	}

	r.start(t)
	r.awaitDecided(t, ids, 30*time.Second)
	// Decided is the record; the row says so once the decision is copied, right after.
	testenv.Poll(t, 20*time.Second, "every line's series to go once its orders are decided", func() bool {
		return len(testenv.Samples(t, r.registry, "stocksvc_async_oldest_pending_seconds", "product_id")) == 0
	})
}
