package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/async/asyncpg"
	"github.com/stocksvc/stocksvc/internal/clock"
	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/keyspace"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linepg"
	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/lock/lockprom"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/demo"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/view"
)

// serve runs the API until ctx ends, then shuts down within one budget (see shutdown).
//
// It listens before its dependencies answer: while it waits for Postgres and migrates,
// /healthz says the process is alive and everything else, /readyz included, says 503
// (stockhttp.Starting). An orchestrator then neither restarts a replica that is only waiting
// for its database nor routes orders to it. Redis is not waited for: without it a replica
// serves what Postgres alone can, as it does when Redis fails later (see openDependencies).
func serve(ctx context.Context, stopSignals func(), cfg config, log *slog.Logger) error {
	log.InfoContext(ctx, "starting", cfg.logAttrs()...)
	if cfg.RuleChecks != "on" {
		log.WarnContext(ctx, "DEMONSTRATION SETTING: the sale rules are checked by Postgres alone; orders a rule refuses reach the purchase path",
			slog.String("rule_checks", cfg.RuleChecks))
	}
	if cfg.ClockSkew != 0 {
		log.WarnContext(ctx, "DEMONSTRATION SETTING: this replica's clock is skewed on purpose", slog.Duration("clock_skew", cfg.ClockSkew))
	}
	if cfg.defense != stock.DefaultDefense() {
		log.WarnContext(ctx, "UNSAFE DEFENSE SETTING: this replica may oversell; use it only to demonstrate the layers",
			slog.String("defense", cfg.defense.String()))
	}
	logCustomerAuth(ctx, cfg, log)
	lis, err := openListeners(cfg, log)
	if err != nil {
		return err
	}
	// The group's goroutines (listeners, profiler, housekeeping) end with gctx: when ctx
	// ends, when one of them fails, or when start-up gives up (stopGroup).
	groupCtx, stopGroup := context.WithCancel(ctx)
	defer stopGroup()
	g, gctx := errgroup.WithContext(groupCtx)
	lis.serve(g, stockhttp.Starting(log))
	log.InfoContext(ctx, "listening", lis.addrAttrs()...)
	if cfg.DebugAddr != "" {
		g.Go(func() error { return serveDebug(gctx, cfg.DebugAddr) })
	}

	// One registry for the replica: the verifier, made before the dependencies, registers on
	// it too.
	reg := newRegistry()
	customers, closeCustomers, err := customerAuth(gctx, cfg, reg, log)
	if err != nil {
		return startFailed(ctx, stopSignals, lis, g, stopGroup, err, log)
	}
	// The verifier's refresh outlives the requests: closed after shutdown has drained them.
	defer closeCustomers()
	deps, err := openDependencies(gctx, cfg, log)
	if err != nil {
		return startFailed(ctx, stopSignals, lis, g, stopGroup, err, log)
	}
	a, err := wire(ctx, cfg, deps, customers, reg, log)
	if err != nil {
		deps.close()
		return startFailed(ctx, stopSignals, lis, g, stopGroup, err, log)
	}
	// The line's keeper advances the lines this replica serves until shutdown stops it.
	a.lines.Start()
	lis.route(a.api)
	log.InfoContext(ctx, "ready", lis.addrAttrs()...)
	a.runHousekeeping(gctx, g, deps, log)

	<-gctx.Done()
	stopSignals()
	if err := shutdown(ctx, cfg, log, lis, a, deps, g); err != nil {
		return err
	}
	log.InfoContext(context.WithoutCancel(ctx), "stopped")
	return nil
}

// startFailed ends a start-up that failed, or that a stop signal cut short: the listeners
// close and the group's goroutines are joined. A stop signal is a clean end (nothing was
// served, nothing to drain); anything else is err.
func startFailed(ctx context.Context, stopSignals func(), lis *listeners, g *errgroup.Group, stopGroup context.CancelFunc, err error, log *slog.Logger) error {
	lis.close()
	stopGroup()
	serveErr := g.Wait()
	if ctx.Err() != nil {
		stopSignals()
		log.InfoContext(context.WithoutCancel(ctx), "stopped before ready", slog.Any("reason", context.Cause(ctx)))
		return nil
	}
	return errors.Join(err, serveErr)
}

// app is the service wired over its dependencies: what the listeners serve, and what
// shutdown stops.
type app struct {
	metrics *registry // what /metrics serves
	api     *stockhttp.Server
	svc     *stock.Service
	queue   *async.Queue // its workers run when workers is set
	// lines runs the lines; its keeper runs from serve's start to shutdown.
	lines  *line.Service
	locks  *lock.Client
	purger *keyPurger
	// workers says that the queue's workers were started: this replica decides orders
	// accepted for later, and must stop doing so before its connections close.
	workers bool
}

