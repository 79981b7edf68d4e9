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

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/stocksvc/stocksvc/internal/async"
	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/lock/lockprom"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/view"
)

// serve runs the API until ctx ends, then drains and shuts down in order.
//
// It listens before its dependencies answer: while it waits for Postgres and Redis and
// migrates, /healthz says the process is alive and everything else, /readyz included, says
// 503 (stockhttp.Starting). An orchestrator then neither restarts a replica that is only
// waiting for its database nor routes orders to it.
func serve(ctx context.Context, stopSignals func(), cfg config, log *slog.Logger) error {
	log.InfoContext(ctx, "starting", cfg.logAttrs()...)
	if cfg.defense != stock.DefaultDefense() {
		log.WarnContext(ctx, "UNSAFE DEFENSE SETTING: this replica may oversell; use it only to demonstrate the layers",
			slog.String("defense", cfg.defense.String()))
	}

	public, err := listen(cfg.Addr, cfg, log)
	if err != nil {
		return err
	}
	endpoints := []*endpoint{public}
	var admin *endpoint // nil: the admin routes and /metrics are on the public listener
	if cfg.AdminAddr != "" {
		if admin, err = listen(cfg.AdminAddr, cfg, log); err != nil {
			_ = public.ln.Close()
			return err
		}
		endpoints = append(endpoints, admin)
	}
	g, gctx := errgroup.WithContext(ctx)
	for _, e := range endpoints {
		e.handler.set(stockhttp.Starting(log))
		g.Go(e.serve)
	}
	log.InfoContext(ctx, "listening", public.addrAttrs(admin)...)
	if cfg.DebugAddr != "" {
		g.Go(func() error { return serveDebug(gctx, cfg.DebugAddr) })
	}

	deps, err := openDependencies(gctx, cfg, log)
	if err != nil {
		for _, e := range endpoints {
			_ = e.srv.Close()
		}
		serveErr := g.Wait()
		if ctx.Err() != nil {
			// Asked to stop before it was ready: nothing was served, nothing to drain.
			stopSignals()
			log.InfoContext(context.WithoutCancel(ctx), "stopped before ready", slog.Any("reason", context.Cause(ctx)))
			return nil
		}
		return errors.Join(err, serveErr)
	}
	defer deps.close()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	store := stock.NewPGStore(deps.pool)
	lockObs := lockprom.New(reg, "stocksvc")
	locks := lock.New(deps.rdb, lock.WithNamespace(cfg.RedisPrefix), lock.WithObserver(lockObs))
	defer locks.Close()
	var locker stock.Locker = stock.NewRedisLocker(locks, stock.LockConfig{TTL: cfg.LockTTL, Wait: cfg.LockWait, Retry: cfg.retry})
	if deps.nodes != nil {
		if locker, err = redlockLocker(cfg, deps.nodes, lockObs); err != nil {
			for _, e := range endpoints {
				_ = e.srv.Close()
			}
			return errors.Join(err, g.Wait())
		}
	}
	var views stock.Views
	if cfg.CacheLease > 0 {
		views = view.New(deps.rdb, locks, store.Product, view.Config{Lease: cfg.CacheLease, TTL: cfg.CacheTTL}, view.NewMetrics(reg))
	}
	svc := stock.NewService(store, locker, stock.Config{
		Defense:        cfg.defense,
		MaxQuantity:    cfg.MaxQuantity,
		QueueWait:      min(cfg.QueueWait, cfg.LockWait),
		MaxBatchOrders: cfg.MaxBatch,
		Views:          views,
	}, stock.NewMetrics(reg))
	// After the HTTP server has shut down no order can arrive; Close returns once the queued
	// ones are decided (their handlers have already been answered by then).
	defer svc.Close()
	queue, err := async.New(deps.pool, svc, async.Config{Workers: cfg.AsyncWorkers, Round: cfg.MaxBatch, Registerer: reg, Logger: log})
	if err != nil {
		return err
	}
	if cfg.AsyncWorkers > 0 {
		// Not gctx: the workers stop after the HTTP server (below, deferred), not with it, and
		// before svc.Close, so that a drain in progress finishes its round.
		if err := queue.Start(context.WithoutCancel(ctx)); err != nil {
			return err
		}
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
			defer cancel()
			if err := queue.Stop(sctx); err != nil {
				log.WarnContext(sctx, "async queue did not stop cleanly", slog.Any("error", err))
			}
		}()
	}
	api := stockhttp.New(stockhttp.Config{
		Service:    svc,
		Queue:      queue,
		AdminToken: cfg.AdminToken,
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
	if admin != nil {
		public.handler.set(api.Public())
		admin.handler.set(api)
	} else {
		public.handler.set(api)
	}
	log.InfoContext(ctx, "ready", public.addrAttrs(admin)...)

	purger := newKeyPurger(svc.PurgeIdempotencyKeys, cfg.IdempotencyTTL, reg, log)
	g.Go(func() error {
		purger.run(gctx)
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		stopSignals()
		log.InfoContext(ctx, "shutting down", slog.String("delay", cfg.ShutdownDelay.String()), slog.String("grace", cfg.ShutdownGrace.String()))
		api.StartDraining()
		time.Sleep(cfg.ShutdownDelay) // let the balancer see /readyz fail before we stop listening
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
		defer cancel()
		// One deadline for both listeners: the grace is for the replica, not per listener.
		for _, e := range endpoints {
			if err := e.srv.Shutdown(sctx); err != nil {
				return fmt.Errorf("shutdown %s: in-flight requests did not finish within %v: %w", e.ln.Addr(), cfg.ShutdownGrace, err)
			}
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	log.InfoContext(context.WithoutCancel(ctx), "stopped")
	return nil
}

// dependencies are the connections the API runs on.
type dependencies struct {
	pool  *pgxpool.Pool
	rdb   redis.UniversalClient
	nodes []*redis.Client // the Redlock's nodes in redlock mode, else nil
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
// refusal), migrates it, and opens the pools once Postgres and Redis both answer.
func openDependencies(ctx context.Context, cfg config, log *slog.Logger) (dependencies, error) {
	if err := waitFor(ctx, "postgres", cfg.StartupTimeout, func(ctx context.Context) error {
		return prepareDatabase(ctx, cfg.DatabaseURL, log)
	}, log); err != nil {
		return dependencies{}, err
	}
	// The migrations honour the stop signal, and the start-up deadline.
	mctx, cancel := context.WithTimeout(ctx, cfg.StartupTimeout)
	defer cancel()
	if err := migrateOnStart(mctx, cfg.DatabaseURL, log); err != nil {
		if ctx.Err() == nil && mctx.Err() != nil {
			return dependencies{}, fmt.Errorf("migrations not done within the start-up timeout (%v): %w", cfg.StartupTimeout, err)
		}
		return dependencies{}, err
	}
	pool, err := newPool(ctx, cfg.DatabaseURL, cfg.DBMaxConns)
	if err != nil {
		return dependencies{}, err
	}
	rdb, err := newRedis(cfg.RedisURL, cfg.RedisMode)
	if err != nil {
		pool.Close()
		return dependencies{}, err
	}
	d := dependencies{pool: pool, rdb: rdb}
	if d.nodes, err = redlockNodes(cfg.RedisURL, cfg.RedisMode); err != nil {
		d.close()
		return dependencies{}, err
	}
	if err := waitFor(ctx, "postgres", cfg.StartupTimeout, pool.Ping, log); err != nil {
		d.close()
		return dependencies{}, err
	}
	pingRedis := func(ctx context.Context) error { return rdb.Ping(ctx).Err() }
	if d.nodes != nil {
		pingRedis = func(ctx context.Context) error { return pingQuorum(ctx, d.nodes) }
	}
	if err := waitFor(ctx, "redis", cfg.StartupTimeout, pingRedis, log); err != nil {
		d.close()
		return dependencies{}, err
	}
	return d, nil
}

// endpoint is one listener and the server on it.
type endpoint struct {
	ln      net.Listener
	srv     *http.Server
	handler handlerSwitch
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

// addrAttrs names the addresses listened on, for the log.
func (e *endpoint) addrAttrs(admin *endpoint) []any {
	attrs := []any{slog.String("addr", e.ln.Addr().String())}
	if admin != nil {
		attrs = append(attrs, slog.String("admin_addr", admin.ln.Addr().String()))
	}
	return attrs
}

// handlerSwitch serves whichever handler was set last: the start-up answers, then the API.
type handlerSwitch struct {
	current atomic.Pointer[http.Handler]
}

func (h *handlerSwitch) set(next http.Handler) { h.current.Store(&next) }

func (h *handlerSwitch) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*h.current.Load()).ServeHTTP(w, r)
}
