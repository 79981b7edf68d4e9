package stock_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestValidateOrder(t *testing.T) {
	t.Parallel()
	r := newMemWorld().replica(t, stock.DefaultDefense(), replicaOptions{})
	many := make([]stock.Item, stock.MaxItems+1)
	for i := range many {
		many[i] = one(int64(i+1), 1)
	}
	tests := []struct {
		name  string
		req   stock.OrderRequest
		field string
	}{
		{"no customer", order("", one(1, 1)), "customer_id"},
		{"blank customer", order("  ", one(1, 1)), "customer_id"},
		{"long customer", order(strings.Repeat("c", stock.MaxCustomerIDLen+1), one(1, 1)), "customer_id"},
		{"NUL in customer", order("a\x00b", one(1, 1)), "customer_id"},
		{"control character in customer", order("a\x1bb", one(1, 1)), "customer_id"},
		{"customer not UTF-8", order("a\xffb", one(1, 1)), "customer_id"},
		{"no items", order("c"), "items"},
		{"too many items", order("c", many...), "items"},
		{"zero quantity", order("c", one(1, 0)), "items[0].quantity"},
		{"quantity above max", order("c", one(1, 11)), "items[0].quantity"},
		{"negative product", order("c", one(-1, 1)), "items[0].product_id"},
		{"duplicate product", order("c", one(2, 1), one(1, 1), one(2, 3)), "items[2].product_id"},
		{"key too long", stock.OrderRequest{CustomerID: "c", Items: []stock.Item{one(1, 1)}, IdempotencyKey: strings.Repeat("k", 256)}, "Idempotency-Key"},
		{"key with control character", stock.OrderRequest{CustomerID: "c", Items: []stock.Item{one(1, 1)}, IdempotencyKey: "a\nb"}, "Idempotency-Key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := r.svc.PlaceOrder(context.Background(), tt.req)
			var invalid *stock.ValidationError
			if !errors.As(err, &invalid) || !errors.Is(err, stock.ErrInvalid) {
				t.Fatalf("err = %v, want a validation error", err)
			}
			if invalid.Field != tt.field {
				t.Errorf("field = %q, want %q", invalid.Field, tt.field)
			}
		})
	}
}

func TestParseDefense(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    stock.Defense
		wantStr string
		wantErr bool
	}{
		{in: "lock,version,guard", want: stock.DefaultDefense(), wantStr: "lock,version,guard"},
		{in: " guard , lock ", want: stock.Defense{Lock: true, Guard: true, Check: true}, wantStr: "lock,guard"},
		{in: "check", want: stock.Defense{Check: true}, wantStr: "check"},
		{in: "none", want: stock.Defense{}, wantStr: "none"},
		{in: "", wantErr: true},
		{in: "lock,fast", wantErr: true},
	}
	for _, tt := range tests {
		got, err := stock.ParseDefense(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseDefense(%q) error = %v, want error %t", tt.in, err, tt.wantErr)
			continue
		}
		if tt.wantErr {
			continue
		}
		if got != tt.want || got.String() != tt.wantStr {
			t.Errorf("ParseDefense(%q) = %+v (%s), want %+v (%s)", tt.in, got, got, tt.want, tt.wantStr)
		}
	}
}

func TestCartIsAllOrNothing(t *testing.T) {
	t.Parallel()
	r := newMemWorld().replica(t, stock.DefaultDefense(), replicaOptions{})
	plenty := createProduct(t, r, "plenty", 10)
	scarce := createProduct(t, r, "scarce", 1)

	_, err := r.svc.PlaceOrder(context.Background(), order("c", one(plenty, 2), one(scarce, 2)))
	var sold *stock.SoldOutError
	if !errors.As(err, &sold) || sold.ProductID != scarce {
		t.Fatalf("err = %v, want sold out naming product %d", err, scarce)
	}
	if a := mustAudit(t, r, plenty); a.Stock != 10 || a.Sold != 0 {
		t.Errorf("plenty after refused cart: %+v, want untouched", a)
	}
	// A product that does not exist is the answer, whichever item comes first (the missing
	// id sorts after the scarce one here).
	_, err = r.svc.PlaceOrder(context.Background(), order("c", one(scarce, 2), one(scarce+1000, 1)))
	var missing *stock.ProductNotFoundError
	if !errors.As(err, &missing) || missing.ProductID != scarce+1000 {
		t.Errorf("cart with a short and a missing product: err = %v, want product %d not found", err, scarce+1000)
	}
	res, err := r.svc.PlaceOrder(context.Background(), order("c", one(scarce, 1), one(plenty, 2)))
	if err != nil {
		t.Fatalf("cart: %v", err)
	}
	if got := res.Order.Items; len(got) != 2 || got[0].ProductID != min(plenty, scarce) {
		t.Errorf("items = %+v, want both, sorted by product id", got)
	}
}

