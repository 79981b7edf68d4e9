package async_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is what replicas share: a database and a Redis key prefix.
type world struct {
	databaseURL string
	redisURL    string
	prefix      string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	_, prefix := testenv.Redis(t)
	return &world{databaseURL: testenv.DatabaseURL(t), redisURL: testenv.RedisURL(t), prefix: prefix}
}

// replica is one service instance with its queue, as a separate process would have them.
type replica struct {
	svc      *stock.Service
	queue    *async.Queue
	pool     *pgxpool.Pool
	locks    *lock.Client
	registry *prometheus.Registry
	started  bool
}

type replicaOptions struct {
	lockWait    time.Duration
	round       int
	acceptQueue int
	maxAttempts int
}

// replica returns a replica whose queue is not started: the test starts it (start) when the
// orders it needs are in line.
func (w *world) replica(t *testing.T, o replicaOptions) *replica {
	t.Helper()
	pcfg, err := pgxpool.ParseConfig(w.databaseURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	// As the service requires (STOCKSVC_ASYNC_WORKERS at most half the pool): each of the 4
	// workers draining a line holds a connection for its lock, and its purchases need more.
	// pgxpool's default, 4 on a 2-core machine, lets 4 lines take every connection.
	pcfg.MaxConns = 10
	pcfg.ConnConfig.OnNotice = stockpg.OnNotice // as cmd sets it
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		t.Fatalf("connect postgres: %v", err)
	}
	opts, err := redis.ParseURL(w.redisURL)
	if err != nil {
		t.Fatalf("parse redis url: %v", err)
	}
	rdb := redis.NewClient(opts)
	locks := lock.New(rdb, lock.WithNamespace(w.prefix))
	if o.lockWait == 0 {
		o.lockWait = 5 * time.Second
	}
	reg := prometheus.NewRegistry()
	svc := stock.NewService(stockpg.New(pool), stocklock.NewRedis(locks, stocklock.Config{Wait: o.lockWait}),
		stock.Config{QueueWait: o.lockWait}, stock.NewMetrics(reg))
	q, err := async.New(pool, svc, async.Config{Registerer: reg, Round: o.round, Sweep: 200 * time.Millisecond,
		AcceptQueue: o.acceptQueue, MaxAttempts: o.maxAttempts})
	if err != nil {
		t.Fatalf("new queue: %v", err)
	}
	r := &replica{svc: svc, queue: q, pool: pool, locks: locks, registry: reg}
	t.Cleanup(func() {
		if r.started {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := q.Stop(ctx); err != nil {
				t.Errorf("stop queue: %v", err)
			}
		}
		svc.Close()
		_ = locks.Close()
		_ = rdb.Close()
		pool.Close()
	})
	return r
}

func (r *replica) start(t *testing.T) {
	t.Helper()
	if err := r.queue.Start(context.Background()); err != nil {
		t.Fatalf("start queue: %v", err)
	}
	r.started = true
}

func createProduct(t *testing.T, r *replica, sku string, units int64) int64 {
	t.Helper()
	p, err := r.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: sku, Name: sku, Stock: units})
	if err != nil {
		t.Fatalf("create product: %v", err)
	}
	return p.ID
}

func (r *replica) accept(t *testing.T, customer, key string, items ...stock.Item) async.Acceptance {
	t.Helper()
	acc, err := r.tryAccept(customer, key, items...)
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	return acc
}

func (r *replica) tryAccept(customer, key string, items ...stock.Item) (async.Acceptance, error) {
	return r.tryAcceptCtx(context.Background(), customer, key, items...)
}

func (r *replica) tryAcceptCtx(ctx context.Context, customer, key string, items ...stock.Item) (async.Acceptance, error) {
	p, err := r.svc.Prepare(stock.OrderRequest{CustomerID: customer, Items: items, IdempotencyKey: key})
	if err != nil {
		return async.Acceptance{}, err
	}
	return r.queue.Accept(ctx, p)
}