// wire builds the service, the queue of orders accepted for later and the API over deps, with
// their metrics on reg, and starts the queue's workers. On error, what it built is closed
// again (deps are not).
func wire(ctx context.Context, cfg config, deps dependencies, customers stockhttp.CustomerAuth, reg *registry, log *slog.Logger) (*app, error) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store := stockpg.New(deps.pool)
	if cfg.defense != stock.DefaultDefense() {
		// A demonstration mode (STOCKSVC_DEFENSE): its own write, its own locker and views
		// below; the production path never builds them.
		store = stockpg.NewDemo(deps.pool, cfg.defense)
	}
	reg.MustRegister(newDepMetrics(deps.pool, deps.rdb))
	if deps.watch != nil {
		reg.MustRegister(deps.watch)
	}
	lockObs := lockprom.New(reg, "stocksvc")
	a := &app{metrics: reg, locks: lock.New(deps.rdb, lock.WithNamespace(cfg.RedisPrefix), lock.WithObserver(lockObs))}
	var locker stock.Locker = stocklock.NewRedis(a.locks, stocklock.Config{TTL: cfg.LockTTL, Wait: cfg.LockWait, Retry: cfg.retry})
	if deps.nodes != nil {
		var err error
		if locker, err = redlockLocker(cfg, deps.nodes, lockObs); err != nil {
			_ = a.locks.Close()
			return nil, err
		}
	}
	var views stock.Views
	if cfg.CacheLease > 0 {
		views = view.New(deps.rdb, a.locks, store, view.Config{Lease: cfg.CacheLease, TTL: cfg.CacheTTL, RedisTimeout: cfg.CacheRedisWait,
			// Redlock's views live on its first node alone; the sale must outlive that node.
			MarkOptional: deps.nodes != nil}, view.NewMetrics(reg))
	}
	locker, views = demo.Parts(cfg.defense, locker, views)
	a.svc = stock.NewService(store, locker, stock.Config{
		MaxQuantity:    cfg.MaxQuantity,
		QueueWait:      min(cfg.QueueWait, cfg.LockWait),
		MaxBatchOrders: cfg.MaxBatch,
		Views:          views,
		SkipRuleChecks: cfg.RuleChecks == "postgres-only",
		Now:            skewedClock(cfg.ClockSkew),
	}, stock.NewMetrics(reg))
	fail := func(err error) (*app, error) {
		a.svc.Close()
		_ = a.locks.Close()
		return nil, err
	}
	// The line's signing keys are Postgres's (made by the first replica to start): every
	// replica signs and checks tickets and passes with the same.
	lines, err := line.New(ctx, linepg.New(deps.pool), store, a.svc, line.Config{
		MaxQuantity: cfg.MaxQuantity,
		Poll:        cfg.LinePoll,
		MaxWait:     cfg.LineMaxWait,
		Now:         skewedClock(cfg.ClockSkew),
		Logger:      log,
	}, line.NewMetrics(reg))
	if err != nil {
		return fail(err)
	}
	a.lines = lines
	orders, err := asyncpg.New(deps.pool)
	if err != nil {
		return fail(err)
	}
	a.queue = async.New(orders, store, a.svc, async.Config{Workers: cfg.AsyncWorkers, Round: cfg.MaxBatch, Registerer: reg, Logger: log,
		OpenHolds: func(ctx context.Context) (int64, error) { return stockpg.OpenHolds(ctx, deps.pool) }})
	// The holds' expiries are River jobs: the queue, made from the service, schedules them.
	a.svc.UseHoldScheduler(a.queue)
	if cfg.AsyncWorkers > 0 {
		// Not the listeners' context: the workers stop after the HTTP server, in shutdown,
		// and before the service closes, so that a drain in progress finishes its round.
		if err := a.queue.Start(context.WithoutCancel(ctx)); err != nil {
			return fail(err)
		}
		a.workers = true
	}
	a.api = stockhttp.New(stockhttp.Config{
		Service:    a.svc,
		Queue:      a.queue,
		AdminToken: cfg.AdminToken,
		Customers:  customers,
		Lines:      a.lines,
		Limits:     cfg.limits(deps.rdb),
		// Ready asks Postgres only. A replica without Redis still serves product reads (from
		// Postgres, a few at a time) and answers orders 503 itself; taking every replica out
		// of the balancer when the one Redis they share fails would turn that into 503 for
		// everything.
		Ready: func(ctx context.Context) error {
			if err := deps.pool.Ping(ctx); err != nil {
				return fmt.Errorf("postgres: %w", err)
			}
			return nil
		},
		Logger:         log,
		Registerer:     reg,
		Gatherer:       reg,
		RequestTimeout: cfg.RequestTimeout,
	})
	a.purger = newKeyPurger(purgeBoth(a.svc.PurgeIdempotencyKeys, a.queue.PurgeRecords), cfg.IdempotencyTTL, reg, log)
	return a, nil
}

