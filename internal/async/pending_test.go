package async_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
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
	if o := got[bad.Order.ID]; o.Status != async.StatusRejected || o.Rejection == nil || o.Rejection.Code != "internal" {
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
	if n := counter(t, r.registry, "stocksvc_async_orders_failed_total", ""); n != 1 {
		t.Errorf("orders failed = %v, want 1", n)
	}
	if a := mustAudit(t, r, id); a.Sold != 2 {
		t.Errorf("audit = %+v, want 2 sold (the good order only)", a)
	}
}