// TestCrossedCartsNeverDeadlock buys carts {a,b} and {b,a} concurrently: locks and rows are
// always taken in ascending order, so nobody waits in a cycle and every order completes.
func TestCrossedCartsNeverDeadlock(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	replicas := []*replica{w.replica(t, stock.DefaultDefense(), replicaOptions{}), w.replica(t, stock.DefaultDefense(), replicaOptions{})}
	a := createProduct(t, replicas[0], "cart-a", 1000)
	b := createProduct(t, replicas[0], "cart-b", 1000)
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for i := range 16 {
		wg.Go(func() {
			for j := range 10 {
				items := []stock.Item{one(a, 1), one(b, 1)}
				if (i+j)%2 == 1 {
					items[0], items[1] = items[1], items[0]
				}
				if _, err := replicas[i%2].svc.PlaceOrder(context.Background(), order("c", items...)); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("%d carts failed, first: %v", len(errs), errs[0])
	}
	for _, id := range []int64{a, b} {
		if au := mustAudit(t, replicas[0], id); au.Sold != 160 || !au.Consistent() {
			t.Errorf("product %d audit = %+v, want 160 sold", id, au)
		}
	}
}

func TestBusyWhenLockHeldPastWait(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{lockWait: 50 * time.Millisecond})
	id := createProduct(t, r, "busy", 5)
	l, err := lock.New(r.redis).Obtain(context.Background(), stocklock.Name(w.prefix, id), time.Minute, nil)
	if err != nil {
		t.Fatalf("hold the lock: %v", err)
	}
	defer l.Release(context.Background())

	_, err = r.svc.PlaceOrder(context.Background(), order("c", one(id, 1)))
	if !errors.Is(err, stock.ErrBusy) {
		t.Fatalf("err = %v, want ErrBusy", err)
	}
	if a := mustAudit(t, r, id); a.Stock != 5 {
		t.Errorf("stock = %d, want 5: a busy answer must sell nothing", a.Stock)
	}
}

func TestUnavailableDependencies(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	healthy := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	id := createProduct(t, healthy, "unavailable", 5)

	deadRedis := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = deadRedis.Close() })
	noRedis := stock.NewService(stockpg.New(healthy.pool),
		stocklock.NewRedis(newLockClient(t, deadRedis, w.prefix), stocklock.Config{}),
		stock.Config{}, nil)
	if _, err := noRedis.PlaceOrder(context.Background(), order("c", one(id, 1))); !errors.Is(err, stock.ErrUnavailable) {
		t.Errorf("redis down: err = %v, want ErrUnavailable", err)
	}

	deadPool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	if err != nil {
		t.Fatalf("pool: %v", err)
	}
	t.Cleanup(deadPool.Close)
	noPostgres := stock.NewService(stockpg.New(deadPool),
		stocklock.NewRedis(newLockClient(t, healthy.redis, w.prefix), stocklock.Config{}),
		stock.Config{}, nil)
	if _, err := noPostgres.PlaceOrder(context.Background(), order("c", one(id, 1))); !errors.Is(err, stock.ErrUnavailable) {
		t.Errorf("postgres down: err = %v, want ErrUnavailable", err)
	}
	if _, err := noPostgres.Product(context.Background(), id); !errors.Is(err, stock.ErrUnavailable) {
		t.Errorf("postgres down, read: err = %v, want ErrUnavailable", err)
	}
	if a := mustAudit(t, healthy, id); a.Stock != 5 {
		t.Errorf("stock = %d, want 5", a.Stock)
	}
}