// awaitDecided waits, up to a deadline, until every order in ids is decided, and returns them.
// It watches the database, which is what the clients watch: there is no event to wait on
// across processes.
func (r *replica) awaitDecided(t *testing.T, ids []uuid.UUID, within time.Duration) map[uuid.UUID]async.Order {
	t.Helper()
	deadline := time.Now().Add(within)
	out := map[uuid.UUID]async.Order{}
	for {
		for _, id := range ids {
			if _, done := out[id]; done {
				continue
			}
			o, err := r.queue.Order(context.Background(), id)
			if err != nil {
				t.Fatalf("order %s: %v", id, err)
			}
			if o.Status != async.StatusPending {
				out[id] = o
			}
		}
		if len(out) == len(ids) {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders still pending after %v", len(ids)-len(out), len(ids), within)
		}
		time.Sleep(10 * time.Millisecond) // polling the database, as a client polls GET
	}
}

// awaitCopied waits, up to 20 s, until order id's own row says confirmed: its decision copied
// from the record by who. Any status but pending and confirmed fails at once.
func (r *replica) awaitCopied(t *testing.T, id uuid.UUID, who string) {
	t.Helper()
	var status string
	testenv.Poll(t, 20*time.Second, "the decision copied by "+who, func() bool {
		if err := r.pool.QueryRow(context.Background(), `SELECT status FROM async_orders WHERE id = $1`, id).Scan(&status); err != nil {
			t.Fatalf("stored status: %v", err)
		}
		if status != "pending" && status != "confirmed" {
			t.Fatalf("stored status = %q; want confirmed, copied by %s", status, who)
		}
		return status == "confirmed"
	})
}

func one(productID, quantity int64) stock.Item {
	return stock.Item{ProductID: productID, Quantity: quantity}
}

func mustAudit(t *testing.T, r *replica, id int64) stock.Audit {
	t.Helper()
	a, err := r.svc.Audit(context.Background(), id)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	if !a.Consistent() {
		t.Fatalf("audit inconsistent: %+v", a)
	}
	return a
}

// Orders accepted before any worker runs are decided in the order they were accepted: with
// 5 units and 12 orders of one unit, exactly the first 5 are confirmed; the others are
// rejected, sold out, with what was left when their turn came.
func TestLineIsDecidedInArrivalOrder(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{round: 3}) // several rounds, so order across rounds counts
	id := createProduct(t, r, "LINE-1", 5)
	var ids []uuid.UUID
	for i := range 12 {
		acc := r.accept(t, fmt.Sprintf("c%d", i), "", one(id, 1))
		if acc.Order.Status != async.StatusPending || acc.Replayed {
			t.Fatalf("accepted order = %+v, want pending and new", acc)
		}
		ids = append(ids, acc.Order.ID)
	}
	r.start(t)
	got := r.awaitDecided(t, ids, 20*time.Second)
	for i, oid := range ids {
		o := got[oid]
		want := async.StatusConfirmed
		if i >= 5 {
			want = async.StatusRejected
		}
		if o.Status != want {
			t.Errorf("order %d (%s) is %s, want %s", i, oid, o.Status, want)
		}
		if want == async.StatusRejected && (o.Rejection == nil || o.Rejection.Reason != async.ReasonSoldOut || o.Rejection.Available != 0 || o.Rejection.Requested != 1) {
			t.Errorf("order %d rejection = %+v, want sold-out, 1 requested, 0 available", i, o.Rejection)
		}
		if o.DecidedAt.Before(o.AcceptedAt) {
			t.Errorf("order %d decided at %v, before it was accepted at %v", i, o.DecidedAt, o.AcceptedAt)
		}
	}
	if a := mustAudit(t, r, id); a.Sold != 5 || a.Stock != 0 {
		t.Errorf("audit = %+v, want 5 sold, 0 left", a)
	}
	// A confirmed accepted order is an order like any other, under the same id.
	if o, err := r.svc.Order(context.Background(), ids[0]); err != nil || o.Status != stock.OrderStatusConfirmed {
		t.Errorf("order %s through the service = %+v, %v; want confirmed", ids[0], o, err)
	}
}

