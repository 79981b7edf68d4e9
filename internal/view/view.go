// Package view keeps a cached view of each product — its fields and its stock level — in Redis
// and, for a few milliseconds at a time, in each replica's memory, so that the crowd that
// refreshes a product page during a flash sale, and keeps buying once it is over, costs Postgres
// almost nothing.
//
// Reads are cache-aside: a lease in memory, else the view in Redis, else a rebuild from
// Postgres by one request across every replica (a singleflight in each replica, then the
// product's rebuild lock; the others wait and look again, a bounded number of times).
//
// The view is also what says a product is sold out, and that answer must be true when it is
// given. Purchases only lower the stock, so a view is never below the truth — except after a
// restock, which raises it. A raise therefore goes through Raise: it forbids new views and waits
// until every lease on an old one has run out before it writes, so that once a restock has been
// answered no replica can refuse an order on the level before it.
package view

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/singleflight"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// Config tunes a Cache. Zero fields take the defaults documented on each.
type Config struct {
	// Lease is how long a replica answers from a view it read from Redis without reading it
	// again; it bounds how stale a read served from memory may be, and every restock waits
	// it out before writing. Default 50ms.
	Lease time.Duration
	// TTL is how long a view lives in Redis without a write. Purchases keep a hot product's view
	// current; the TTL bounds how long a view can outlive a write whose update was lost (Redis
	// unreachable at that moment). Default 5s.
	TTL time.Duration
	// RebuildTries is how many times a read that finds no view tries to rebuild it — or finds
	// it rebuilt by whoever holds the rebuild lock — before it reads Postgres itself. Default 6,
	// over about 150ms.
	RebuildTries int
	// FallbackReads bounds the reads this replica sends to Postgres at once when Redis cannot
	// serve them (unreachable, or the rebuild tries ran out); a read beyond it is answered
	// unavailable. Default 8.
	FallbackReads int
}

func (c Config) withDefaults() Config {
	if c.Lease <= 0 {
		c.Lease = 50 * time.Millisecond
	}
	if c.TTL <= 0 {
		c.TTL = 5 * time.Second
	}
	if c.RebuildTries <= 0 {
		c.RebuildTries = 6
	}
	if c.FallbackReads <= 0 {
		c.FallbackReads = 8
	}
	return c
}

// Loader reads a product from Postgres. Errors: *stock.ProductNotFoundError, ErrUnavailable.
type Loader func(ctx context.Context, id int64) (stock.Product, error)

// Where a read was answered from, as reported in View.From and the metrics.
const (
	FromProcess  = stock.FromProcess
	FromRedis    = stock.FromRedis
	FromPostgres = stock.FromPostgres
)

// View is a product as a read saw it.
type View = stock.ProductView

// rebuildLockTTL bounds how long a rebuilder that died keeps the others waiting; a rebuild is
// one indexed read, and is given that long at most.
const rebuildLockTTL = 2 * time.Second

// maxRaise bounds how long a raise may take between marking the epoch pending and ending it; a
// pending mark older than twice this is taken for the mark of a writer that died.
const maxRaise = 30 * time.Second

// Cache serves and keeps product views. It is safe for concurrent use.
type Cache struct {
	rdb     redis.UniversalClient
	locks   *lock.Client
	prefix  string
	load    Loader
	cfg     Config
	metrics *Metrics

	flight   singleflight.Group
	fallback chan struct{}

	mu     sync.Mutex
	leases map[int64]lease
}

// lease is a view this replica may answer from until expires.
type lease struct {
	view View
	// start is when the read that got the view began: the view is no older than that.
	start time.Time
	// expires is when the replica must stop answering from the view: one lease after start
	// for a view read from Redis (or written there), zero for one that may not be leased (read
	// from Postgres while Redis could not serve it, or while a raise was under way).
	expires time.Time
}