// TestIdempotencySurvivesCrashAfterCommit writes an order and its idempotency record exactly as
// a replica would, then "crashes" before answering: no response, and its in-flight claim
// is gone. The client's retry must get that same order back and buy nothing more.
func TestIdempotencySurvivesCrashAfterCommit(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	id := createProduct(t, r, "crash", 5)
	req := stock.OrderRequest{CustomerID: "c", Items: []stock.Item{one(id, 2)}, IdempotencyKey: "crash-" + uuid.NewString()}

	first, err := r.svc.PlaceOrder(context.Background(), req)
	if err != nil {
		t.Fatalf("first attempt: %v", err)
	}
	// The first attempt's answer is "lost"; the client retries on another replica.
	other := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	again, err := other.svc.PlaceOrder(context.Background(), req)
	if err != nil {
		t.Fatalf("retry: %v", err)
	}
	if !again.Replayed || again.Order.ID != first.Order.ID {
		t.Errorf("retry = %+v, want a replay of order %s", again, first.Order.ID)
	}
	if a := mustAudit(t, r, id); a.Sold != 2 || a.Stock != 3 {
		t.Errorf("audit = %+v, want 2 sold once", a)
	}
}

// TestIdempotencyKeyIsUniqueInTheStore runs two requests with one key on two replicas at once,
// with no lock between them (version and guard only): A reads, finds no record for the key and
// is held between its read and its write; B reads, finds none either, and commits its order.
// When A writes, the store refuses it (the store contract: a key that has a record refuses the
// whole write, as Postgres's unique index does), A's batch reads again and answers with B's
// order: one order per key, whatever the timing, decided by the store alone.
func TestIdempotencyKeyIsUniqueInTheStore(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	d := stock.Defense{Version: true, Guard: true, Check: true}
	a, b := w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{})
	id := createProduct(t, a, "dup-key", 5)
	g := newGate()
	stock.SetAfterRead(a.svc, g.hook)
	req := stock.OrderRequest{CustomerID: "c", Items: []stock.Item{one(id, 1)}, IdempotencyKey: "dup-" + uuid.NewString()}

	type result struct {
		res stock.OrderResult
		err error
	}
	aDone := make(chan result, 1)
	go func() {
		res, err := a.svc.PlaceOrder(context.Background(), req)
		aDone <- result{res, err}
	}()
	<-g.reached
	resB, errB := b.svc.PlaceOrder(context.Background(), req)
	close(g.open)
	resA := <-aDone
	if resA.err != nil || errB != nil {
		t.Fatalf("A: %v, B: %v; want both answered with the one order", resA.err, errB)
	}
	if resB.Replayed || !resA.res.Replayed || resA.res.Order.ID != resB.Order.ID {
		t.Errorf("A = %+v, B = %+v; want B's order, replayed to A", resA.res, resB)
	}
	if au := mustAudit(t, a, id); au.Sold != 1 || au.Stock != 4 {
		t.Errorf("audit = %+v, want exactly 1 sold", au)
	}
}