// runHousekeeping starts, in g, what runs beside the API until ctx ends: the purge of old
// idempotency keys, the watch over the Redis key spaces and the lock space, and, when Redis
// did not answer at start, the watch that says when it does.
func (a *app) runHousekeeping(ctx context.Context, g *errgroup.Group, deps dependencies, log *slog.Logger) {
	g.Go(func() error {
		a.purger.run(ctx)
		return nil
	})
	g.Go(func() error {
		deps.watch.Run(ctx)
		return nil
	})
	if deps.redisDown {
		g.Go(func() error {
			watchRedis(ctx, deps.checkRedis, log)
			return nil
		})
	}
}

// dependencies are the connections the API runs on.
type dependencies struct {
	pool  *pgxpool.Pool
	rdb   redis.UniversalClient
	nodes []*redis.Client // the Redlock's nodes in redlock mode, else nil
	// watch keeps the key spaces of rdb and nodes this database's, and records the replica's
	// lock space (keyspace.go).
	watch *keyspace.Watch
	// redisDown says that Redis (in redlock mode, a quorum of its nodes) did not answer when
	// the replica started.
	redisDown bool
}

func (d dependencies) close() {
	for _, n := range d.nodes {
		_ = n.Close()
	}
	_ = d.rdb.Close()
	d.pool.Close()
}

// openDependencies waits until the service's own database answers (creating it on the way if
// need be, so that replicas started together with Postgres do not give up on the first
// refusal), migrates it and opens the pools, all within STOCKSVC_STARTUP_TIMEOUT.
//
// Redis is asked once, not waited for: a replica runs without it — product reads from
// Postgres, orders and restocks answered 503 — as it does when Redis goes down later, and
// readiness asks Postgres only. Starting without it is logged as a warning; only an answer
// that waiting cannot fix (credentials refused, say, or a key space that holds another
// database's data) ends start-up. When Redis answers, the replica also waits until no running
// replica of its database takes its locks in another lock space (keyspace.go), and gives up
// at the start-up timeout.
func openDependencies(ctx context.Context, cfg config, log *slog.Logger) (dependencies, error) {
	sctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
	defer cancel()
	if err := waitFor(sctx, "postgres", cfg.StartupTimeout, func(ctx context.Context) error {
		return prepareDatabase(ctx, cfg.DatabaseURL, log)
	}, log); err != nil {
		return dependencies{}, err
	}
	if err := migrateOnStart(sctx, cfg.DatabaseURL, log); err != nil {
		if ctx.Err() == nil && sctx.Err() != nil {
			return dependencies{}, fmt.Errorf("migrations not done within the start-up timeout (%v): %w", cfg.StartupTimeout, err)
		}
		return dependencies{}, err
	}
	pool, err := newPool(sctx, cfg.DatabaseURL, cfg.DBMaxConns)
	if err != nil {
		return dependencies{}, err
	}
	if err := waitFor(sctx, "postgres", cfg.StartupTimeout, pool.Ping, log); err != nil {
		pool.Close()
		return dependencies{}, err
	}
	replicas := stockpg.NewReplicas(pool)
	owner, err := replicas.Owner(sctx)
	if err != nil {
		pool.Close()
		return dependencies{}, err
	}
	d := dependencies{pool: pool}
	if d.rdb, d.nodes, d.watch, err = redisClients(cfg, owner, replicas, log); err != nil {
		pool.Close()
		return dependencies{}, err
	}
	pctx, pcancel := context.WithTimeout(sctx, redisStartPing)
	err = d.checkRedis(pctx)
	pcancel()
	switch {
	case err == nil:
	case isPermanent(err):
		d.close()
		return dependencies{}, fmt.Errorf("redis: %w (not retried: waiting cannot fix this)", err)
	case ctx.Err() != nil:
		d.close()
		return dependencies{}, ctx.Err()
	default:
		d.redisDown = true
		log.WarnContext(ctx, "starting without redis: orders and restocks answer 503 until it answers, product reads come from postgres",
			slog.String("redis_mode", cfg.RedisMode), slog.Any("error", err))
		return d, nil
	}
	if err := d.settleLockSpace(sctx); err != nil {
		d.close()
		if ctx.Err() != nil {
			return dependencies{}, ctx.Err()
		}
		return dependencies{}, err
	}
	return d, nil
}

// redisStartPing bounds the one question start-up asks Redis.
const redisStartPing = 2 * time.Second