// New returns a Cache over rdb. Its keys, and its rebuild locks' names, start with the lock
// client's namespace (STOCKSVC_REDIS_PREFIX). metrics may be nil.
func New(rdb redis.UniversalClient, locks *lock.Client, load Loader, cfg Config, metrics *Metrics) *Cache {
	cfg = cfg.withDefaults()
	return &Cache{
		rdb: rdb, locks: locks, prefix: locks.Namespace(), load: load, cfg: cfg, metrics: metrics,
		fallback: make(chan struct{}, cfg.FallbackReads),
		leases:   map[int64]lease{},
	}
}

// Lease returns the configured lease.
func (c *Cache) Lease() time.Duration { return c.cfg.Lease }

// keys returns the Redis keys of product id's view and epoch: the one place they are built.
func (c *Cache) keys(id int64) []string {
	tag := "{" + strconv.FormatInt(id, 10) + "}"
	return []string{c.prefix + "view:product:" + tag, c.prefix + "view:epoch:" + tag}
}

func (c *Cache) rebuildLockName(id int64) string {
	return c.prefix + "lock:view:{" + strconv.FormatInt(id, 10) + "}"
}

// Product returns product id's view: from this replica's lease, from Redis, or rebuilt from
// Postgres. When Redis cannot serve it (unreachable, or the rebuild tries ran out), it is read
// from Postgres, once for all the readers of the product that wait on this replica, and at
// most FallbackReads products at a time. Errors: *stock.ProductNotFoundError,
// stock.ErrUnavailable, the context's error.
func (c *Cache) Product(ctx context.Context, id int64) (View, error) {
	l, err := c.view(ctx, id)
	if err != nil {
		return View{}, err
	}
	c.metrics.read(l.view.From)
	return l.view, nil
}

// SoldOut reports whether product id is known to be sold out: its view, read within the lease,
// has no stock left. It never reads Postgres for a product whose view is in Redis, and a view
// it has to rebuild is rebuilt once for every replica. version is the view's. It answers false
// when it cannot tell (Redis unreachable, say): the purchase path decides then.
func (c *Cache) SoldOut(ctx context.Context, id int64) (version int64, soldOut bool) {
	l, err := c.view(ctx, id)
	// Only a view that may still be answered from: a lease that has not run out. (One that a
	// slow flight brought after its lease ended may be older than a restock that has
	// returned.)
	if err != nil || l.view.Product.Stock > 0 || !time.Now().Before(l.expires) {
		return 0, false
	}
	return l.view.Product.Version, true
}

// view returns product id's view from a lease, from Redis, or rebuilt, no older than one lease
// before the call.
func (c *Cache) view(ctx context.Context, id int64) (lease, error) {
	asked := time.Now()
	if l, ok := c.leased(id); ok {
		return l, nil
	}
	for joined := 1; ; joined++ {
		ch := c.flight.DoChan(strconv.FormatInt(id, 10), func() (any, error) {
			// The flight serves every caller that joins it: it must not end with the first.
			ctx := context.WithoutCancel(ctx)
			ctx, cancel := context.WithTimeout(ctx, 2*rebuildLockTTL)
			defer cancel()
			return c.fetch(ctx, id)
		})
		select {
		case r := <-ch:
			if r.Err != nil {
				return lease{}, r.Err
			}
			l := r.Val.(lease)
			// A flight that began over a lease before this caller asked (a slow Redis) would
			// answer it with a view older than the bound; the next one begins after it asked.
			if asked.Sub(l.start) > c.cfg.Lease && joined == 1 {
				continue
			}
			return l, nil
		case <-ctx.Done():
			return lease{}, fmt.Errorf("waiting for product %d's view: %w", id, context.Cause(ctx))
		}
	}
}

func (c *Cache) leased(id int64) (lease, bool) {
	c.mu.Lock()
	l, ok := c.leases[id]
	c.mu.Unlock()
	if !ok || !time.Now().Before(l.expires) {
		return lease{}, false
	}
	l.view.From = FromProcess
	return l, true
}