func TestRestockUnderLockAndFence(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	locks := &askingLocker{Locker: w.locker, asked: make(chan struct{}, 8)}
	r := memReplica(t, w.store, locks, stock.Config{})
	id := createProduct(t, r, "restock", 1)
	if _, err := r.svc.PlaceOrder(context.Background(), order("c", one(id, 1))); err != nil {
		t.Fatalf("buy: %v", err)
	}
	res, err := r.svc.Restock(context.Background(), stock.RestockRequest{ProductID: id, Quantity: 4})
	if err != nil {
		t.Fatalf("restock: %v", err)
	}
	if p := res.Product; p.Stock != 4 {
		t.Errorf("stock after restock = %d, want 4", p.Stock)
	}
	if a := mustAudit(t, r, id); a.Received != 5 || a.Sold != 1 || !a.Consistent() {
		t.Errorf("audit = %+v, want received 5, sold 1", a)
	}
	// A writer with a fencing token older than the last one that wrote the row is refused.
	if _, err := r.store.Restock(context.Background(), stock.Restocking{ProductID: id, Quantity: 1, Fence: 1}); !errors.Is(err, stock.ErrLockLost) {
		t.Errorf("restock with a stale fence: err = %v, want ErrLockLost", err)
	}
	asked := len(locks.asked)
	if _, err := r.svc.Restock(context.Background(), stock.RestockRequest{ProductID: id + 1000, Quantity: 1}); !errors.Is(err, stock.ErrProductNotFound) {
		t.Errorf("restock of a missing product: err = %v, want ErrProductNotFound", err)
	}
	// Asking about a product that does not exist takes no lock, which would leave its fencing
	// counter behind in Redis for good.
	if n := len(locks.asked) - asked; n != 0 {
		t.Errorf("restocking a missing product asked for its lock %d times, want none", n)
	}
	if _, err := r.svc.Restock(context.Background(), stock.RestockRequest{ProductID: id, Quantity: 0}); !errors.Is(err, stock.ErrInvalid) {
		t.Errorf("restock of 0: err = %v, want ErrInvalid", err)
	}
}

func TestCreateProductRules(t *testing.T) {
	t.Parallel()
	r := newMemWorld().replica(t, stock.DefaultDefense(), replicaOptions{})
	if _, err := r.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: "x", Name: "x", Stock: 1}); err != nil {
		t.Fatalf("create: %v", err)
	}
	if _, err := r.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: "x", Name: "y", Stock: 1}); !errors.Is(err, stock.ErrDuplicateSKU) {
		t.Errorf("duplicate sku: err = %v, want ErrDuplicateSKU", err)
	}
	for _, p := range []stock.NewProduct{{SKU: "", Name: "n"}, {SKU: " ", Name: "n"}, {SKU: "s", Name: ""}, {SKU: "s", Name: "\t"}, {SKU: "s", Name: "n", Stock: -1}, {SKU: strings.Repeat("s", 65), Name: "n"},
		{SKU: "s\x00", Name: "n"}, {SKU: "s", Name: "n\x00m"}, {SKU: "s", Name: "bad \xff"}, {SKU: "s\x7f", Name: "n"}} {
		if _, err := r.svc.CreateProduct(context.Background(), p); !errors.Is(err, stock.ErrInvalid) {
			t.Errorf("CreateProduct(%+v): err = %v, want ErrInvalid", p, err)
		}
	}
	if _, err := r.svc.Order(context.Background(), uuid.New()); !errors.Is(err, stock.ErrOrderNotFound) {
		t.Errorf("missing order: err = %v, want ErrOrderNotFound", err)
	}
}

func TestPurgeIdempotencyKeys(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	id := createProduct(t, r, "purge", 5)
	req := stock.OrderRequest{CustomerID: "c", Items: []stock.Item{one(id, 1)}, IdempotencyKey: "purge-1"}
	if _, err := r.svc.PlaceOrder(context.Background(), req); err != nil {
		t.Fatalf("order: %v", err)
	}
	n, err := r.svc.PurgeIdempotencyKeys(context.Background(), 24*time.Hour)
	if err != nil || n != 0 {
		t.Fatalf("purge of fresh keys deleted %d, %v; want 0", n, err)
	}
	// A day and an hour later on Postgres's clock, the one the purge reads.
	if _, err := r.pool.Exec(context.Background(), `UPDATE idempotency_keys SET created_at = created_at - interval '25 hours'`); err != nil {
		t.Fatalf("age the record: %v", err)
	}
	n, err = r.svc.PurgeIdempotencyKeys(context.Background(), 24*time.Hour)
	if err != nil || n != 1 {
		t.Fatalf("purge of day-old keys deleted %d, %v; want 1", n, err)
	}
	// The key is forgotten: the same request now buys again.
	res, err := r.svc.PlaceOrder(context.Background(), req)
	if err != nil || res.Replayed {
		t.Fatalf("after purge: %+v, %v; want a new order", res, err)
	}
}

