package view

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// world is a database with one product and a Redis prefix, shared by the caches of a test:
// each cache stands for a replica (its own lock client, singleflight and leases).
type world struct {
	t      *testing.T
	pool   *pgxpool.Pool
	store  *stockpg.Store
	rdb    *redis.Client
	prefix string
	id     int64
	loads  atomic.Int64 // reads of products through the caches' sources
	highs  atomic.Int64 // reads of the highest product id through them
}

func newWorld(t *testing.T, units int64) *world {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	pool := testenv.Pool(t)
	w := &world{t: t, pool: pool, store: stockpg.New(pool), rdb: rdb, prefix: prefix}
	p, err := w.store.CreateProduct(context.Background(), stock.NewProduct{SKU: "hot", Name: "Hot", Stock: units})
	if err != nil {
		t.Fatalf("create product: %v", err)
	}
	w.id = p.ID
	return w
}

// source is the world's store as a Source that counts its reads, and runs gate (when set)
// before each read of a product and after (when set) after it.
type source struct {
	w           *world
	gate, after func()
}

func (s source) Product(ctx context.Context, id int64) (stock.Product, error) {
	s.w.loads.Add(1)
	if s.gate != nil {
		s.gate()
	}
	p, err := s.w.store.Product(ctx, id)
	if s.after != nil {
		s.after()
	}
	return p, err
}

func (s source) HighestProductID(ctx context.Context) (int64, error) {
	s.w.highs.Add(1)
	return s.w.store.HighestProductID(ctx)
}

func (w *world) cache(cfg Config, src Source) (*Cache, *prometheus.Registry) {
	w.t.Helper()
	return w.cacheOn(w.rdb, cfg, src)
}

// cacheOn is a cache over rdb instead of the world's Redis client.
func (w *world) cacheOn(rdb redis.UniversalClient, cfg Config, src Source) (*Cache, *prometheus.Registry) {
	w.t.Helper()
	if src == nil {
		src = source{w: w}
	}
	locks := lock.New(rdb, lock.WithNamespace(w.prefix))
	w.t.Cleanup(func() { _ = locks.Close() })
	reg := prometheus.NewRegistry()
	c := New(rdb, locks, src, cfg, NewMetrics(reg))
	return c, reg
}