// fetch reads product id's view from Redis, rebuilding it if it is missing, and leases it; when
// Redis cannot serve it, it reads Postgres instead (and leases nothing).
func (c *Cache) fetch(ctx context.Context, id int64) (lease, error) {
	l, err := c.fetchCached(ctx, id)
	if err == nil || errors.Is(err, stock.ErrProductNotFound) || errors.As(err, new(postgresError)) {
		// Postgres itself failed the rebuild: asking it again would fail the same way.
		return l, err
	}
	start := time.Now()
	v, ferr := c.readPostgres(ctx, id)
	if ferr != nil {
		return lease{}, errors.Join(ferr, err)
	}
	return lease{view: v, start: start}, nil
}

func (c *Cache) fetchCached(ctx context.Context, id int64) (lease, error) {
	for try := 1; ; try++ {
		start := time.Now() // before the read: the lease must end before a raise can write
		v, found, err := c.readRedis(ctx, id)
		if err != nil {
			return lease{}, err
		}
		if found {
			return c.keep(id, v, start), nil
		}
		l, built, err := c.rebuild(ctx, id)
		if err != nil || built {
			return l, err
		}
		if try >= c.cfg.RebuildTries {
			c.metrics.giveUp()
			return lease{}, fmt.Errorf("%w: product %d's view was not rebuilt after %d tries", stock.ErrUnavailable, id, try)
		}
		// Someone else is rebuilding it: wait a little, then look again.
		c.metrics.rebuildWait()
		if err := sleep(ctx, backoff(try)); err != nil {
			return lease{}, err
		}
	}
}

// backoff is the wait before try+1: 5, 10, 20, 40, 80, 160ms... — a rebuild takes a few
// milliseconds, and the waits add up to 155ms over the default tries.
func backoff(try int) time.Duration {
	return (5 * time.Millisecond) << min(try-1, 6)
}

// rebuild rebuilds product id's view from Postgres if it gets the rebuild lock; built is false
// when someone else holds it.
func (c *Cache) rebuild(ctx context.Context, id int64) (_ lease, built bool, _ error) {
	l, err := c.locks.Obtain(ctx, c.rebuildLockName(id), rebuildLockTTL, &lock.Options{Fenceless: true})
	if errors.Is(err, lock.ErrNotObtained) {
		return lease{}, false, nil
	}
	if err != nil {
		return lease{}, false, fmt.Errorf("%w: rebuild lock: %w", stock.ErrUnavailable, err)
	}
	defer func() { _ = l.Release(context.WithoutCancel(ctx)) }()
	start := time.Now()
	// Whoever held the lock just before may have written the view after this flight looked.
	if v, found, err := c.readRedis(ctx, id); err != nil || found {
		if err != nil {
			return lease{}, false, err
		}
		return c.keep(id, v, start), true, nil
	}
	keys := c.keys(id)
	epoch, err := epochScript.Run(ctx, c.rdb, keys, rand.Text(), (2 * maxRaise).Milliseconds()).Text()
	if err != nil {
		return lease{}, false, fmt.Errorf("%w: view epoch: %w", stock.ErrUnavailable, err)
	}
	c.metrics.postgresQuery("rebuild")
	p, err := c.load(ctx, id)
	if err != nil {
		if errors.Is(err, stock.ErrProductNotFound) {
			// Keep no epoch for a product that does not exist: ids nobody will ever create
			// would otherwise pile up in Redis.
			_ = dropEpochScript.Run(context.WithoutCancel(ctx), c.rdb, keys[1:], epoch).Err()
			return lease{}, false, err
		}
		return lease{}, false, postgresError{err}
	}
	v := View{Product: p, Read: time.Now(), From: FromPostgres}
	c.metrics.rebuilt()
	if isPending(epoch) {
		// A raise is under way: answer from this read, but write and lease nothing.
		return lease{view: v, start: start}, true, nil
	}
	written, err := writeScript.Run(ctx, c.rdb, keys, viewArgs(epoch, "", v, c.cfg.TTL)...).Int()
	if err != nil || written != 1 {
		// Not written: a raise began since the epoch was read, or a newer view is there.
		return lease{view: v, start: start}, true, nil
	}
	return c.keep(id, v, start), true, nil
}

