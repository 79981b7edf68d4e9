package stock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// commandCounter is a go-redis hook that counts the commands a client sends, by name; a
// script counts under the name of the script command (evalsha, eval).
type commandCounter struct {
	mu    sync.Mutex
	names map[string]int
}

func countCommands(rdb *redis.Client) *commandCounter {
	c := &commandCounter{names: map[string]int{}}
	rdb.AddHook(c)
	return c
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commandCounter) add(cmd redis.Cmder) {
	c.mu.Lock()
	c.names[strings.ToLower(cmd.Name())]++
	c.mu.Unlock()
}

// since returns the commands counted since the last call, other than those named in allowed.
func (c *commandCounter) take(allowed ...string) map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	other := map[string]int{}
	for name, n := range c.names {
		if !contains(allowed, name) {
			other[name] = n
		}
	}
	c.names = map[string]int{}
	return other
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sellOut buys every unit of product id through r, one unit per order.
func sellOut(t *testing.T, r *replica, id, units int64) {
	t.Helper()
	for i := range units {
		if _, err := r.svc.PlaceOrder(context.Background(), order(fmt.Sprintf("seller-%d", i), one(id, 1))); err != nil {
			t.Fatalf("order %d of %d: %v", i+1, units, err)
		}
	}
}

func TestSoldOutIsAnsweredWithoutPostgresOrLocks(t *testing.T) {
	w := newWorld(t)
	var queries atomic.Int64
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true, queries: &queries})
	commands := countCommands(r.redis)
	id := createProduct(t, r, "hot", 3)
	ctx := context.Background()
	if _, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "early", Items: []stock.Item{one(id, 1)}, IdempotencyKey: "early-key"}); err != nil {
		t.Fatalf("keyed order: %v", err)
	}
	// Refused by the purchase path, with 2 left, and stored under its key.
	greedy := stock.OrderRequest{CustomerID: "greedy", Items: []stock.Item{one(id, 5)}, IdempotencyKey: "greedy-key"}
	if _, err := r.svc.PlaceOrder(ctx, greedy); !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("order for more than is left: got %v, want sold out", err)
	}
	sellOut(t, r, id, 2)
	// The first refusal may have to learn that the product is sold out.
	_, err := r.svc.PlaceOrder(ctx, order("first", one(id, 1)))
	if !errors.Is(err, stock.ErrSoldOut) {
		t.Fatalf("order after sell-out: got %v, want sold out", err)
	}
	queries.Store(0)
	commands.take()

	const refusals = 200
	for i := range refusals {
		_, err := r.svc.PlaceOrder(ctx, order(fmt.Sprintf("late-%d", i), one(id, 1+int64(i%3))))
		var soldOut *stock.SoldOutError
		if !errors.As(err, &soldOut) || soldOut.Available != 0 || soldOut.ProductID != id {
			t.Fatalf("order %d: got %v, want sold out with 0 available", i, err)
		}
	}
	if n := queries.Load(); n != 0 {
		t.Errorf("%d refusals of a sold-out product sent %d Postgres queries, want 0", refusals, n)
	}
	// Within the lease nothing at all goes to Redis; each lease that ends costs one read of
	// the view, and never a lock command.
	if other := commands.take("hgetall"); len(other) > 0 {
		t.Errorf("refusals sent Redis commands other than reads of the view: %v", other)
	}
	if got := testenv.Metric(t, r.registry, "stocksvc_orders_refused_from_view_total"); got < refusals {
		t.Errorf("stocksvc_orders_refused_from_view_total = %v, want at least %d", got, refusals)
	}
	queries.Store(0) // the scrape above read stocksvc_product_stock (one query of the listing)

	// A keyed order costs one query the first time — the product's confirmed keys — and none
	// after; a retry of the confirmed keyed order is replayed, never refused.
	for i := range 50 {
		_, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "keyed", Items: []stock.Item{one(id, 1)}, IdempotencyKey: fmt.Sprintf("late-key-%d", i)})
		if !errors.Is(err, stock.ErrSoldOut) {
			t.Fatalf("keyed order %d: got %v, want sold out", i, err)
		}
	}
	if n := queries.Load(); n != 1 {
		t.Errorf("50 keyed refusals sent %d Postgres queries, want 1 (the confirmed keys)", n)
	}
	res, err := r.svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "early", Items: []stock.Item{one(id, 1)}, IdempotencyKey: "early-key"})
	if err != nil || !res.Replayed {
		t.Fatalf("retry of a confirmed keyed order after sell-out: got %+v, %v; want the order replayed", res, err)
	}
	// A retry of the stored refusal is that refusal, replayed — 2 were left then — not a new
	// one from the view.
	_, err = r.svc.PlaceOrder(ctx, greedy)
	if soldOut, ok := errors.AsType[*stock.SoldOutError](err); !ok || !soldOut.Replayed || soldOut.Available != 2 {
		t.Fatalf("retry of a stored refusal after sell-out: got %v; want it replayed with 2 available", err)
	}
	if a := mustAudit(t, r, id); !a.Consistent() || a.Sold != 3 {
		t.Errorf("audit: %+v", a)
	}
}