func TestCreateProductTrimsSKUAndName(t *testing.T) {
	t.Parallel()
	r := newMemWorld().replica(t, stock.DefaultDefense(), replicaOptions{})
	p, err := r.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: "  SKU-1 ", Name: "\tWidget\n", Stock: 1})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	if p.SKU != "SKU-1" || p.Name != "Widget" {
		t.Errorf("stored sku %q, name %q; want them trimmed", p.SKU, p.Name)
	}
	if _, err := r.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: "SKU-1", Name: "other", Stock: 1}); !errors.Is(err, stock.ErrDuplicateSKU) {
		t.Errorf("same sku without the spaces: err = %v, want ErrDuplicateSKU", err)
	}
}

// TestClientGoneIsCountedAsCancelled: a buyer who gives up while waiting for the product's lock
// is not a server error: the answer says so and the outcome metric counts it apart.
func TestClientGoneIsCountedAsCancelled(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	locks := &askingLocker{Locker: w.locker, asked: make(chan struct{}, 1)}
	r := memReplica(t, w.store, locks, stock.Config{})
	id := createProduct(t, r, "gone", 5)
	release := holdLock(t, w.locker, id)
	defer release()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := r.svc.PlaceOrder(ctx, order("c", one(id, 1)))
		done <- err
	}()
	<-locks.asked // the order's batch waits for the lock
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if got := testenv.Metric(t, r.registry, "stocksvc_orders_total", "outcome", "client_gone"); got != 1 {
		t.Errorf("cancelled outcomes = %v, want 1", got)
	}
	if got := testenv.Metric(t, r.registry, "stocksvc_orders_total", "outcome", "error"); got != 0 {
		t.Errorf("error outcomes = %v, want 0", got)
	}
}

// TestOrderWithRedisDownCountsUnavailable: an order that cannot reach Redis is ErrUnavailable
// and counted as unavailable, apart from the service's own errors.
func TestOrderWithRedisDownCountsUnavailable(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	id := createProduct(t, w.replica(t, stock.DefaultDefense(), replicaOptions{}), "no-redis", 5)
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{redisURL: fmt.Sprintf("redis://127.0.0.1:%d/0", testenv.FreePort(t))})
	if _, err := r.svc.PlaceOrder(context.Background(), order("c", one(id, 1))); !errors.Is(err, stock.ErrUnavailable) {
		t.Fatalf("order with Redis down: err = %v, want ErrUnavailable", err)
	}
	if got := testenv.Metric(t, r.registry, "stocksvc_orders_total", "outcome", "unavailable"); got != 1 {
		t.Errorf("unavailable outcomes = %v, want 1", got)
	}
	if got := testenv.Metric(t, r.registry, "stocksvc_orders_total", "outcome", "error"); got != 0 {
		t.Errorf("error outcomes = %v, want 0", got)
	}
	if a := mustAudit(t, r, id); a.Stock != 5 || a.Sold != 0 {
		t.Errorf("audit = %+v, want nothing sold", a)
	}
}

func waitForCondition(t *testing.T, cond func() bool) {
	t.Helper()
	testenv.Poll(t, 10*time.Second, "condition", cond)
}