// readPostgres reads product id from Postgres without the cache: the way reads are served when
// Redis cannot serve them, at most FallbackReads at a time.
func (c *Cache) readPostgres(ctx context.Context, id int64) (View, error) {
	select {
	case c.fallback <- struct{}{}:
		defer func() { <-c.fallback }()
	default:
		c.metrics.fallbackRefused()
		return View{}, fmt.Errorf("%w: the product view is unavailable and %d reads of Postgres are already in flight", stock.ErrUnavailable, c.cfg.FallbackReads)
	}
	c.metrics.postgresQuery("fallback")
	p, err := c.load(ctx, id)
	if err != nil {
		return View{}, err
	}
	return View{Product: p, Read: time.Now(), From: FromPostgres}, nil
}

// keep leases v, read from Redis (or written there) no earlier than start, and returns the
// lease. A lease never goes back to an older version.
func (c *Cache) keep(id int64, v View, start time.Time) lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	l := lease{view: v, start: start, expires: start.Add(c.cfg.Lease)}
	if old, ok := c.leases[id]; ok && old.view.Product.Version > v.Product.Version && time.Now().Before(old.expires) {
		return l
	}
	c.leases[id] = l
	if len(c.leases) > maxLeases {
		now := time.Now()
		for k, l := range c.leases {
			if !now.Before(l.expires) {
				delete(c.leases, k)
			}
		}
	}
	return l
}

// maxLeases is how many leases a replica keeps before it clears the expired ones.
const maxLeases = 4096

// updateTimeout bounds how long a purchase's answers wait for Redis to take the view's update.
const updateTimeout = 500 * time.Millisecond

// Committed records that a purchase committed product id at level (stock left, version) at
// time at: it moves this replica's lease and the view in Redis, if they are older, and returns
// once Redis has taken the update (or updateTimeout has passed: the update is then counted
// lost, and the view lags until the next one or its TTL). The Service calls it before it
// answers the purchase's orders, so that a read that starts after a 201 reflects the order, on
// any replica whose lease does not predate it. It never creates a view (that is a rebuild's
// job, under an epoch). Purchases only lower the stock, so a view that misses an update shows
// more stock than there is, never less: it may send an order to the purchase path that then
// refuses it, but never refuses one itself.
func (c *Cache) Committed(id int64, stockLeft, version int64, at time.Time) {
	c.mu.Lock()
	if l, ok := c.leases[id]; ok && l.view.Product.Version < version {
		l.view.Product.Stock, l.view.Product.Version, l.view.Product.UpdatedAt, l.view.Read = stockLeft, version, at, at
		c.leases[id] = l
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), updateTimeout)
	defer cancel()
	err := levelScript.Run(ctx, c.rdb, c.keys(id)[:1], version, stockLeft, micros(at), micros(at), c.cfg.TTL.Milliseconds()).Err()
	if err != nil {
		c.metrics.updateLost()
	}
}