func (w *world) deleteView() {
	w.t.Helper()
	if err := w.rdb.Del(context.Background(), w.prefix+"view:product:{"+itoa(w.id)+"}").Err(); err != nil {
		w.t.Fatalf("delete view: %v", err)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func counted(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// forgetLeases drops the cache's leases, as their running out would.
func (c *Cache) forgetLeases() {
	c.mu.Lock()
	clear(c.leases)
	c.mu.Unlock()
}

// TestStampedeCostsOneQuery: 500 readers on three replicas, the view deleted and no lease in
// the way: one Postgres read in all.
func TestStampedeCostsOneQuery(t *testing.T) {
	w := newWorld(t, 42)
	caches := make([]*Cache, 3)
	regs := make([]*prometheus.Registry, 3)
	for i := range caches {
		caches[i], regs[i] = w.cache(Config{}, nil)
	}
	for round := range 3 {
		w.deleteView()
		for _, c := range caches {
			c.forgetLeases()
		}
		w.loads.Store(0)
		start := make(chan struct{})
		var wg sync.WaitGroup
		var failed atomic.Int64
		for i := range 500 {
			c := caches[i%3]
			wg.Go(func() {
				<-start
				v, err := c.Product(context.Background(), w.id)
				if err != nil || v.Stock != 42 {
					failed.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := failed.Load(); n > 0 {
			t.Fatalf("round %d: %d of 500 reads failed or were wrong", round, n)
		}
		if n := w.loads.Load(); n != 1 {
			t.Errorf("round %d: 500 concurrent readers after the view was deleted made %d Postgres reads, want 1", round, n)
		}
	}
}

// TestRebuildLockHeldReadersGiveUpToPostgres: when whoever holds the rebuild lock never
// writes the view, readers look again a bounded number of times, then read Postgres
// themselves — one read per replica, whatever the crowd.
func TestRebuildLockHeldReadersGiveUpToPostgres(t *testing.T) {
	w := newWorld(t, 7)
	c, reg := w.cache(Config{RebuildTries: 3}, nil)
	held, err := lock.New(w.rdb, lock.WithNamespace(w.prefix)).Obtain(context.Background(), c.rebuildLockName(w.id), time.Minute, &lock.Options{Fenceless: true})
	if err != nil {
		t.Fatalf("hold the rebuild lock: %v", err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			v, err := c.Product(context.Background(), w.id)
			if err != nil || v.Stock != 7 || v.From != FromPostgres {
				t.Errorf("read while the rebuild lock is held: %+v, %v", v, err)
			}
		})
	}
	wg.Wait()
	if got := counted(c.metrics.giveUps); got < 1 {
		t.Errorf("give-ups = %v, want at least 1", got)
	}
	if got := counted(c.metrics.waits); got < 2 {
		t.Errorf("rebuild waits = %v, want the tries (2 waits between 3 tries)", got)
	}
	// The readers joined one flight (or a few, if some came late), and a flight that gives
	// up reads Postgres once for all of its readers.
	if n := w.loads.Load(); n > 5 {
		t.Errorf("%d Postgres reads for 50 readers, want one per flight", n)
	}
	_ = reg
}

// TestRedisDownReadsFallBackToPostgresBounded: with Redis unreachable, reads are served from
// Postgres — one read for all the readers of a product, FallbackReads products at a time; a
// read of one more product is answered unavailable at once.
func TestRedisDownReadsFallBackToPostgresBounded(t *testing.T) {
	w := newWorld(t, 5)
	other, err := w.store.CreateProduct(context.Background(), stock.NewProduct{SKU: "other", Name: "Other", Stock: 1})
	if err != nil {
		t.Fatal(err)
	}
	dead := redis.NewClient(&redis.Options{Addr: testenv.DeadEndpoint(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	release := make(chan struct{})
	entered := make(chan struct{}, 1)
	c, _ := w.cacheOn(dead, Config{FallbackReads: 1}, source{w: w, gate: func() {
		entered <- struct{}{}
		<-release
	}})
	const readers = 20
	results := make(chan error, readers)
	for range readers {
		go func() {
			v, err := c.Product(context.Background(), w.id)
			if err == nil && (v.Stock != 5 || v.From != FromPostgres) {
				err = errors.New("wrong view")
			}
			results <- err
		}()
	}
	<-entered // the one fallback read is in flight
	if _, err := c.Product(context.Background(), other.ID); !errors.Is(err, stock.ErrUnavailable) {
		t.Errorf("a read of another product while the fallback is in use: got %v, want unavailable", err)
	}
	close(release)
	for range readers {
		if err := <-results; err != nil {
			t.Errorf("a reader of the fallback read: %v", err)
		}
	}

	if r := c.Refusal(context.Background(), w.id); r != (stock.Refusal{}) {
		t.Error("SoldOut without Redis said sold out; it must leave the decision to the purchase path")
	}
}

// TestOlderLevelsNeverOverwriteNewer: purchases committed out of order, and a rebuild from a
// read older than the view, leave the newest level.
func TestOlderLevelsNeverOverwriteNewer(t *testing.T) {
	w := newWorld(t, 10)
	c, _ := w.cache(Config{}, nil)
	ctx := context.Background()
	if _, err := c.Product(ctx, w.id); err != nil { // builds the view at version 0
		t.Fatal(err)
	}
	now := time.Now()
	c.Committed(w.id, 7, 3, now)
	c.Committed(w.id, 9, 1, now) // older: lost the race to Redis
	v, _, found, err := c.readRedis(ctx, w.id)
	if err != nil || !found || v.Product.Version != 3 || v.Product.Stock != 7 {
		t.Fatalf("view after updates at versions 3 then 1: %+v (found %v, %v), want stock 7 at version 3", v.Product, found, err)
	}
	// A rebuild that read Postgres (version 0, stock 10) writes nothing over version 3.
	c.forgetLeases()
	w.deleteView()
	c.Committed(w.id, 7, 3, now) // a missing view stays missing
	if _, _, found, _ := c.readRedis(ctx, w.id); found {
		t.Fatal("a purchase's update created a view; only rebuilds may")
	}
}

// TestRebuildStartedBeforeARaiseIsNotWritten: a rebuild that read Postgres before a restock
// began must not write its (older) view after it — it would be leased and refuse orders on
// the level before the restock.
func TestRebuildStartedBeforeARaiseIsNotWritten(t *testing.T) {
	w := newWorld(t, 0)
	reading := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	slow, _ := w.cache(Config{}, source{w: w, gate: func() {
		once.Do(func() {
			close(reading)
			<-proceed
		})
	}})
	other, _ := w.cache(Config{}, nil)
	ctx := context.Background()
	result := make(chan bool, 1)
	go func() {
		result <- slow.Refusal(ctx, w.id).SoldOut // rebuilds: epoch read, then the gated Postgres read
	}()
	<-reading
	done, err := other.Raise(ctx, w.id)
	if err != nil {
		t.Fatalf("raise: %v", err)
	}
	close(proceed) // the slow rebuild now reads stock 0 and tries to write it
	if sold := <-result; sold {
		t.Error("a view read before the raise was used to refuse")
	}
	if _, _, found, _ := slow.readRedis(ctx, w.id); found {
		t.Fatal("the rebuild that began before the raise wrote its view")
	}
	p, err := w.store.Restock(ctx, stock.Restocking{ProductID: w.id, Quantity: 4})
	if err != nil {
		t.Fatal(err)
	}
	done(&p.Product)
	if slow.Refusal(ctx, w.id).SoldOut {
		t.Error("sold out after the restock")
	}
	v, _, found, err := slow.readRedis(ctx, w.id)
	if err != nil || !found || v.Product.Stock != 4 {
		t.Errorf("view after the raise ended: %+v (found %v, %v), want stock 4", v.Product, found, err)
	}
}

// TestMissingProductLeavesNothingInRedis: reads of ids that do not exist keep no view and
// no epoch — above the highest id (answered from memory) and below it (read through a
// rebuild).
func TestMissingProductLeavesNothingInRedis(t *testing.T) {
	w := newWorld(t, 1)
	gap := w.gap()
	c, _ := w.cache(Config{}, nil)
	for _, id := range []int64{gap, w.id + 1000} {
		if _, err := c.Product(context.Background(), id); !errors.Is(err, stock.ErrProductNotFound) {
			t.Fatalf("read of missing product %d: %v", id, err)
		}
	}
	if n := w.loads.Load(); n != 1 {
		t.Errorf("%d reads of products, want 1 (the id below the highest)", n)
	}
	keys, err := w.rdb.Keys(context.Background(), w.prefix+"view:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("keys left behind by reads of missing products: %v", keys)
	}
}

// TestHungRedisReadsFromPostgres: with Redis accepting connections and answering nothing
// (SIGSTOPped), product reads are answered from Postgres within a request's budget — the Redis
// step gives up after RedisTimeout, and the read of Postgres has a budget of its own — and a
// view read that way is never leased, so it never refuses an order. An order for a product
// that does not exist is still refused: that needs no Redis.
func TestHungRedisReadsFromPostgres(t *testing.T) {
	w := newWorld(t, 5)
	soldOut := w.create("sold-out")
	if _, err := w.pool.Exec(context.Background(), `UPDATE products SET stock = 0 WHERE id = $1`, soldOut.ID); err != nil {
		t.Fatal(err)
	}
	srv := testenv.StartRedis(t)
	rdb := srv.Client() // ends its commands with their contexts, as the service's client does
	c, _ := w.cacheOn(rdb, Config{}, nil)
	ctx := context.Background()
	for _, id := range []int64{w.id, soldOut.ID} { // the views are in Redis, the connections up
		if _, err := c.Product(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	c.forgetLeases()

	srv.Pause()
	defer srv.Resume()
	// The drill's budget: five reads, each given 3 s (the old flight gave Redis 4 s, then
	// Postgres what was left of them).
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		start := time.Now()
		v, err := c.Product(ctx, w.id)
		cancel()
		if err != nil || v.Stock != 5 || v.From != FromPostgres {
			t.Fatalf("read %d while Redis hangs: %+v, %v; want stock 5 from postgres", i+1, v, err)
		}
		t.Logf("read %d while Redis hangs: from %s in %v", i+1, v.From, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if r := c.Refusal(ctx, soldOut.ID); r != (stock.Refusal{}) {
		t.Errorf("order for the sold-out product while Redis hangs: %+v; a view read from Postgres without Redis must not refuse", r)
	}
	c.mu.Lock()
	leased := len(c.leases)
	c.mu.Unlock()
	if leased != 0 {
		t.Errorf("%d leases taken while Redis hangs, want none", leased)
	}
	if r := c.Refusal(ctx, soldOut.ID+1000); !r.Missing {
		t.Errorf("order for a product that does not exist while Redis hangs: %+v, want missing", r)
	}
}

// TestFallbackHasABudgetOfItsOwn: a Redis step that spends its whole budget (here, waiting for
// a rebuild lock nobody releases, with tries enough to outlast it) leaves the read of Postgres
// that follows a budget of its own, not a spent one.
func TestFallbackHasABudgetOfItsOwn(t *testing.T) {
	w := newWorld(t, 4)
	c, _ := w.cache(Config{RebuildTries: 1000}, nil)
	held, err := lock.New(w.rdb, lock.WithNamespace(w.prefix)).Obtain(context.Background(), c.rebuildLockName(w.id), time.Minute, &lock.Options{Fenceless: true})
	if err != nil {
		t.Fatalf("hold the rebuild lock: %v", err)
	}
	defer func() { _ = held.Release(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 3*fetchTimeout)
	defer cancel()
	v, err := c.Product(ctx, w.id)
	if err != nil || v.Stock != 4 || v.From != FromPostgres {
		t.Fatalf("read after the Redis step ran out of time: %+v, %v; want stock 4 from postgres", v, err)
	}
	if got := counted(c.metrics.giveUps); got != 0 {
		t.Errorf("give-ups = %v, want 0: the step must have ended on its budget, not on its tries", got)
	}
}

// TestViewBehindWhatThisReplicaSawIsRebuilt: a view in Redis that missed an update — its writer
// died between the commit and the view's update — is rebuilt from Postgres, not served, by a
// replica that knows Postgres reached a newer version (here: from a read of Postgres it made
// while Redis could not serve it).
func TestViewBehindWhatThisReplicaSawIsRebuilt(t *testing.T) {
	w := newWorld(t, 10)
	a, _ := w.cache(Config{}, nil)
	b, reg := w.cache(Config{}, nil)
	ctx := context.Background()
	if _, err := a.Product(ctx, w.id); err != nil { // the view, in Redis, at version 0
		t.Fatal(err)
	}
	// A purchase commits in Postgres; its replica dies before the view hears of it.
	if _, err := w.pool.Exec(ctx, `UPDATE products SET stock = stock - 3, version = version + 1 WHERE id = $1`, w.id); err != nil {
		t.Fatal(err)
	}
	b.saw(w.id, 1) // b read Postgres meanwhile (Redis paused, say)
	v, err := b.Product(ctx, w.id)
	if err != nil {
		t.Fatal(err)
	}
	if v.Stock != 7 || v.Version != 1 {
		t.Errorf("b read %d at version %d, want 7 at version 1: the stale view was served", v.Stock, v.Version)
	}
	if n := testenv.Metric(t, reg, "stocksvc_view_stale_total"); n != 1 {
		t.Errorf("stocksvc_view_stale_total = %v, want 1", n)
	}
	// And the view in Redis is the new one, for every replica.
	a.forgetLeases()
	if v, err := a.Product(ctx, w.id); err != nil || v.Version != 1 {
		t.Errorf("a then read %+v, %v; want version 1", v.Product, err)
	}
}

// TestViewCarriesTheLine: a product's line settings go through Redis with its view, since the
// order path learns from the view that a product needs an admission (package line); and a
// view written without them — by a replica from before the line, during a rolling upgrade —
// is read as it is (no line), not rebuilt on every read.
func TestViewCarriesTheLine(t *testing.T) {
	w := newWorld(t, 10)
	ctx := context.Background()
	line := stock.LineRules{Admit: 25, AdmissionFor: 90 * time.Second}
	if _, err := w.store.UpdateSale(ctx, w.id, stock.SaleChange{Line: &line}); err != nil {
		t.Fatal(err)
	}
	a, _ := w.cache(Config{}, nil)
	b, _ := w.cache(Config{}, nil)
	if _, err := a.Product(ctx, w.id); err != nil { // rebuilt from Postgres, into Redis
		t.Fatal(err)
	}
	w.loads.Store(0)
	v, err := b.Product(ctx, w.id)
	if err != nil {
		t.Fatal(err)
	}
	if v.From != FromRedis || v.Sale().Line != line {
		t.Errorf("b read the line %+v from %s, want %+v from Redis", v.Sale().Line, v.From, line)
	}
	// A view without the line's fields, as an older replica wrote it.
	key := a.keys(w.id)[0]
	if err := w.rdb.HDel(ctx, key, "line", "line_for").Err(); err != nil {
		t.Fatal(err)
	}
	c, _ := w.cache(Config{}, nil)
	if v, err := c.Product(ctx, w.id); err != nil || v.Sale().Line.Lined() || v.From != FromRedis {
		t.Errorf("c read %+v from %s, %v; want no line, from Redis", v.Sale().Line, v.From, err)
	}
	if n := w.loads.Load(); n != 0 {
		t.Errorf("%d Postgres reads, want 0: the view without the line is read as it is", n)
	}
}

// TestSaleBoundsRoundTrip: every bound Postgres can hold reads back the same from the view —
// rebuilt from Postgres, read from Redis by another replica, and leased in memory — the epoch
// itself (1970-01-01T00:00:00Z, which was once the view's "no bound") and bounds before it
// included. A bound read as none would let a replica take a sale for open that Postgres says is
// not (issue #31).
func TestSaleBoundsRoundTrip(t *testing.T) {
	at := func(s string) *time.Time {
		tm, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return &tm
	}
	tests := []struct {
		name string
		sale stock.SaleRules
	}{
		{"starts at the epoch", stock.SaleRules{StartsAt: at("1970-01-01T00:00:00Z")}},
		{"ends at the epoch", stock.SaleRules{StartsAt: at("1969-07-20T20:17:40Z"), EndsAt: at("1970-01-01T00:00:00Z")}},
		{"ends a microsecond before the epoch", stock.SaleRules{EndsAt: at("1969-12-31T23:59:59.999999Z")}},
		{"a microsecond after the epoch", stock.SaleRules{StartsAt: at("1970-01-01T00:00:00.000001Z"), EndsAt: at("2100-01-01T00:00:00Z")}},
		{"no bounds", stock.SaleRules{}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := newWorld(t, 5)
			p, err := w.store.CreateProduct(context.Background(), stock.NewProduct{SKU: "bounds-" + itoa(int64(i)), Name: "B", Stock: 5, Sale: tt.sale})
			if err != nil {
				t.Fatalf("create product: %v", err)
			}
			// A lease long enough that the second read is answered from memory however slow
			// the machine.
			cfg := Config{Lease: time.Minute}
			first, _ := w.cache(cfg, nil)
			other, _ := w.cache(cfg, nil)
			for _, read := range []struct {
				c    *Cache
				from string
			}{{first, FromPostgres}, {first, FromProcess}, {other, FromRedis}} {
				v, err := read.c.Product(context.Background(), p.ID)
				if err != nil {
					t.Fatalf("read: %v", err)
				}
				if v.From != read.from {
					t.Fatalf("read from %s, want %s", v.From, read.from)
				}
				if got, want := describeSale(v.Product.Sale()), describeSale(tt.sale); got != want {
					t.Errorf("sale read from %s = %s, want %s", v.From, got, want)
				}
				if got, want := describeSale(read.c.Refusal(context.Background(), p.ID).Sale), describeSale(tt.sale); got != want {
					t.Errorf("refusal's sale after a read from %s = %s, want %s", v.From, got, want)
				}
			}
		})
	}
}

// describeSale writes a sale's window for a comparison: "none" for a bound that is not set.
func describeSale(r stock.SaleRules) string {
	bound := func(t *time.Time) string {
		if t == nil {
			return "none"
		}
		return t.UTC().Format(time.RFC3339Nano)
	}
	return bound(r.StartsAt) + " to " + bound(r.EndsAt)
}
