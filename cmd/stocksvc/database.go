package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
)

// errCannotCreate says that the server answered but the database could not be created, or
// its existence not even checked. That is no failure by itself — someone with the privilege may
// have made the database — but it becomes one if the database turns out to be missing.
var errCannotCreate = errors.New("stocksvc cannot create it")

// ensureDatabase creates the database DATABASE_URL names if it does not exist, connecting to
// the server's "postgres" database to do so. Losing a creation race to another replica is not
// an error. It returns errCannotCreate (wrapped, with the reason) when the server refuses the
// check or the creation, and other errors, such as a refused connection, as they come.
func ensureDatabase(ctx context.Context, databaseURL string, log *slog.Logger) error {
	cfg, err := pgx.ParseConfig(databaseURL)
	if err != nil {
		return fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	name := cfg.Database
	if name == "" || name == "postgres" {
		return nil
	}
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		if errors.As(err, new(*pgconn.PgError)) {
			// The server answered but will not let us into its "postgres" database; perhaps
			// only the target database accepts us.
			return fmt.Errorf("%w: connect to the postgres database: %w", errCannotCreate, err)
		}
		return fmt.Errorf("connect to postgres: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %s: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		log.InfoContext(ctx, "database created", slog.String("database", name))
	case errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505"):
		// Another replica created it first.
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		return fmt.Errorf("%w: %w", errCannotCreate, err)
	default:
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// prepareDatabase makes sure the service's database exists (creating it if it may) and
// answers. A database that is missing and cannot be created is a permanent failure.
func prepareDatabase(ctx context.Context, databaseURL string, log *slog.Logger) error {
	createErr := ensureDatabase(ctx, databaseURL, log)
	if createErr != nil && !errors.Is(createErr, errCannotCreate) {
		return createErr
	}
	err := pingDatabase(ctx, databaseURL)
	if createErr != nil && pgCode(err) == "3D000" { // invalid_catalog_name
		return permanent(fmt.Errorf("the database does not exist, and %w", createErr))
	}
	return err
}

// pgCode is the SQLSTATE of the Postgres error in err's chain, or "".
func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// pingDatabase connects to the database once and hangs up.
func pingDatabase(ctx context.Context, databaseURL string) error {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return fmt.Errorf("connect to postgres: %w", err)
	}
	return conn.Close(ctx)
}

// newPool connects to Postgres. Server-side timeouts make sure a stalled client (a paused
// replica, a lost connection) cannot hold a product row lock for long.
func newPool(ctx context.Context, databaseURL string, maxConns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse DATABASE_URL: %w", err)
	}
	cfg.MaxConns = int32(maxConns)
	failFast(&cfg.ConnConfig.Config)
	// Notes a commit whose wait for a synchronous standby Postgres ended early (stockpg).
	cfg.ConnConfig.OnNotice = stockpg.OnNotice
	for param, value := range map[string]string{
		"application_name":                    "stocksvc",
		"lock_timeout":                        "5s",
		"statement_timeout":                   "10s",
		"idle_in_transaction_session_timeout": "15s",
	} {
		if _, set := cfg.ConnConfig.RuntimeParams[param]; !set {
			cfg.ConnConfig.RuntimeParams[param] = value
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("create postgres pool: %w", err)
	}
	return pool, nil
}

// Connection settings for a database that may fail over (docs/operations.md, "Running on an HA
// Postgres"). A connection attempt gives up on a host after pgConnectTimeout unless the URL's
// connect_timeout says otherwise, so that a multi-host URL moves on from a primary that is gone
// to the next host; and an open connection to a machine that vanished is dropped within about
// pgUserTimeout — the kernel's own defaults would keep it for minutes, with a request (and the
// product's lock) waiting on it.
const (
	pgConnectTimeout = 3 * time.Second
	// pgUserTimeout bounds how long data written to Postgres may go unacknowledged
	// (TCP_USER_TIMEOUT) and, with the keepalives, how long a silent connection lives.
	pgUserTimeout    = 10 * time.Second
	pgKeepAliveIdle  = 5 * time.Second
	pgKeepAliveEvery = 2 * time.Second
	pgKeepAliveCount = 3
)

// failFast gives cfg the dialer and the connection timeout above.
func failFast(cfg *pgconn.Config) {
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = pgConnectTimeout
	}
	d := &net.Dialer{
		Timeout:         cfg.ConnectTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: pgKeepAliveIdle, Interval: pgKeepAliveEvery, Count: pgKeepAliveCount},
		Control:         setUserTimeout,
	}
	cfg.DialFunc = d.DialContext
}