// Three replicas accept 240 orders at once for 80 units and drain them together: every order
// is decided, exactly the 80 accepted first are confirmed (one unit each, first come first
// served across replicas), no order is confirmed twice, and the stock adds up.
func TestConcurrentLinesAcrossReplicas(t *testing.T) {
	w := newWorld(t)
	replicas := []*replica{w.replica(t, replicaOptions{}), w.replica(t, replicaOptions{}), w.replica(t, replicaOptions{})}
	id := createProduct(t, replicas[0], "LINE-2", 80)
	for _, r := range replicas {
		r.start(t)
	}
	const orders = 240
	var mu sync.Mutex
	type accepted struct {
		id uuid.UUID
		at time.Time
	}
	var all []accepted
	var wg sync.WaitGroup
	for i := range orders {
		r := replicas[i%len(replicas)]
		wg.Go(func() {
			acc, err := r.tryAccept(fmt.Sprintf("c%d", i), fmt.Sprintf("key-%d", i), one(id, 1))
			if err != nil {
				t.Errorf("accept %d: %v", i, err)
				return
			}
			mu.Lock()
			all = append(all, accepted{acc.Order.ID, acc.Order.AcceptedAt})
			mu.Unlock()
		})
	}
	wg.Wait()
	ids := make([]uuid.UUID, len(all))
	for i, a := range all {
		ids[i] = a.id
	}
	got := replicas[1].awaitDecided(t, ids, 30*time.Second)
	confirmed := 0
	for _, o := range got {
		if o.Status == async.StatusConfirmed {
			confirmed++
		}
	}
	if confirmed != 80 {
		t.Errorf("%d orders confirmed, want 80", confirmed)
	}
	if a := mustAudit(t, replicas[0], id); a.Sold != 80 || a.Stock != 0 {
		t.Errorf("audit = %+v, want 80 sold, 0 left", a)
	}
	// Arrival order is the line's sequence; the first 80 in it are the confirmed ones.
	rows, err := replicas[0].pool.Query(context.Background(),
		`SELECT a.status, o.id IS NOT NULL FROM async_orders a LEFT JOIN orders o ON o.id = a.id WHERE a.product_id = $1 ORDER BY a.seq`, id)
	if err != nil {
		t.Fatalf("read line: %v", err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var status string
		var ordered bool
		if err := rows.Scan(&status, &ordered); err != nil {
			t.Fatalf("scan: %v", err)
		}
		want := n < 80
		if (status == async.StatusConfirmed) != want || ordered != want {
			t.Errorf("order %d in line: status %s, order row %t; want confirmed %t", n, status, ordered, want)
		}
		n++
	}
	if n != orders {
		t.Errorf("%d orders in line, want %d", n, orders)
	}
}

// An order decided but not yet recorded — its replica stopped between the purchase's commit
// and the copy — is shown decided at once (the record is the decision), and draining its line
// replays the record instead of buying again.
func TestDecisionIsNotTakenTwice(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "TWICE-1", 3)
	acc := r.accept(t, "c1", "", one(id, 2))
	// The purchase path decides it, as a worker would before stopping.
	d := r.svc.DecideAccepted(context.Background(), []stock.Accepted{{ID: acc.Order.ID, CustomerID: "c1", Items: []stock.Item{one(id, 2)}}})
	if d[0].Err != nil || d[0].Result.Replayed {
		t.Fatalf("first decision = %+v, want a new confirmed order", d[0])
	}
	o, err := r.queue.Order(context.Background(), acc.Order.ID)
	if err != nil || o.Status != async.StatusConfirmed {
		t.Fatalf("order before the copy = %+v, %v; want confirmed", o, err)
	}
	r.start(t)
	// Order already says confirmed (from the record); wait for the drain's copy.
	r.awaitCopied(t, acc.Order.ID, "the drain")
	if a := mustAudit(t, r, id); a.Sold != 2 {
		t.Errorf("audit = %+v, want 2 sold: the order bought once", a)
	}
	// Deciding it again is a replay too.
	d = r.svc.DecideAccepted(context.Background(), []stock.Accepted{{ID: acc.Order.ID, CustomerID: "c1", Items: []stock.Item{one(id, 2)}}})
	if d[0].Err != nil || !d[0].Result.Replayed {
		t.Errorf("second decision = %+v, want a replay", d[0])
	}
}