// TestRestockRevivesEveryReplicaAtOnce: once a restock has returned, no replica refuses an
// order on the level before it, although each had just refused from its lease.
func TestRestockRevivesEveryReplicaAtOnce(t *testing.T) {
	w := newWorld(t)
	replicas := make([]*replica, 3)
	for i := range replicas {
		replicas[i] = w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	}
	id := createProduct(t, replicas[0], "revived", 0)
	ctx := context.Background()
	for round := range 5 {
		// Every replica refuses, from its view: each now holds a lease saying "sold out".
		for i, r := range replicas {
			_, err := r.svc.PlaceOrder(ctx, order(fmt.Sprintf("r%d-refused-%d", round, i), one(id, 1)))
			if !errors.Is(err, stock.ErrSoldOut) {
				t.Fatalf("round %d, replica %d before the restock: got %v, want sold out", round, i, err)
			}
		}
		if _, err := replicas[round%3].svc.Restock(ctx, stock.RestockRequest{ProductID: id, Quantity: 3}); err != nil {
			t.Fatalf("round %d: restock: %v", round, err)
		}
		// At once, on every replica, in parallel: each order must find the new stock.
		var wg sync.WaitGroup
		errs := make([]error, len(replicas))
		for i, r := range replicas {
			wg.Go(func() {
				_, errs[i] = r.svc.PlaceOrder(ctx, order(fmt.Sprintf("r%d-bought-%d", round, i), one(id, 1)))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("round %d, replica %d right after the restock returned: %v", round, i, err)
			}
		}
	}
	if a := mustAudit(t, replicas[0], id); !a.Consistent() || a.Stock != 0 || a.Sold != 15 {
		t.Errorf("audit: %+v", a)
	}
}

// TestViewsFollowPurchasesAndRestocks: a read that starts after a purchase or restock has
// been answered reflects it, on the replica that made it at once, and on another one as soon
// as that replica's lease is not in the way (a replica started afterwards has none).
func TestViewsFollowPurchasesAndRestocks(t *testing.T) {
	w := newWorld(t)
	a := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	id := createProduct(t, a, "followed", 10)
	read := func(r *replica) stock.ProductView {
		t.Helper()
		v, err := r.svc.Product(ctx, id)
		if err != nil {
			t.Fatalf("read: %v", err)
		}
		return v
	}
	if v := read(a); v.Stock != 10 || v.From != "postgres" {
		t.Fatalf("first read: %+v, want stock 10 rebuilt from postgres", v)
	}
	if v := read(a); v.Stock != 10 || v.From != "process" {
		t.Fatalf("second read: %+v, want stock 10 from the lease", v)
	}
	if _, err := a.svc.PlaceOrder(ctx, order("buyer", one(id, 4))); err != nil {
		t.Fatal(err)
	}
	if v := read(a); v.Stock != 6 {
		t.Errorf("read on the buying replica after its 201: stock %d, want 6", v.Stock)
	}
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	if v := read(b); v.Stock != 6 || v.From != "redis" || v.Version != 1 {
		t.Errorf("read on another replica: %+v, want stock 6 at version 1 from redis", v)
	}
	if _, err := b.svc.Restock(ctx, stock.RestockRequest{ProductID: id, Quantity: 5}); err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*replica{"restocking replica": b, "other replica": a} {
		// a's lease predates the restock, which waited it out.
		if v := read(r); v.Stock != 11 || v.Version != 2 {
			t.Errorf("%s after the restock: %+v, want stock 11 at version 2", name, v)
		}
	}
}

// TestOrdersForMissingProductsCostNoQuery: a flood of orders for random ids nobody created is
// refused product-not-found from the replica's memory — one read of the highest product id
// while it is fresh, no other query, no Redis command, no queue. An id below the highest that
// no product has costs one read, then none while remembered. (The lease is long here so that
// what was read stays fresh for the whole flood; the product is created through the store so
// that its creation does not wait that lease out.)
func TestOrdersForMissingProductsCostNoQuery(t *testing.T) {
	w := newWorld(t)
	var queries atomic.Int64
	r := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true, viewLease: 10 * time.Second, queries: &queries})
	commands := countCommands(r.redis)
	ctx := context.Background()
	if _, err := r.store.CreateProduct(ctx, stock.NewProduct{SKU: "dup", Name: "dup", Stock: 1}); err != nil {
		t.Fatal(err)
	}
	// The refused insert takes an id: a gap below the highest.
	if _, err := r.store.CreateProduct(ctx, stock.NewProduct{SKU: "dup", Name: "dup", Stock: 1}); !errors.Is(err, stock.ErrDuplicateSKU) {
		t.Fatalf("duplicate: %v", err)
	}
	real, err := r.store.CreateProduct(ctx, stock.NewProduct{SKU: "real", Name: "real", Stock: 5})
	if err != nil {
		t.Fatal(err)
	}
	gap := real.ID - 1
	queries.Store(0)
	commands.take()

	const flood = 300
	for i := range flood {
		id := real.ID + 1 + rand.Int64N(1<<62)
		_, err := r.svc.PlaceOrder(ctx, order(fmt.Sprintf("random-%d", i), one(id, 1)))
		if notFound, ok := errors.AsType[*stock.ProductNotFoundError](err); !ok || notFound.ProductID != id {
			t.Fatalf("order %d for random id %d: %v, want product not found", i, id, err)
		}
	}
	if n := queries.Load(); n != 1 {
		t.Errorf("%d orders for random missing ids sent %d Postgres queries, want 1 (the highest id)", flood, n)
	}
	if other := commands.take(); len(other) > 0 {
		t.Errorf("orders for random missing ids sent Redis commands: %v", other)
	}
	if n := stock.Queues(r.svc); n != 0 {
		t.Errorf("%d product queues after orders for missing products, want none", n)
	}

	if _, err := r.svc.PlaceOrder(ctx, order("gap-first", one(gap, 1))); !errors.Is(err, stock.ErrProductNotFound) {
		t.Fatalf("first order for id %d below the highest: %v, want product not found", gap, err)
	}
	queries.Store(0)
	commands.take()
	for i := range 100 {
		if _, err := r.svc.PlaceOrder(ctx, order(fmt.Sprintf("gap-%d", i), one(gap, 1))); !errors.Is(err, stock.ErrProductNotFound) {
			t.Fatalf("order %d for id %d below the highest: %v, want product not found", i, gap, err)
		}
	}
	if n := queries.Load(); n != 0 {
		t.Errorf("100 orders for a remembered missing id sent %d Postgres queries, want 0", n)
	}
	if other := commands.take(); len(other) > 0 {
		t.Errorf("orders for a remembered missing id sent Redis commands: %v", other)
	}
	if n := stock.Queues(r.svc); n != 0 {
		t.Errorf("%d product queues after orders for missing products, want none", n)
	}
	if got := testenv.Metric(t, r.registry, "stocksvc_view_not_found_total", "use", "order", "from", "memory"); got != flood+100 {
		t.Errorf("stocksvc_view_not_found_total{use=order,from=memory} = %v, want %d", got, flood+100)
	}
	// The product that exists still sells.
	if _, err := r.svc.PlaceOrder(ctx, order("buyer", one(real.ID, 1))); err != nil {
		t.Errorf("order for the product that exists: %v", err)
	}
}

// TestCreatedProductIsFoundAtOnceOnEveryReplica: replica B has just refused an order for an id
// nobody created (so it remembers the highest id, fresh); replica A creates a product; the
// moment the creation is answered, B takes an order for it and reads it. Many times over.
func TestCreatedProductIsFoundAtOnceOnEveryReplica(t *testing.T) {
	w := newWorld(t)
	a := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{views: true})
	ctx := context.Background()
	for round := range 25 {
		if _, err := b.svc.PlaceOrder(ctx, order("prober", one(1<<60, 1))); !errors.Is(err, stock.ErrProductNotFound) {
			t.Fatalf("round %d: order for an id nobody created: %v", round, err)
		}
		id := createProduct(t, a, fmt.Sprintf("new-%d", round), 2)
		if _, err := b.svc.PlaceOrder(ctx, order(fmt.Sprintf("first-%d", round), one(id, 1))); err != nil {
			t.Fatalf("round %d: order on another replica right after the creation of %d was answered: %v", round, id, err)
		}
		if v, err := b.svc.Product(ctx, id); err != nil || v.Stock != 1 {
			t.Fatalf("round %d: read on another replica after the creation and an order: %+v, %v", round, v, err)
		}
	}
}
