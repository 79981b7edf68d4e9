package async_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// holdKey stores an outcome under customer's Idempotency-Key key in a transaction left open, so
// that a group that claims the key waits for it (a unique index waits for the transaction that
// wrote the other row). The returned function ends the transaction: rolled back, the group
// gets the key; committed, it finds it taken.
func holdKey(t *testing.T, pool *pgxpool.Pool, customer, key string) (end func(commit bool)) {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome) VALUES ($1, $2, '\x00', 'sold_out')`, customer, key); err != nil {
		t.Fatalf("hold key %q: %v", key, err)
	}
	ended := false
	end = func(commit bool) {
		if ended {
			return
		}
		ended = true
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Errorf("end the transaction holding %q: %v", key, err)
		}
	}
	t.Cleanup(func() { end(false) })
	return end
}

// awaitGroupBlocked waits until a session of the test's database waits on a lock: the group
// whose key holdKey holds, its transaction under way.
func awaitGroupBlocked(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	testenv.Poll(t, 20*time.Second, "a group to wait on the held key", func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		if err != nil {
			t.Fatalf("read pg_stat_activity: %v", err)
		}
		return n > 0
	})
}

// awaitWaiting waits until n orders wait on r to join a group.
func awaitWaiting(t *testing.T, r *replica, n float64) {
	t.Helper()
	testenv.Poll(t, 20*time.Second, "orders waiting to be grouped", func() bool {
		return testenv.MetricOr(t, r.registry, "stocksvc_async_accept_waiting", -1) == n
	})
}

func ordersOf(t *testing.T, r *replica, customer string) int {
	t.Helper()
	var n int
	if err := r.pool.QueryRow(context.Background(), `SELECT count(*) FROM async_orders WHERE customer_id = $1`, customer).Scan(&n); err != nil {
		t.Fatalf("count orders: %v", err)
	}
	return n
}

type acceptAnswer struct {
	acc async.Acceptance
	err error
}

func (r *replica) acceptAsync(ctx context.Context, customer, key string, items ...stock.Item) <-chan acceptAnswer {
	ch := make(chan acceptAnswer, 1)
	go func() {
		acc, err := r.tryAcceptCtx(ctx, customer, key, items...)
		ch <- acceptAnswer{acc, err}
	}()
	return ch
}

// A request whose caller leaves while it waits to join a group is not accepted: the caller
// was told it was not, and no group writes it.
func TestAbandonedRequestIsNotAccepted(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "LEFT-1", 10)
	end := holdKey(t, r.pool, "c-first", "held")
	first := r.acceptAsync(context.Background(), "c-first", "held", one(id, 1))
	awaitGroupBlocked(t, r.pool) // the acceptor is busy with the first group

	ctx, cancel := context.WithCancel(context.Background())
	left := r.acceptAsync(ctx, "c-left", "", one(id, 1))
	awaitWaiting(t, r, 1)
	cancel()
	if got := <-left; !errors.Is(got.err, context.Canceled) {
		t.Errorf("abandoned request answered %+v, %v; want the context's error", got.acc, got.err)
	}
	if n := testenv.MetricOr(t, r.registry, "stocksvc_async_accept_waiting", -1); n != 0 {
		t.Errorf("%v orders wait after the caller left, want 0", n)
	}

	end(false)
	if got := <-first; got.err != nil || got.acc.Order.Status != async.StatusPending {
		t.Fatalf("first order = %+v, %v; want it accepted", got.acc, got.err)
	}
	// Groups go in arrival order: once a later order is in, any group the abandoned one could
	// have joined has committed.
	r.accept(t, "c-later", "", one(id, 1))
	if n := ordersOf(t, r, "c-left"); n != 0 {
		t.Errorf("the abandoned request left %d orders in line, want none", n)
	}
}

// A request whose group's transaction has begun is answered with the group's outcome, even if
// its caller's context ends meanwhile (the request timeout firing mid-commit): the order was
// accepted, so the answer says so.
func TestRequestInACommittingGroupIsToldItsOutcome(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "MIDCOMMIT-1", 10)
	end := holdKey(t, r.pool, "c1", "held")
	ctx, cancel := context.WithCancel(context.Background())
	answer := r.acceptAsync(ctx, "c1", "held", one(id, 1))
	awaitGroupBlocked(t, r.pool) // its group's transaction is under way
	cancel()
	end(false) // the group gets the key and commits
	got := <-answer
	if got.err != nil {
		t.Fatalf("told %v; want the acceptance, since its group committed", got.err)
	}
	o, err := r.queue.Order(context.Background(), got.acc.Order.ID)
	if err != nil || o.Status != async.StatusPending || o.CustomerID != "c1" {
		t.Errorf("the order the answer names = %+v, %v; want c1's, pending", o, err)
	}
	if n := ordersOf(t, r, "c1"); n != 1 {
		t.Errorf("%d orders of c1, want 1", n)
	}
}

// More requests than the bound waiting to be grouped: the next one is refused at once, busy,
// with nothing written, and counted; those that waited are accepted.
func TestAcceptQueueIsBounded(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{acceptQueue: 2})
	id := createProduct(t, r, "BOUND-1", 10)
	end := holdKey(t, r.pool, "c0", "held")
	answers := []<-chan acceptAnswer{r.acceptAsync(context.Background(), "c0", "held", one(id, 1))}
	awaitGroupBlocked(t, r.pool)
	answers = append(answers, r.acceptAsync(context.Background(), "c1", "", one(id, 1)),
		r.acceptAsync(context.Background(), "c2", "", one(id, 1)))
	awaitWaiting(t, r, 2)

	// Without the bound it would wait behind the held group; the deadline only keeps a
	// failing test from hanging.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := r.tryAcceptCtx(ctx, "c-refused", "", one(id, 1))
	busy, ok := errors.AsType[*stock.BusyError](err)
	if !ok || busy.RetryAfter <= 0 {
		t.Errorf("accept over the bound: %v, want a *stock.BusyError with a RetryAfter", err)
	}
	if n := testenv.MetricOr(t, r.registry, "stocksvc_async_accepts_refused_total", 0); n != 1 {
		t.Errorf("refusals counted = %v, want 1", n)
	}

	end(false)
	var ids []uuid.UUID
	for i, a := range answers {
		got := <-a
		if got.err != nil {
			t.Fatalf("order %d: %v", i, got.err)
		}
		ids = append(ids, got.acc.Order.ID)
	}
	if n := ordersOf(t, r, "c-refused"); n != 0 {
		t.Errorf("the refused order left %d orders in line, want none", n)
	}
	r.start(t)
	r.awaitDecided(t, ids, 20*time.Second)
}

// An order accepted by a commit that Postgres answered without its synchronous standby (the
// warning of a wait ended early, drawn here by a trigger in the acceptance's own statement) is
// not acknowledged: unavailable, outcome unknown, for a single order and for a cart. A retry
// under the same key answers with the order that commit wrote, replayed, once a standby has
// it: nothing is accepted twice.
func TestUnreplicatedAcceptanceIsNotAcknowledged(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	a, b := createProduct(t, r, "UNREPL-A", 5), createProduct(t, r, "UNREPL-B", 5)
	ctx := context.Background()
	if _, err := r.pool.Exec(ctx, `
		CREATE FUNCTION cut_short() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE WARNING 'canceling wait for synchronous replication due to user request'; RETURN NEW; END $$;
		CREATE TRIGGER cut_short BEFORE INSERT ON async_orders FOR EACH ROW EXECUTE FUNCTION cut_short()`); err != nil {
		t.Fatalf("create the trigger: %v", err)
	}
	orders := map[string][]stock.Item{"k-one": {one(a, 1)}, "k-cart": {one(a, 1), one(b, 1)}}
	for key, items := range orders {
		_, err := r.tryAccept("c", key, items...)
		if !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, stock.ErrOutcomeUnknown) {
			t.Errorf("%s answered with the warning: %v, want unavailable, outcome unknown", key, err)
		}
	}
	if _, err := r.pool.Exec(ctx, `DROP TRIGGER cut_short ON async_orders`); err != nil {
		t.Fatal(err)
	}
	var ids []uuid.UUID
	for key, items := range orders {
		acc := r.accept(t, "c", key, items...)
		if !acc.Replayed || acc.Order.Status != async.StatusPending {
			t.Errorf("%s retried: %+v, want the order its first attempt accepted, replayed", key, acc)
		}
		ids = append(ids, acc.Order.ID)
	}
	if n := ordersOf(t, r, "c"); n != 2 {
		t.Errorf("%d orders of c accepted, want 2: each once", n)
	}
	r.start(t)
	r.awaitDecided(t, ids, 20*time.Second)
	if au := mustAudit(t, r, a); au.Sold != 2 {
		t.Errorf("audit of %d = %+v, want 2 sold", a, au)
	}
}