// TestPostgresFailureMidBatch cuts the replica's Postgres connections between a batch's read and
// its write: the batch's orders are answered unavailable (retry with the same key), nothing is
// sold, and the next order goes through on fresh connections.
func TestPostgresFailureMidBatch(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	id := createProduct(t, r, "cut", 5)
	killer, err := pgx.Connect(context.Background(), w.databaseURL)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { _ = killer.Close(context.Background()) })
	var once sync.Once
	var killErr error
	stock.SetAfterRead(r.svc, func(ctx context.Context, _ int) {
		once.Do(func() {
			_, killErr = killer.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			                                WHERE datname = current_database() AND pid <> pg_backend_pid()`)
		})
	})
	req := stock.OrderRequest{CustomerID: "c", Items: []stock.Item{one(id, 1)}, IdempotencyKey: "cut-" + uuid.NewString()}
	if _, err := r.svc.PlaceOrder(context.Background(), req); !errors.Is(err, stock.ErrUnavailable) {
		t.Fatalf("order whose batch lost Postgres: %v, want ErrUnavailable", err)
	}
	if killErr != nil {
		t.Fatalf("terminate the replica's connections: %v", killErr)
	}
	if a := mustAudit(t, r, id); a.Sold != 0 || a.Stock != 5 {
		t.Errorf("audit = %+v, want nothing sold", a)
	}
	res, err := r.svc.PlaceOrder(context.Background(), req)
	if err != nil || res.Replayed {
		t.Fatalf("retry with the same key: %+v, %v; want a new order", res, err)
	}
	if a := mustAudit(t, r, id); a.Sold != 1 {
		t.Errorf("audit = %+v, want one sale", a)
	}
}

// TestBatchDecidedFromTheLastHoldersNote: a batch given the product's lock with the level the
// last holder noted decides from it, without reading; a note made stale by a write that took no
// lock is refused by the version check, and the batch reads and is decided again.
func TestBatchDecidedFromTheLastHoldersNote(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	store := &countingStore{Store: w.store}
	r := memReplica(t, store, w.locker, stock.Config{})
	svc, reg := r.svc, r.registry
	id := createProduct(t, r, "noted", 10)
	ctx := context.Background()

	buy := func() {
		t.Helper()
		if _, err := svc.PlaceOrder(ctx, order("c", one(id, 1))); err != nil {
			t.Fatalf("order: %v", err)
		}
	}
	buy() // the product is new to this replica: a look before the lock, and a read under it
	if n := store.snapshots.Load(); n != 2 {
		t.Errorf("reads for the first order = %d, want 2", n)
	}
	buy()
	buy()
	if n := store.snapshots.Load(); n != 2 {
		t.Errorf("reads after two more orders = %d, want still 2: each decided from the note", n)
	}

	// A write that takes no lock leaves the note stale: a change of the sale rules, which moves
	// the version (the store contract), straight to the store.
	if _, err := w.store.UpdateSale(ctx, id, stock.SaleChange{}); err != nil {
		t.Fatalf("out-of-band write: %v", err)
	}
	buy()
	if n := store.snapshots.Load(); n != 3 {
		t.Errorf("reads after the stale note = %d, want 3: one read after the refusal", n)
	}
	if got := testenv.Metric(t, reg, "stocksvc_defense_catches_total", "layer", string(stock.LayerVersion)); got != 1 {
		t.Errorf("version catches = %v, want 1: the stale note", got)
	}
	if a := mustAudit(t, r, id); a.Sold != 4 || a.Stock != 6 || !a.Consistent() {
		t.Errorf("audit = %+v, want 4 sold, 6 left", a)
	}
}

// TestNoteNeverRefusesAlone: a note can be stale without any write to catch it — a holder whose
// lock was taken from it (expired, deleted) releases nothing and leaves the old note behind.
// A batch that the note alone would refuse reads first: a refusal must be true when decided.
func TestNoteNeverRefusesAlone(t *testing.T) {
	t.Parallel()
	r := newMemWorld().replica(t, stock.DefaultDefense(), replicaOptions{})
	id := createProduct(t, r, "stale-note", 1)
	ctx := context.Background()
	if _, err := r.svc.PlaceOrder(ctx, order("a", one(id, 1))); err != nil {
		t.Fatalf("first order: %v", err)
	}
	// The note now says 0 left. A restock that took no lock leaves it so, as one whose lock was
	// deleted under it would.
	if _, err := r.store.Restock(ctx, stock.Restocking{ProductID: id, Quantity: 2}); err != nil {
		t.Fatalf("restock: %v", err)
	}
	res, err := r.svc.PlaceOrder(ctx, order("b", one(id, 1)))
	if err != nil {
		t.Fatalf("order after the restock: %v, want it sold: the note said 0, the stock is 2", err)
	}
	if res.Order.ID == uuid.Nil {
		t.Errorf("order = %+v", res)
	}
	if a := mustAudit(t, r, id); a.Sold != 2 || a.Stock != 1 || !a.Consistent() {
		t.Errorf("audit = %+v, want 2 sold, 1 left", a)
	}
}