// Raise prepares product id for a write that may raise its stock (a restock): it forbids new
// views of the product, deletes the one in Redis, and waits until every lease on an older view,
// on every replica, has run out. The write must be made before ctx ends and within maxRaise;
// then done must be called with the product as the write left it, or nil when the write failed
// or its outcome is unknown. Errors: stock.ErrUnavailable (Redis could not be told: nothing may
// be written then), the context's error.
func (c *Cache) Raise(ctx context.Context, id int64) (done func(p *stock.Product), err error) {
	keys := c.keys(id)
	pending, err := raiseScript.Run(ctx, c.rdb, keys, rand.Text()).Text()
	if err != nil {
		return nil, fmt.Errorf("%w: view of product %d: %w", stock.ErrUnavailable, id, err)
	}
	begun := time.Now()
	c.mu.Lock()
	delete(c.leases, id)
	c.mu.Unlock()
	// A lease began before its view was read, and every view read since the mark above is
	// gone: every lease on an older view ends within one lease from now. The margin covers
	// clocks of other machines running a little slow.
	if err := sleep(ctx, c.cfg.Lease+c.cfg.Lease/10+time.Millisecond); err != nil {
		c.endRaise(keys, pending, nil)
		return nil, err
	}
	return func(p *stock.Product) {
		if time.Since(begun) > maxRaise {
			p = nil // the mark may have been taken for a dead writer's: write no view
		}
		c.endRaise(keys, pending, p)
	}, nil
}

// endRaise ends a raise: a new epoch and, when p is known, its view.
func (c *Cache) endRaise(keys []string, pending string, p *stock.Product) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	next := "e:" + rand.Text()
	var err error
	if p == nil {
		err = endRaiseScript.Run(ctx, c.rdb, keys, pending, next).Err()
	} else {
		v := View{Product: *p, Read: time.Now()}
		err = writeScript.Run(ctx, c.rdb, keys, viewArgs(pending, next, v, c.cfg.TTL)...).Err()
	}
	if err != nil {
		// The epoch stays pending: no view is written until maxRaise has passed, and reads go
		// to Postgres meanwhile. Correct, if slower.
		c.metrics.updateLost()
	}
}

// readRedis reads product id's view from Redis; found is false when there is none.
func (c *Cache) readRedis(ctx context.Context, id int64) (View, bool, error) {
	fields, err := c.rdb.HGetAll(ctx, c.keys(id)[0]).Result()
	if err != nil {
		return View{}, false, fmt.Errorf("%w: read product %d's view: %w", stock.ErrUnavailable, id, err)
	}
	if len(fields) == 0 {
		return View{}, false, nil
	}
	v, err := parseView(id, fields)
	if err != nil {
		// Not a view this code wrote (a half-written hash cannot exist: scripts are atomic).
		// Treat it as missing: the rebuild overwrites it.
		return View{}, false, nil
	}
	v.From = FromRedis
	return v, true, nil
}

// postgresError is a rebuild's failure to read Postgres, as opposed to Redis's failure to serve
// the view: only the latter is worth a fallback read of Postgres.
type postgresError struct{ err error }

func (e postgresError) Error() string { return e.err.Error() }
func (e postgresError) Unwrap() error { return e.err }

func isPending(epoch string) bool { return len(epoch) > 1 && epoch[:2] == "p:" }

// viewArgs are writeLua's arguments for v.
func viewArgs(epoch, next string, v View, ttl time.Duration) []any {
	p := v.Product
	return []any{epoch, next, p.Version, ttl.Milliseconds(),
		"sku", p.SKU, "name", p.Name, "stock", p.Stock, "version", p.Version,
		"created", micros(p.CreatedAt), "updated", micros(p.UpdatedAt), "read", micros(v.Read)}
}

func parseView(id int64, f map[string]string) (View, error) {
	var v View
	v.Product.ID, v.Product.SKU, v.Product.Name = id, f["sku"], f["name"]
	var errs []error
	num := func(name string) int64 {
		n, err := strconv.ParseInt(f[name], 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("field %s: %w", name, err))
		}
		return n
	}
	v.Product.Stock, v.Product.Version = num("stock"), num("version")
	v.Product.CreatedAt, v.Product.UpdatedAt = time.UnixMicro(num("created")), time.UnixMicro(num("updated"))
	v.Read = time.UnixMicro(num("read"))
	if _, ok := f["sku"]; !ok {
		errs = append(errs, errors.New("no sku"))
	}
	return v, errors.Join(errs...)
}

func micros(t time.Time) int64 { return t.UnixMicro() }

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
