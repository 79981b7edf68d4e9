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
//
// Each replica also remembers, for a lease at a time, which products do not exist (missing.go),
// so that orders and reads for ids nobody created cost neither Redis nor Postgres; a creation
// waits that lease out before it answers (Created), so that none is hidden by it.
//
// Redis is asked with a short deadline (Config.RedisTimeout): when it does not answer, a read
// goes to Postgres with a budget of its own instead of waiting on it.
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

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// Config tunes a Cache. Zero fields take the defaults documented on each.
type Config struct {
	// Lease is how long a replica answers from a view it read from Redis without reading it
	// again; it bounds how stale a read served from memory may be, and every restock waits
	// it out before writing. It is also how long a replica remembers that a product does not
	// exist, which every creation waits out before it answers (Created). Default 50ms.
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
	// RedisTimeout bounds each Redis command a read makes (the view, the rebuild lock, the
	// epoch, the rebuilt view's write): a Redis that has not answered by then is taken for one
	// that cannot serve the read, which then goes to Postgres. It is an order of magnitude
	// above a healthy Redis's slowest answers, and what a read costs on top of Postgres while
	// Redis hangs. The Redis client must end a command when its context does
	// (ContextTimeoutEnabled, as cmd/stocksvc builds it); one that does not holds each command
	// for its own read timeout instead. Default 500ms.
	RedisTimeout time.Duration
	// MarkOptional lets a purchase whose mark cannot be taken (Writing) be written all the
	// same. Set it where the views' Redis is not the lock's — Redlock, whose views live on its
	// first node alone, while the lock needs only a quorum of nodes: losing that one node must
	// cost the reads their cache, not stop the sale. The price is the one marks remove
	// elsewhere: a replica cut off from that node alone writes unmarked, and the others may
	// read its products' views up to TTL behind its writes (reads only: Postgres decides every
	// order). Without it, a write that cannot be marked is not made.
	MarkOptional bool
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
	if c.RedisTimeout <= 0 {
		c.RedisTimeout = 500 * time.Millisecond
	}
	return c
}

// Source is where views are read from when Redis has none: Postgres, through the stock store
// (*stockpg.Store implements it).
type Source interface {
	// Product reads the product with id. Errors: *stock.ProductNotFoundError,
	// stock.ErrUnavailable.
	Product(ctx context.Context, id int64) (stock.Product, error)
	// HighestProductID reads the highest id of a product that exists, 0 for none. Errors:
	// stock.ErrUnavailable.
	HighestProductID(ctx context.Context) (int64, error)
}

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

// fetchTimeout bounds a flight's Redis step as a whole: its tries, the waits between them, and
// a rebuild's read of Postgres (each Redis command has Config.RedisTimeout).
const fetchTimeout = 2 * rebuildLockTTL

// postgresTimeout bounds a read of Postgres made for the views without Redis — a fallback read,
// or the highest product id. It is a budget of its own, not what the Redis step left: a Redis
// that hung must not leave the read nothing to reach Postgres with.
const postgresTimeout = 2 * time.Second

// maxRaise bounds how long a raise may take between marking the epoch pending and ending it; a
// pending mark older than twice this is taken for the mark of a writer that died.
const maxRaise = 30 * time.Second