// watchRedis asks Redis, after a replica started without it, whether it answers now, until it
// does or ctx ends, and logs the answer: when it came, and any change of cause on the way
// (one that waiting cannot fix as an error). Nothing waits for it: the service uses Redis as
// soon as it answers.
func watchRedis(ctx context.Context, ping func(context.Context) error, log *slog.Logger) {
	warned := ""
	for attempt := 1; clock.Sleep(ctx, startupPause(attempt)) == nil; attempt++ {
		pctx, cancel := context.WithTimeout(ctx, redisStartPing)
		err := ping(pctx)
		cancel()
		switch {
		case err == nil:
			log.InfoContext(ctx, "dependency answered", slog.String("dependency", "redis"), slog.Int("attempts", attempt+1))
			return
		case ctx.Err() != nil:
			return
		case err.Error() == warned:
		case isPermanent(err):
			log.ErrorContext(ctx, "redis refuses this replica; orders keep answering 503", slog.Any("error", err))
		default:
			log.WarnContext(ctx, "waiting for dependency", slog.String("dependency", "redis"), slog.Int("attempt", attempt+1), slog.Any("error", err))
		}
		warned = err.Error()
	}
}

// endpoint is one listener and the server on it.
type endpoint struct {
	ln      net.Listener
	srv     *http.Server
	handler handlerSwitch
}

// listeners are the replica's public listener and, with STOCKSVC_ADMIN_ADDR, its admin one.
type listeners struct {
	public *endpoint
	admin  *endpoint // nil: the admin routes and /metrics are on the public listener
}

// openListeners listens on the public address and, if set, the admin one.
func openListeners(cfg config, log *slog.Logger) (*listeners, error) {
	public, err := listen(cfg.Addr, cfg, log)
	if err != nil {
		return nil, err
	}
	l := &listeners{public: public}
	if cfg.AdminAddr != "" {
		if l.admin, err = listen(cfg.AdminAddr, cfg, log); err != nil {
			_ = public.ln.Close()
			return nil, err
		}
	}
	return l, nil
}

func (l *listeners) all() []*endpoint {
	if l.admin == nil {
		return []*endpoint{l.public}
	}
	return []*endpoint{l.public, l.admin}
}

// serve starts serving h on every listener, in g.
func (l *listeners) serve(g *errgroup.Group, h http.Handler) {
	for _, e := range l.all() {
		e.handler.set(h)
		g.Go(e.serve)
	}
}

// route switches the listeners from the start-up answers to the API: the whole of it on the
// admin listener, the public part on the public one; everything on the public one when there
// is no admin listener, /metrics there behind the admin token as the admin routes are.
func (l *listeners) route(api *stockhttp.Server) {
	if l.admin != nil {
		l.public.handler.set(api.Public())
		l.admin.handler.set(api.Admin())
		return
	}
	l.public.handler.set(api)
}

// close closes the listeners and every connection at once.
func (l *listeners) close() {
	for _, e := range l.all() {
		_ = e.srv.Close()
	}
}

// shutdown closes the listeners and waits, until ctx ends, for the requests in flight on both:
// one deadline for the replica, not one per listener.
func (l *listeners) shutdown(ctx context.Context) error {
	var errs []error
	for _, e := range l.all() {
		if err := e.srv.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", e.ln.Addr(), err))
		}
	}
	return errors.Join(errs...)
}

// addrAttrs names the addresses listened on, for the log.
func (l *listeners) addrAttrs() []any {
	attrs := []any{slog.String("addr", l.public.ln.Addr().String())}
	if l.admin != nil {
		attrs = append(attrs, slog.String("admin_addr", l.admin.ln.Addr().String()))
	}
	return attrs
}

// listen opens addr and prepares a server on it; serve starts serving.
func listen(addr string, cfg config, log *slog.Logger) (*endpoint, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	e := &endpoint{ln: ln}
	e.srv = &http.Server{
		Handler:           &e.handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      cfg.RequestTimeout + 5*time.Second,
		IdleTimeout:       60 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}
	return e, nil
}

func (e *endpoint) serve() error {
	if err := e.srv.Serve(e.ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve %s: %w", e.ln.Addr(), err)
	}
	return nil
}

// handlerSwitch serves whichever handler was set last: the start-up answers, then the API.
type handlerSwitch struct {
	current atomic.Pointer[http.Handler]
}

func (h *handlerSwitch) set(next http.Handler) { h.current.Store(&next) }

func (h *handlerSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*h.current.Load()).ServeHTTP(w, r)
}

// skewedClock is time.Now moved by skew (STOCKSVC_CLOCK_SKEW), or nil — the Service's default —
// for none.
func skewedClock(skew time.Duration) func() time.Time {
	if skew == 0 {
		return nil
	}
	return func() time.Time { return time.Now().Add(skew) }
}