// An Idempotency-Key sent with an accepted order belongs to that order, whichever way the key
// comes back: asynchronously (the same order, replayed), synchronously (the service answers
// with the accepted order's id, buying nothing), or with another body (refused). A key first
// used synchronously is answered, on the asynchronous route, with its stored outcome.
func TestIdempotencyAcrossRoutes(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "KEYS-1", 1)
	first := r.accept(t, "c1", "k-async", one(id, 1))

	again := r.accept(t, "c1", "k-async", one(id, 1))
	if !again.Replayed || again.Order.ID != first.Order.ID {
		t.Errorf("retry = %+v, want order %s replayed", again, first.Order.ID)
	}
	if _, err := r.tryAccept("c1", "k-async", one(id, 2)); !errors.Is(err, stock.ErrIdempotencyKeyReused) {
		t.Errorf("other body under the key: err = %v, want ErrIdempotencyKeyReused", err)
	}
	syncRetry, err := r.svc.PlaceOrder(context.Background(), stock.OrderRequest{CustomerID: "c1", Items: []stock.Item{one(id, 1)}, IdempotencyKey: "k-async"})
	if err != nil || syncRetry.Accepted == nil || *syncRetry.Accepted != first.Order.ID || !syncRetry.Replayed || syncRetry.Order.ID != uuid.Nil {
		t.Errorf("synchronous retry = %+v, %v; want order %s, accepted, replayed, nothing bought", syncRetry, err, first.Order.ID)
	}

	// Decided: the replay shows the decision.
	r.start(t)
	r.awaitDecided(t, []uuid.UUID{first.Order.ID}, 20*time.Second)
	again = r.accept(t, "c1", "k-async", one(id, 1))
	if !again.Replayed || again.Order.Status != async.StatusConfirmed {
		t.Errorf("retry after the decision = %+v, want the confirmed order replayed", again)
	}

	// Keys first used synchronously: a confirmed order, and a refusal.
	other := createProduct(t, r, "KEYS-2", 1)
	res, err := r.svc.PlaceOrder(context.Background(), stock.OrderRequest{CustomerID: "c2", Items: []stock.Item{one(other, 1)}, IdempotencyKey: "k-sync"})
	if err != nil {
		t.Fatalf("synchronous order: %v", err)
	}
	acc := r.accept(t, "c2", "k-sync", one(other, 1))
	if acc.Confirmed == nil || acc.Confirmed.ID != res.Order.ID || !acc.Replayed {
		t.Errorf("asynchronous retry of a confirmed key = %+v, want order %s replayed", acc, res.Order.ID)
	}
	if _, err := r.svc.PlaceOrder(context.Background(), stock.OrderRequest{CustomerID: "c3", Items: []stock.Item{one(other, 1)}, IdempotencyKey: "k-sold-out"}); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("synchronous order after sell-out: %v, want sold out", err)
	}
	_, err = r.tryAccept("c3", "k-sold-out", one(other, 1))
	if soldOut, ok := errors.AsType[*stock.SoldOutError](err); !ok || !soldOut.Replayed {
		t.Errorf("asynchronous retry of a refused key: err = %v, want the refusal replayed", err)
	}
	if a := mustAudit(t, r, id); a.Sold != 1 {
		t.Errorf("audit = %+v, want the keyed order bought once", a)
	}
}

