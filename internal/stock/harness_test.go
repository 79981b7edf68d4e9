package stock_test

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/demo"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/internal/view"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// The package's tests run replicas of the Service in one of two worlds: over the in-memory store
// and locker of package stocktest (memWorld), for the rules — nothing to install, and fast —
// or over a real Postgres and Redis (world), for the adapters and the races only a real
// database has. docs/development.md lists which tests need a server, and why.

// world is what replicas share: a database and a Redis key prefix.
type world struct {
	databaseURL string
	redisURL    string
	prefix      string
}

// newWorld is the servers' world. Under go test -short, which runs only the tests that need no
// server (memWorld's), the test skips.
func newWorld(t testing.TB) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("integration test: needs Postgres and Redis (-short runs the server-free tests only)")
	}
	_, prefix := testenv.Redis(t) // deletes the prefix's keys at the end
	return &world{databaseURL: testenv.DatabaseURL(t), redisURL: testenv.RedisURL(t), prefix: prefix}
}

// replica is one service instance with its own pools, as a separate process would have.
// Without a server (memWorld) it has no pools: redis, pool and cache are nil.
type replica struct {
	svc      *stock.Service
	store    stock.Store
	registry *prometheus.Registry
	redis    *redis.Client
	pool     *pgxpool.Pool
	cache    *view.Cache // nil without views
}

type replicaOptions struct {
	lockTTL  time.Duration
	lockWait time.Duration
	maxConns int32
	redisURL string // instead of the world's Redis
	maxBatch int    // orders per batch; 0 keeps the default
	views    bool   // a view cache (package view) in front, as the service runs
	// viewLease is the view cache's lease; 0 keeps the default.
	viewLease time.Duration
	// queries, when set, counts every query the replica's pool sends to Postgres.
	queries *atomic.Int64
	// redlock, when set, puts the product locks on a Redlock over these nodes
	// (stocklock.NewRedlock) instead of the world's Redis, which keeps the views.
	redlock []*testenv.RedisServer
	// now is the replica's clock (Config.Now); nil for time.Now.
	now func() time.Time
	// skipRules leaves the sale rules to Postgres alone (Config.SkipRuleChecks).
	skipRules bool
}

func (w *world) replica(t testing.TB, d stock.Defense, o replicaOptions) *replica {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(w.databaseURL)
	if err != nil {
		t.Fatalf("parse database url: %v", err)
	}
	if o.maxConns > 0 {
		cfg.MaxConns = o.maxConns
	}
	if o.queries != nil {
		cfg.ConnConfig.Tracer = queryCounter{o.queries}
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect postgres: %v", err)
	}
	redisURL := w.redisURL
	if o.redisURL != "" {
		redisURL = o.redisURL
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("parse redis url: %v", err)
	}
	rdb := redis.NewClient(opts)
	t.Cleanup(func() {
		_ = rdb.Close()
		pool.Close()
	})
	reg := prometheus.NewRegistry()
	store := stockpg.New(pool)
	if d != stock.DefaultDefense() {
		store = stockpg.NewDemo(pool, d)
	}
	wait := o.lockWait
	if wait == 0 {
		wait = 5 * time.Second // generous: these tests are about correctness, not contention
	}
	locks := newLockClient(t, rdb, w.prefix)
	var cache *view.Cache
	var views stock.Views
	if o.views {
		cache = view.New(rdb, locks, store, view.Config{Lease: o.viewLease}, view.NewMetrics(reg))
		views = cache
	}
	var locker stock.Locker = stocklock.NewRedis(locks, stocklock.Config{TTL: o.lockTTL, Wait: wait})
	if o.redlock != nil {
		locker = stocklock.NewRedlock(testenv.Redlock(t, o.redlock), w.prefix, stocklock.Config{TTL: o.lockTTL, Wait: wait})
	}
	locker, views = demo.Parts(d, locker, views)
	svc := stock.NewService(store, locker,
		stock.Config{ConflictRetries: 50, QueueWait: wait, MaxBatchOrders: o.maxBatch, Views: views, Now: o.now, SkipRuleChecks: o.skipRules},
		stock.NewMetrics(reg))
	t.Cleanup(svc.Close)
	return &replica{svc: svc, store: store, registry: reg, redis: rdb, pool: pool, cache: cache}
}

// memWorld is what replicas share without a server: one in-memory store, standing for the
// database, and one in-process locker, standing for the locks in Redis.
type memWorld struct {
	store  *stocktest.MemStore
	locker *stocktest.LocalLocker
}

func newMemWorld() *memWorld {
	return &memWorld{store: stocktest.NewMemStore(), locker: &stocktest.LocalLocker{}}
}