// Cache serves and keeps product views. It is safe for concurrent use.
type Cache struct {
	rdb     redis.UniversalClient
	locks   *lock.Client
	prefix  string
	src     Source
	cfg     Config
	metrics *Metrics
	absent  absent

	flight   singleflight.Group
	fallback chan struct{}

	mu     sync.Mutex
	leases map[int64]lease
	// seen is, per product, the newest version this replica knows Postgres has reached: from
	// its own purchases and its reads of Postgres. A view in Redis older than that missed an
	// update — a replica died between its commit and the view's update, or Redis was
	// unreachable then — and is rebuilt instead of served.
	seen map[int64]int64

	// joined, when set, runs once a read has joined a flight for product id. Tests use it to
	// know when a read waits on a flight they hold.
	joined func(id int64)
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

// New returns a Cache over rdb, reading src when Redis has no view. Its keys, and its rebuild
// locks' names, start with the lock client's namespace (STOCKSVC_REDIS_PREFIX). Every replica
// must be given the same lease. metrics may be nil.
func New(rdb redis.UniversalClient, locks *lock.Client, src Source, cfg Config, metrics *Metrics) *Cache {
	cfg = cfg.withDefaults()
	return &Cache{
		rdb: rdb, locks: locks, prefix: locks.Namespace(), src: src, cfg: cfg, metrics: metrics,
		absent:   absent{src: src, lease: cfg.Lease, metrics: metrics, ids: map[int64]time.Time{}},
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
// Postgres. When Redis cannot serve it (unreachable, not answering within RedisTimeout, or the
// rebuild tries ran out), it is read from Postgres, once for all the readers of the product that
// wait on this replica, and at most FallbackReads products at a time. A product this replica
// knows does not exist is answered so at once. Errors: *stock.ProductNotFoundError,
// stock.ErrUnavailable, the context's error.
func (c *Cache) Product(ctx context.Context, id int64) (View, error) {
	l, err := c.view(ctx, id, "read")
	if err != nil {
		return View{}, err
	}
	c.metrics.read(l.view.From)
	return l.view, nil
}

// Refusal reports what refuses an order for product id at once: that it does not exist — this
// replica knows so (missing.go), or the view's read of Postgres found so — or that its view,
// read within the lease, has no stock left. It never reads Postgres for a product whose view is
// in Redis, and a view it has to rebuild is rebuilt once for every replica. It answers the zero
// Refusal when it cannot tell (Redis unreachable, say): the purchase path decides then.
func (c *Cache) Refusal(ctx context.Context, id int64) stock.Refusal {
	l, err := c.view(ctx, id, "order")
	if errors.Is(err, stock.ErrProductNotFound) {
		// view answers "not found" only from a read that began at most one lease before it
		// was called: a creation that has been answered is never behind it.
		return stock.Refusal{Missing: true}
	}
	// Only a view that may still be answered from: a lease that has not run out. (One that a
	// slow flight brought after its lease ended may be older than a restock that has
	// returned.)
	if err != nil || !time.Now().Before(l.expires) {
		return stock.Refusal{}
	}
	return stock.Refusal{SoldOut: l.view.Product.Stock <= 0, Version: l.view.Product.Version,
		Sale: l.view.Product.Sale(), Known: true}
}

// Created returns one lease and a margin after it is called: by then no replica answers "not
// found" for a product whose insert committed before the call (missing.go has the proof). It
// waits whatever happens to the caller: the product exists, and its creation must not be
// answered before.
func (c *Cache) Created(id int64) {
	t := time.NewTimer(c.cfg.Lease + margin(c.cfg.Lease))
	defer t.Stop()
	<-t.C
}

// margin is added to a lease that another replica waits out: it covers clocks of other
// machines running a little slow.
func margin(lease time.Duration) time.Duration { return lease/10 + time.Millisecond }

// view returns product id's view from a lease, from Redis, or rebuilt, no older than one lease
// before the call; or *stock.ProductNotFoundError from this replica's memory of missing
// products, or from a read of Postgres that began no earlier than one lease before the call.
// use says what the answer is for ("read" or "order"), for the metrics.
func (c *Cache) view(ctx context.Context, id int64, use string) (lease, error) {
	asked := time.Now()
	if l, ok := c.leased(id); ok {
		return l, nil
	}
	if c.absent.missing(ctx, id, asked) {
		c.metrics.notFound(use, "memory")
		return lease{}, &stock.ProductNotFoundError{ProductID: id}
	}
	for joined := 1; ; joined++ {
		ch := c.flight.DoChan(strconv.FormatInt(id, 10), func() (any, error) {
			// The flight serves every caller that joins it: it must not end with the first.
			l, err := c.fetch(context.WithoutCancel(ctx), id)
			if errors.Is(err, stock.ErrProductNotFound) {
				c.absent.found(id, l.start)
			}
			return l, err
		})
		if c.joined != nil {
			c.joined(id)
		}
		select {
		case r := <-ch:
			l, _ := r.Val.(lease)
			notFound := errors.Is(r.Err, stock.ErrProductNotFound)
			if r.Err != nil && !notFound {
				return lease{}, r.Err
			}
			// A flight that began over a lease before this caller asked (a slow Redis) would
			// answer it with a view, or a "not found", older than the bound; the next one
			// begins after it asked.
			if asked.Sub(l.start) > c.cfg.Lease && joined == 1 {
				continue
			}
			if notFound {
				c.metrics.notFound(use, "postgres")
			}
			return l, r.Err
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
// Redis cannot serve it, it reads Postgres instead (and leases nothing). A product that does
// not exist is *stock.ProductNotFoundError, with the returned lease's start set to when the read
// that found so began.
func (c *Cache) fetch(ctx context.Context, id int64) (lease, error) {
	cached, cancel := context.WithTimeout(ctx, fetchTimeout)
	l, err := c.fetchCached(cached, id)
	cancel()
	if err == nil || errors.Is(err, stock.ErrProductNotFound) || errors.As(err, new(postgresError)) {
		// Postgres itself failed the rebuild: asking it again would fail the same way.
		return l, err
	}
	// A budget of its own: a Redis that hung may have left the step above none.
	ctx, cancel = context.WithTimeout(ctx, postgresTimeout)
	defer cancel()
	start := time.Now()
	v, ferr := c.readPostgres(ctx, id)
	switch {
	case errors.Is(ferr, stock.ErrProductNotFound):
		return lease{start: start}, ferr
	case ferr != nil:
		return lease{}, errors.Join(ferr, err)
	}
	c.saw(id, v.Product.Version)
	return lease{view: v, start: start}, nil
}

func (c *Cache) fetchCached(ctx context.Context, id int64) (lease, error) {
	for try := 1; ; try++ {
		start := time.Now() // before the read: the lease must end before a raise can write
		v, until, found, err := c.readRedis(ctx, id)
		if err != nil {
			return lease{}, err
		}
		if found && c.fresh(id, v, until) {
			return c.keep(id, v, start, until), nil
		}
		if found {
			c.metrics.staleView()
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
		if err := clock.Sleep(ctx, backoff(try)); err != nil {
			return lease{}, err
		}
	}
}

// redisCtx bounds one Redis command of a read by RedisTimeout (see Config).
func (c *Cache) redisCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.RedisTimeout)
}

// backoff is the wait before try+1: 5, 10, 20, 40, 80, 160ms... — a rebuild takes a few
// milliseconds, and the waits add up to 155ms over the default tries.
func backoff(try int) time.Duration {
	return (5 * time.Millisecond) << min(try-1, 6)
}

// rebuild rebuilds product id's view from Postgres if it gets the rebuild lock; built is false
// when someone else holds it. A product that does not exist is *stock.ProductNotFoundError,
// with the lease's start set to before the read that found so.
func (c *Cache) rebuild(ctx context.Context, id int64) (_ lease, built bool, _ error) {
	rctx, cancel := c.redisCtx(ctx)
	l, err := c.locks.Obtain(rctx, c.rebuildLockName(id), rebuildLockTTL, &lock.Options{Fenceless: true})
	cancel()
	if errors.Is(err, lock.ErrNotObtained) {
		return lease{}, false, nil
	}
	if err != nil {
		return lease{}, false, fmt.Errorf("%w: rebuild lock: %w", stock.ErrUnavailable, err)
	}
	// A Redis that did not answer a command of the rebuild would hold the release for the
	// lock's own timeout (seconds), keeping this read from Postgres meanwhile: the lock's TTL
	// frees it instead then.
	redisFailed := false
	defer func() {
		if !redisFailed {
			_ = l.Release(context.WithoutCancel(ctx))
		}
	}()
	start := time.Now()
	// Whoever held the lock just before may have written the view after this flight looked
	// (one older than this replica knows of is rebuilt, over it).
	if v, until, found, err := c.readRedis(ctx, id); err != nil || found && c.fresh(id, v, until) {
		if err != nil {
			redisFailed = true
			return lease{}, false, err
		}
		return c.keep(id, v, start, until), true, nil
	}
	keys := c.keys(id)
	rctx, cancel = c.redisCtx(ctx)
	epoch, err := epochScript.Run(rctx, c.rdb, keys, rand.Text(), (2 * maxRaise).Milliseconds()).Text()
	cancel()
	if err != nil {
		redisFailed = true
		return lease{}, false, fmt.Errorf("%w: view epoch: %w", stock.ErrUnavailable, err)
	}
	c.metrics.postgresQuery("rebuild")
	p, err := c.src.Product(ctx, id)
	if err != nil {
		if errors.Is(err, stock.ErrProductNotFound) {
			// Keep no epoch for a product that does not exist: ids nobody will ever create
			// would otherwise pile up in Redis.
			rctx, cancel := c.redisCtx(context.WithoutCancel(ctx))
			redisFailed = dropEpochScript.Run(rctx, c.rdb, keys[1:], epoch).Err() != nil
			cancel()
			return lease{start: start}, false, err
		}
		return lease{}, false, postgresError{err}
	}
	v := View{Product: p, Read: time.Now(), From: FromPostgres}
	c.metrics.rebuilt()
	if isPending(epoch) {
		// A raise is under way: answer from this read, but write and lease nothing.
		return lease{view: v, start: start}, true, nil
	}
	rctx, cancel = c.redisCtx(ctx)
	written, werr := writeScript.Run(rctx, c.rdb, keys, viewArgs(epoch, "", v, c.cfg.TTL)...).Int()
	cancel()
	redisFailed = werr != nil
	if werr != nil || written != 1 {
		// Not written: a raise began since the epoch was read, or a newer view is there (or
		// Redis did not answer). Answer from the read, lease nothing.
		return lease{view: v, start: start}, true, nil
	}
	return c.keep(id, v, start, time.Time{}), true, nil
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
	p, err := c.src.Product(ctx, id)
	if err != nil {
		return View{}, err
	}
	return View{Product: p, Read: time.Now(), From: FromPostgres}, nil
}

// keep leases v, read from Redis (or written there) no earlier than start, and returns the
// lease; one lease long, or until until when that is earlier (a view a purchase has marked).
// A lease never goes back to an older version.
func (c *Cache) keep(id int64, v View, start, until time.Time) lease {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sawLocked(id, v.Product.Version)
	l := lease{view: v, start: start, expires: start.Add(c.cfg.Lease)}
	if !until.IsZero() && until.Before(l.expires) {
		l.expires = until
	}
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

// saw records that Postgres has reached version of product id.
func (c *Cache) saw(id, version int64) {
	c.mu.Lock()
	c.sawLocked(id, version)
	c.mu.Unlock()
}

func (c *Cache) sawLocked(id, version int64) {
	if c.seen == nil || len(c.seen) >= maxSeen {
		// Forgetting only costs a stale view's chance of being caught here; its TTL and the
		// next purchase still end it.
		c.seen = map[int64]int64{}
	}
	if version > c.seen[id] {
		c.seen[id] = version
	}
}

// fresh reports whether view v of product id, read from Redis with until (readRedis), may be
// served: it is not older than what this replica knows Postgres has reached, and no write it
// has not heard of was marked over one lease ago. A view that is not fresh is rebuilt.
func (c *Cache) fresh(id int64, v View, until time.Time) bool {
	return !c.behind(id, v.Product.Version) && (until.IsZero() || time.Now().Before(until))
}

// behind reports whether a view of product id at version is older than what this replica
// knows Postgres has reached.
func (c *Cache) behind(id, version int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return version < c.seen[id]
}

// maxSeen bounds the products whose newest version a replica remembers.
const maxSeen = 100_000

// maxLeases is how many leases a replica keeps before it clears the expired ones.
const maxLeases = 4096

// updateTimeout bounds how long a purchase's answers wait for Redis to take the view's update.
const updateTimeout = 500 * time.Millisecond

// Committed records that a purchase committed product id at level (stock left, version) at
// time at: it moves this replica's lease and the view in Redis, if they are older, and returns
// once Redis has taken the update (or updateTimeout has passed: the update is then counted
// lost, and the view lags until the next one, or until one lease after the purchase's mark
// (Writing) when no update comes). The Service calls it before it
// answers the purchase's orders, so that a read that starts after a 201 reflects the order, on
// any replica whose lease does not predate it. It never creates a view (that is a rebuild's
// job, under an epoch). Purchases only lower the stock, so a view that misses an update shows
// more stock than there is, never less: it may send an order to the purchase path that then
// refuses it, but never refuses one itself.
func (c *Cache) Committed(id int64, stockLeft, version int64, at time.Time) {
	c.mu.Lock()
	c.sawLocked(id, version)
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

// Writing marks the views of the products w takes stock from as being written, before the
// write is made: every replica serves a marked view for at most one lease after the mark, until
// an update moves the view past the mark (Committed, a later purchase's, or a rebuild from
// Postgres). So a purchase whose update never reaches Redis — its replica cut off from Redis
// after marking, or killed before its update — leaves views at most one lease behind it, as a
// lease taken just before the write would be. The mark is one script per product, whose one
// round trip is what it costs a batch. Errors: stock.ErrUnavailable (Redis did not take the
// mark within markTimeout: the write must not be made, since nothing would bound how long the
// other replicas served the level before it).
func (c *Cache) Writing(ctx context.Context, w stock.Write) error {
	return c.mark(ctx, w, time.Now()) // before the write begins: the mark may only be early
}

// mark marks w's products' views as written from at.
func (c *Cache) mark(ctx context.Context, w stock.Write, at time.Time) error {
	for _, d := range w.Decrements {
		rctx, cancel := context.WithTimeout(ctx, markTimeout)
		err := markScript.Run(rctx, c.rdb, c.keys(d.ProductID)[:1], d.Read.Version+1, micros(at), c.cfg.TTL.Milliseconds()).Err()
		cancel()
		if err != nil && !c.cfg.MarkOptional {
			return fmt.Errorf("%w: mark product %d's view: %w", stock.ErrUnavailable, d.ProductID, err)
		}
	}
	return nil
}

// markTimeout bounds a purchase's wait for its mark. A read that Redis does not answer within
// RedisTimeout goes to Postgres instead, but a mark not taken fails its batch: so it waits
// longer, as the batch's write to Postgres may (a drill on a 2-core machine at a load of 29
// saw marks fail at 500 ms with Redis healthy). Redis cut off from the replica holds the
// batch, and the product's lock, this long at most, which a lock's TTL and fence already bound.
const markTimeout = 2 * time.Second

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
	// gone: every lease on an older view ends within one lease from now.
	if err := clock.Sleep(ctx, c.cfg.Lease+margin(c.cfg.Lease)); err != nil {
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

// readRedis reads product id's view from Redis; found is false when there is none. The view
// comes with until: when it stops being fresh enough to serve, for a view a purchase has marked
// (Writing) and not yet moved past; zero for one no purchase has marked.
func (c *Cache) readRedis(ctx context.Context, id int64) (_ View, until time.Time, found bool, _ error) {
	ctx, cancel := c.redisCtx(ctx)
	defer cancel()
	fields, err := c.rdb.HGetAll(ctx, c.keys(id)[0]).Result()
	if err != nil {
		return View{}, time.Time{}, false, fmt.Errorf("%w: read product %d's view: %w", stock.ErrUnavailable, id, err)
	}
	if len(fields) == 0 {
		return View{}, time.Time{}, false, nil
	}
	v, err := parseView(id, fields)
	if err != nil {
		// Not a view this code wrote (a half-written hash cannot exist: scripts are atomic),
		// or only a purchase's mark on a view that is not there. Treat it as missing: the
		// rebuild overwrites it (and keeps the mark).
		return View{}, time.Time{}, false, nil
	}
	v.From = FromRedis
	if marked, ok := oldestMark(fields, v.Product.Version); ok {
		// The marked write may have committed as early as marked: the view may be served
		// until one lease after that, as a view read then would be (less a margin for the
		// writer's clock running ahead of this one).
		until = marked.Add(c.cfg.Lease - margin(c.cfg.Lease))
	}
	return v, until, true, nil
}

// oldestMark returns the earliest mark in a view's fields of a write to a version above
// version: the moment since which the view may be behind Postgres.
func oldestMark(fields map[string]string, version int64) (time.Time, bool) {
	var oldest int64
	found := false
	for f, at := range fields {
		if len(f) < 3 || f[:2] != "w:" {
			continue
		}
		to, err := strconv.ParseInt(f[2:], 10, 64)
		us, uerr := strconv.ParseInt(at, 10, 64)
		if err != nil || uerr != nil || to <= version {
			continue
		}
		if !found || us < oldest {
			oldest, found = us, true
		}
	}
	return time.UnixMicro(oldest), found
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
		"created", micros(p.CreatedAt), "updated", micros(p.UpdatedAt), "read", micros(v.Read),
		"starts_at", optMicros(p.SaleStartsAt), "ends_at", optMicros(p.SaleEndsAt),
		"starts", legacyMicros(p.SaleStartsAt), "ends", legacyMicros(p.SaleEndsAt), "max", p.MaxPerCustomer,
		"hold", int64(p.HoldFor / time.Second), "maxheld", p.MaxHeldPerCustomer,
		"line", p.LineAdmit, "line_for", int64(p.LineAdmissionFor / time.Second)}
}

// optMicros writes an optional time as microseconds since the epoch, and none as the empty
// string: every instant Postgres can hold, the epoch itself and those before it included, is
// a number of its own.
func optMicros(t *time.Time) string {
	if t == nil {
		return ""
	}
	return strconv.FormatInt(t.UnixMicro(), 10)
}

// legacyMicros writes an optional time as replicas from before issue #31 read it from the
// fields starts and ends: microseconds, with 0 for none — which they also read a bound at the
// epoch as. Views keep those fields so that such replicas, during a rolling upgrade, read
// views written by newer ones instead of rebuilding each of them (and having the write refused
// by the version check) on every read.
func legacyMicros(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixMicro()
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
	// A view is written whole, with its sale rules, by a script: one without them was written
	// by a replica from before the rules, and is rebuilt rather than read as having none.
	v.Product.SaleStartsAt, v.Product.SaleEndsAt = bound(f, "starts_at", "starts", &errs), bound(f, "ends_at", "ends", &errs)
	v.Product.MaxPerCustomer = num("max")
	v.Product.HoldFor = time.Duration(num("hold")) * time.Second
	v.Product.MaxHeldPerCustomer = num("maxheld")
	// The line's settings, which tell the order path that an order needs an admission
	// (package line). A view from a replica before the line has none, and is read as a
	// product without a line rather than rebuilt: such a replica, during a rolling upgrade,
	// would write it back at once, and every read here would go to Postgres. No line is
	// enforced until every replica knows lines (docs/operations.md).
	if _, ok := f["line"]; ok {
		v.Product.LineAdmit = num("line")
		v.Product.LineAdmissionFor = time.Duration(num("line_for")) * time.Second
	}
	if _, ok := f["sku"]; !ok {
		errs = append(errs, errors.New("no sku"))
	}
	return v, errors.Join(errs...)
}

// bound reads a sale bound from field name, as optMicros wrote it, or, in a view written by a
// replica from before that field, from field legacy, where 0 meant none. Such a view cannot
// hold a bound at the epoch: it reads as none, as it did for the replica that wrote it.
func bound(f map[string]string, name, legacy string, errs *[]error) *time.Time {
	s, ok := f[name]
	switch {
	case ok && s == "", !ok && f[legacy] == "0":
		return nil
	case !ok:
		name, s = legacy, f[legacy]
	}
	us, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		*errs = append(*errs, fmt.Errorf("field %s: %w", name, err))
		return nil
	}
	t := time.UnixMicro(us)
	return &t
}

func micros(t time.Time) int64 { return t.UnixMicro() }