// Orders for products that do not exist are refused at once, and nothing is left in line.
func TestAcceptRefusesMissingProducts(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "MISS-1", 1)
	for _, items := range [][]stock.Item{{one(id+100, 1)}, {one(id, 1), one(id+100, 1)}} {
		_, err := r.tryAccept("c1", "k-"+fmt.Sprint(len(items)), items...)
		if missing, ok := errors.AsType[*stock.ProductNotFoundError](err); !ok || missing.ProductID != id+100 {
			t.Errorf("accept %v: err = %v, want product %d not found", items, err, id+100)
		}
	}
	var n int
	if err := r.pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM async_orders) + (SELECT count(*) FROM idempotency_keys)`).Scan(&n); err != nil || n != 0 {
		t.Errorf("rows left behind = %d, %v; want 0", n, err)
	}
}

// Carts are decided whole, each on its own (a cart is in no product's line, so two carts are
// not ordered against each other): of two carts that both want product b's last unit, one is
// confirmed and the other rejected, naming b, with nothing sold of a for it.
func TestCarts(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	a := createProduct(t, r, "CART-A", 2)
	b := createProduct(t, r, "CART-B", 1)
	first := r.accept(t, "c1", "", one(b, 1), one(a, 1))
	second := r.accept(t, "c2", "", one(a, 1), one(b, 1))
	r.start(t)
	got := r.awaitDecided(t, []uuid.UUID{first.Order.ID, second.Order.ID}, 20*time.Second)
	x, y := got[first.Order.ID], got[second.Order.ID]
	if x.Status == y.Status {
		t.Fatalf("carts are %s and %s, want one confirmed and one rejected", x.Status, y.Status)
	}
	if x.Status == async.StatusConfirmed {
		x, y = y, x
	}
	if x.Rejection == nil || x.Rejection.Reason != async.ReasonSoldOut || x.Rejection.ProductID != b || x.Rejection.Available != 0 {
		t.Errorf("rejected cart: %+v, want sold-out naming product %d with 0 left", x.Rejection, b)
	}
	if au := mustAudit(t, r, a); au.Sold != 1 {
		t.Errorf("product a: %+v, want 1 sold", au)
	}
}

// An order whose product's lock is held elsewhere waits in line — its job snoozes — and is
// decided once the lock is free; it is never failed for being busy.
func TestBusyLineWaits(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{lockWait: 100 * time.Millisecond})
	id := createProduct(t, r, "BUSY-1", 1)
	holder, err := r.locks.Obtain(context.Background(), stocklock.Name(w.prefix, id), time.Minute, nil)
	if err != nil {
		t.Fatalf("hold the product's lock: %v", err)
	}
	acc := r.accept(t, "c1", "", one(id, 1))
	r.start(t)
	deadline := time.Now().Add(20 * time.Second)
	for testenv.MetricOr(t, r.registry, "stocksvc_async_retries_total", 0, "reason", "busy") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("the line was not retried as busy")
		}
		time.Sleep(10 * time.Millisecond) // watching a metric of the running queue
	}
	if o, err := r.queue.Order(context.Background(), acc.Order.ID); err != nil || o.Status != async.StatusPending {
		t.Fatalf("order while the lock is held = %+v, %v; want pending", o, err)
	}
	if err := holder.Release(context.Background()); err != nil {
		t.Fatalf("release: %v", err)
	}
	if o := r.awaitDecided(t, []uuid.UUID{acc.Order.ID}, 20*time.Second)[acc.Order.ID]; o.Status != async.StatusConfirmed {
		t.Errorf("order after the lock was freed = %+v, want confirmed", o)
	}
}

// A line whose job was lost (the replica holding it was killed, say) is restarted by the sweep.
func TestSweepRestartsALineWithoutAJob(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "SWEEP-1", 1)
	acc := r.accept(t, "c1", "", one(id, 1))
	if _, err := r.pool.Exec(context.Background(), `DELETE FROM river_job WHERE kind = 'stocksvc_drain_line'`); err != nil {
		t.Fatalf("delete the job: %v", err)
	}
	r.start(t)
	if o := r.awaitDecided(t, []uuid.UUID{acc.Order.ID}, 20*time.Second)[acc.Order.ID]; o.Status != async.StatusConfirmed {
		t.Errorf("order = %+v, want confirmed", o)
	}
	if n := testenv.MetricOr(t, r.registry, "stocksvc_async_sweep_jobs_total", 0); n < 1 {
		t.Errorf("sweep jobs = %v, want at least 1", n)
	}
}

// Purging old idempotency records keeps those of orders still pending, however old — the
// client's key and the order's decision record — and purges them once the order is decided.
func TestPurgeKeepsPendingOrdersKeys(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "PURGE-1", 5)
	decided := r.accept(t, "c1", "k-decided", one(id, 1))
	pending := r.accept(t, "c2", "k-pending", one(id, 1))
	// One order decided and copied, the other decided by the purchase path but not copied.
	r.start(t)
	r.awaitDecided(t, []uuid.UUID{decided.Order.ID}, 20*time.Second)
	ctx := context.Background()
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := r.queue.Stop(stopCtx); err != nil {
		t.Fatalf("stop: %v", err)
	}
	r.started = false
	if _, err := r.pool.Exec(ctx, `UPDATE async_orders SET status = 'pending', decided_at = NULL, reason = NULL WHERE id = $1`, pending.Order.ID); err != nil {
		t.Fatalf("make the order pending again: %v", err)
	}
	keys := func() []string {
		rows, err := r.pool.Query(ctx, `SELECT key FROM idempotency_keys ORDER BY key`)
		if err != nil {
			t.Fatalf("read keys: %v", err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				t.Fatalf("scan: %v", err)
			}
			out = append(out, k)
		}
		return out
	}
	if got := keys(); len(got) != 4 {
		t.Fatalf("keys before the purge = %q, want 4 (two client keys, two decisions)", got)
	}
	if _, err := r.pool.Exec(ctx, `UPDATE idempotency_keys SET created_at = created_at - interval '48 hours'`); err != nil {
		t.Fatalf("age the records: %v", err)
	}
	if _, err := r.svc.PurgeIdempotencyKeys(ctx, time.Hour); err != nil {
		t.Fatalf("purge: %v", err)
	}
	want := []string{stock.AcceptedKey(pending.Order.ID), "k-pending"}
	if got := keys(); !slices.Equal(got, want) {
		t.Errorf("keys after the purge = %q, want the pending order's %q", got, want)
	}
}

// Orders accepted at the same moment share a group (one transaction): a key sent by many of
// them at once names one order, answered to all; an order for a missing product in the group
// is refused alone; every other order of the group is accepted.
func TestAcceptGroups(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "GROUP-1", 100)
	const same = 40
	var wg sync.WaitGroup
	ids := make([]uuid.UUID, same)
	replayed := make([]bool, same)
	var others []uuid.UUID
	var mu sync.Mutex
	for i := range same {
		wg.Go(func() {
			acc, err := r.tryAccept("c1", "one-key", one(id, 1))
			if err != nil {
				t.Errorf("accept %d: %v", i, err)
				return
			}
			ids[i], replayed[i] = acc.Order.ID, acc.Replayed
		})
		wg.Go(func() {
			acc, err := r.tryAccept(fmt.Sprintf("c-%d", i), "", one(id, 1))
			if err != nil {
				t.Errorf("accept other %d: %v", i, err)
				return
			}
			mu.Lock()
			others = append(others, acc.Order.ID)
			mu.Unlock()
		})
		wg.Go(func() {
			if _, err := r.tryAccept("c2", "", one(id+1000, 1)); !errors.Is(err, stock.ErrProductNotFound) {
				t.Errorf("accept for a missing product: %v, want not found", err)
			}
		})
	}
	wg.Wait()
	news := 0
	for i := range same {
		if ids[i] != ids[0] {
			t.Fatalf("answer %d named order %s, answer 0 %s: one key, two orders", i, ids[i], ids[0])
		}
		if !replayed[i] {
			news++
		}
	}
	if news != 1 {
		t.Errorf("%d answers were a new order, want exactly 1 (the rest replayed)", news)
	}
	var inLine int
	if err := r.pool.QueryRow(context.Background(), `SELECT count(*) FROM async_orders WHERE product_id = $1`, id).Scan(&inLine); err != nil || inLine != same+1 {
		t.Errorf("orders in line = %d, %v; want %d (the keyed one once, and the others)", inLine, err, same+1)
	}
	r.start(t)
	r.awaitDecided(t, append(others, ids[0]), 20*time.Second)
	if a := mustAudit(t, r, id); a.Sold != same+1 {
		t.Errorf("audit = %+v, want %d sold", a, same+1)
	}
}

// A cart decided by the purchase path but not copied — its worker stopped in between — is
// copied by its next job, not left pending behind a decided record.
func TestCartDecidedButNotCopied(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	a := createProduct(t, r, "COPY-A", 1)
	b := createProduct(t, r, "COPY-B", 1)
	acc := r.accept(t, "c1", "", one(a, 1), one(b, 1))
	d := r.svc.DecideAccepted(context.Background(), []stock.Accepted{{ID: acc.Order.ID, CustomerID: "c1", Items: acc.Order.Items}})
	if d[0].Err != nil {
		t.Fatalf("decide: %v", d[0].Err)
	}
	r.start(t)
	r.awaitCopied(t, acc.Order.ID, "the cart's job")
	if au := mustAudit(t, r, a); au.Sold != 1 {
		t.Errorf("audit = %+v, want 1 sold: bought once", au)
	}
}

// Place is the asynchronous route in one call: an order the purchase path would refuse as
// invalid, or for a product that does not exist, is refused before anything is written; a
// valid one is accepted, pending.
func TestPlace(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "PLACE-1", 3)
	ctx := context.Background()

	_, err := r.queue.Place(ctx, stock.OrderRequest{CustomerID: "", Items: []stock.Item{one(id, 1)}})
	if invalid, ok := errors.AsType[*stock.ValidationError](err); !ok || invalid.Field != "customer_id" {
		t.Errorf("no customer: err = %v, want a ValidationError naming customer_id", err)
	}
	_, err = r.queue.Place(ctx, stock.OrderRequest{CustomerID: "c1", Items: []stock.Item{one(id+100, 1)}, IdempotencyKey: "k-missing"})
	if missing, ok := errors.AsType[*stock.ProductNotFoundError](err); !ok || missing.ProductID != id+100 {
		t.Errorf("missing product: err = %v, want product %d not found", err, id+100)
	}
	if n := ordersOf(t, r, "") + ordersOf(t, r, "c1"); n != 0 {
		t.Errorf("%d orders accepted from refused requests, want 0", n)
	}

	acc, err := r.queue.Place(ctx, stock.OrderRequest{CustomerID: "c2", Items: []stock.Item{one(id, 2)}, IdempotencyKey: "k-place"})
	if err != nil || acc.Replayed || acc.Confirmed != nil || acc.Order.Status != async.StatusPending || acc.Order.CustomerID != "c2" {
		t.Fatalf("valid order = %+v, %v; want c2's order accepted, pending", acc, err)
	}
	again, err := r.queue.Place(ctx, stock.OrderRequest{CustomerID: "c2", Items: []stock.Item{one(id, 2)}, IdempotencyKey: "k-place"})
	if err != nil || !again.Replayed || again.Order.ID != acc.Order.ID {
		t.Errorf("retry = %+v, %v; want order %s replayed", again, err, acc.Order.ID)
	}
}

// Find answers for every order id, whichever route placed it: an order accepted for later is
// found pending, then — once the purchase path confirms it, under its own id — as the
// purchase path's order; a synchronous order is the purchase path's at once; an unknown id is
// no order.
func TestFind(t *testing.T) {
	w := newWorld(t)
	r := w.replica(t, replicaOptions{})
	id := createProduct(t, r, "FIND-1", 5)
	ctx := context.Background()

	acc := r.accept(t, "c1", "", one(id, 1))
	found, err := r.queue.Find(ctx, acc.Order.ID)
	if err != nil || found.Confirmed != nil || found.Order.ID != acc.Order.ID || found.Order.Status != async.StatusPending {
		t.Errorf("pending order: Find = %+v, %v; want the accepted order, pending", found, err)
	}

	r.start(t)
	r.awaitCopied(t, acc.Order.ID, "the drain")
	found, err = r.queue.Find(ctx, acc.Order.ID)
	if err != nil || found.Confirmed == nil || found.Confirmed.ID != acc.Order.ID || found.Confirmed.CustomerID != "c1" {
		t.Errorf("confirmed order: Find = %+v, %v; want the purchase path's order %s", found, err, acc.Order.ID)
	}

	placed, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "c2", Items: []stock.Item{one(id, 1)}})
	if err != nil {
		t.Fatalf("synchronous order: %v", err)
	}
	found, err = r.queue.Find(ctx, placed.Order.ID)
	if err != nil || found.Confirmed == nil || found.Confirmed.ID != placed.Order.ID {
		t.Errorf("synchronous order: Find = %+v, %v; want order %s", found, err, placed.Order.ID)
	}

	if _, err := r.queue.Find(ctx, uuid.Must(uuid.NewV7())); !errors.Is(err, stock.ErrOrderNotFound) {
		t.Errorf("unknown id: err = %v, want ErrOrderNotFound", err)
	}
}