// replica is a replica over the world's store and locker, with the conditions of defense d (a
// demonstration store, and locker, for another than the default) and the options of o that
// mean something without a server: maxBatch, views (the store's, never stale:
// MemStore.Views), now, skipRules, and lockWait as the queue's patience.
func (w *memWorld) replica(t testing.TB, d stock.Defense, o replicaOptions) *replica {
	t.Helper()
	var store stock.Store = w.store
	if d != stock.DefaultDefense() {
		store = w.store.Demo(d)
	}
	var views stock.Views
	if o.views {
		views = w.store.Views()
	}
	locker, views := demo.Parts(d, w.locker, views)
	return memReplica(t, store, locker, stock.Config{ConflictRetries: 50, QueueWait: cmp.Or(o.lockWait, 5*time.Second),
		MaxBatchOrders: o.maxBatch, Views: views, Now: o.now, SkipRuleChecks: o.skipRules})
}

// memReplica is a replica over store and locker, with cfg and metrics of its own.
func memReplica(t testing.TB, store stock.Store, locker stock.Locker, cfg stock.Config) *replica {
	t.Helper()
	reg := prometheus.NewRegistry()
	svc := stock.NewService(store, locker, cfg, stock.NewMetrics(reg))
	t.Cleanup(svc.Close)
	return &replica{svc: svc, store: store, registry: reg}
}

// countingStore counts the calls of the purchase path a service makes to its store: reads,
// writes, lookups of records and of a product's keys (calls, all of them).
type countingStore struct {
	stock.Store
	snapshots, commits, records, calls atomic.Int64
}

func (c *countingStore) Snapshot(ctx context.Context, ids []int64, keys []stock.RecordKey, customers []string) (stock.Snapshot, error) {
	c.snapshots.Add(1)
	c.calls.Add(1)
	return c.Store.Snapshot(ctx, ids, keys, customers)
}

func (c *countingStore) Commit(ctx context.Context, w stock.Write) (stock.Committed, error) {
	c.commits.Add(1)
	c.calls.Add(1)
	return c.Store.Commit(ctx, w)
}

func (c *countingStore) Records(ctx context.Context, keys []stock.RecordKey) (map[stock.RecordKey]stock.IdempotencyRecord, error) {
	c.records.Add(1)
	c.calls.Add(1)
	return c.Store.Records(ctx, keys)
}

func (c *countingStore) StoredKeys(ctx context.Context, id int64, limit int) ([]stock.RecordKey, error) {
	c.calls.Add(1)
	return c.Store.StoredKeys(ctx, id, limit)
}

// holdLock holds product id's lock in locker, as another replica would, until release is
// called (at the latest when the test ends).
func holdLock(t testing.TB, locker stock.Locker, id int64) (release func()) {
	t.Helper()
	held, let := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- locker.WithProducts(context.Background(), []int64{id}, func(context.Context, *stock.Grant) error {
			close(held)
			<-let
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		t.Fatalf("hold the lock of product %d: %v", id, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			close(let)
			if err := <-done; err != nil {
				t.Errorf("hold the lock of product %d: %v", id, err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// queryCounter is a pgx tracer that counts the queries a pool sends.
type queryCounter struct{ n *atomic.Int64 }

func (q queryCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	q.n.Add(1)
	return ctx
}

func (queryCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// newLockClient returns a lock client closed when the test ends (a client that waited holds a
// subscription).
func newLockClient(t testing.TB, rdb redis.UniversalClient, prefix string) *lock.Client {
	t.Helper()
	c := lock.New(rdb, lock.WithNamespace(prefix))
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func createProduct(t testing.TB, r *replica, sku string, units int64) int64 {
	t.Helper()
	p, err := r.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: sku, Name: sku, Stock: units})
	if err != nil {
		t.Fatalf("create product: %v", err)
	}
	return p.ID
}

func mustAudit(t testing.TB, r *replica, id int64) stock.Audit {
	t.Helper()
	a, err := r.svc.Audit(context.Background(), id)
	if err != nil {
		t.Fatalf("audit: %v", err)
	}
	return a
}

// catches reads stocksvc_defense_catches_total{layer} from a replica's registry.
func catches(t testing.TB, r *replica, layer stock.Layer) float64 {
	t.Helper()
	return testenv.Metric(t, r.registry, "stocksvc_defense_catches_total", "layer", string(layer))
}

// gate holds the first batch of at least min orders that reaches it between its read and its
// write, until the test opens it; every other batch passes straight through.
type gate struct {
	min     int
	once    sync.Once
	reached chan struct{}
	open    chan struct{}
}

func newGate() *gate { return newGateFor(1) }

func newGateFor(min int) *gate {
	return &gate{min: min, reached: make(chan struct{}), open: make(chan struct{})}
}

func (g *gate) hook(ctx context.Context, orders int) {
	if orders < g.min {
		return
	}
	first := false
	g.once.Do(func() { first = true })
	if !first {
		return
	}
	close(g.reached)
	select {
	case <-g.open:
	case <-ctx.Done():
	}
}

func order(customer string, items ...stock.Item) stock.OrderRequest {
	return stock.OrderRequest{CustomerID: customer, Items: items}
}

func one(productID, quantity int64) stock.Item {
	return stock.Item{ProductID: productID, Quantity: quantity}
}