// redisOptions holds the options of one of the topologies.
type redisOptions struct {
	single   *redis.Options
	failover *redis.FailoverOptions
	cluster  *redis.ClusterOptions
	// nodes are a Redlock's independent nodes; single is then the first of them, for what
	// stays on one node (see redlockOptions).
	nodes []*redis.Options
}

// client returns the client for the topology (single, sentinel or cluster; in redlock mode, the
// first node's). Every client bounds its commands by their contexts, so a lock's wait budget
// holds even when Redis hangs.
func (o redisOptions) client() redis.UniversalClient {
	switch {
	case o.failover != nil:
		return redis.NewFailoverClient(o.failover)
	case o.cluster != nil:
		return redis.NewClusterClient(o.cluster)
	default:
		return redis.NewClient(o.single)
	}
}

// parseRedisURL reads REDIS_URL for mode. Nothing is dialled.
//
// A refused dial is not retried within a command unless REDIS_URL asks for it with
// dialer_retries (sentinel and cluster URLs accept it): go-redis already retries a failed
// command (max_retries, 3 by default, with backoff), and its default of 5 dials per attempt on
// top of that kept an order waiting for a Redis that was down for over 3 s, past its lock wait
// budget, before it could answer 503.
func parseRedisURL(redisURL, mode string) (redisOptions, error) {
	u, err := url.Parse(redisURL)
	ownDialRetries := err != nil || !u.Query().Has("dialer_retries")
	switch mode {
	case "sentinel":
		opts, err := redis.ParseFailoverURL(redisURL)
		if err != nil {
			return redisOptions{}, fmt.Errorf("parse REDIS_URL for sentinel: %w", err)
		}
		if opts.MasterName == "" {
			return redisOptions{}, errors.New("parse REDIS_URL for sentinel: no ?master_name=")
		}
		tune(&opts.ContextTimeoutEnabled, &opts.DialerRetries, ownDialRetries)
		return redisOptions{failover: opts}, nil
	case "redlock":
		return redlockOptions(redisURL, ownDialRetries)
	case "cluster":
		opts, err := redis.ParseClusterURL(redisURL)
		if err != nil {
			return redisOptions{}, fmt.Errorf("parse REDIS_URL for cluster: %w", err)
		}
		tune(&opts.ContextTimeoutEnabled, &opts.DialerRetries, ownDialRetries)
		return redisOptions{cluster: opts}, nil
	default:
		opts, err := redis.ParseURL(redisURL)
		if err != nil {
			return redisOptions{}, fmt.Errorf("parse REDIS_URL: %w", err)
		}
		tune(&opts.ContextTimeoutEnabled, &opts.DialerRetries, ownDialRetries)
		return redisOptions{single: opts}, nil
	}
}

// tune applies the service's settings to one topology's client options: commands bounded by
// their contexts, and one dial per command attempt unless the URL chose otherwise.
func tune(contextTimeout *bool, dialerRetries *int, ownDialRetries bool) {
	*contextTimeout = true
	if ownDialRetries {
		*dialerRetries = 1
	}
}

// redisLogger sends go-redis's own messages (failed dials, dropped pub/sub connections) to the
// service's log instead of the standard logger's plain text on stderr. They come in bursts
// while Redis is down, one per failed dial, and say nothing that readiness and the failed
// requests do not already log, so they go out at debug level.
type redisLogger struct{ log *slog.Logger }

func (l redisLogger) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client", slog.String("message", fmt.Sprintf(format, v...)))
}
