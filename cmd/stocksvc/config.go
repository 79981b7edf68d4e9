package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// config is everything stocksvc reads from its environment and flags. Each field has a flag,
// an environment variable and a default; a flag wins over the variable.
type config struct {
	Addr           string
	AdminAddr      string
	DatabaseURL    string
	RedisURL       string
	RedisMode      string
	RedisPrefix    string
	AdminToken     string
	DBMaxConns     int
	LockTTL        time.Duration
	LockWait       time.Duration
	QueueWait      time.Duration
	LockRetry      string
	LockMaxRetries int
	MaxQuantity    int64
	MaxBatch       int
	AsyncWorkers   int
	CacheLease     time.Duration
	CacheTTL       time.Duration
	CacheRedisWait time.Duration
	LinePoll       time.Duration
	LineMaxWait    time.Duration
	RequestTimeout time.Duration
	ShutdownGrace  time.Duration
	ShutdownDelay  time.Duration
	StartupTimeout time.Duration
	IdempotencyTTL time.Duration
	Defense        string
	DemoUnsafe     bool
	RuleChecks     string
	ClockSkew      time.Duration
	LogFormat      string
	LogLevel       string
	DebugAddr      string
	CustomerAuth   string
	JWKSFile       string
	JWKSURL        string
	JWKSRefresh    time.Duration
	JWTIssuer      string
	JWTAudience    string
	JWTLeeway      time.Duration
	CustomerHeader string
	limitConfig    // rate limits, trusted proxies, plain-http JWKS: config_limits.go

	defense stock.Defense
	mode    identity.Mode // CustomerAuth, parsed
	retry   lock.RetryStrategy
	gogc    string // the runtime's GOGC, read by the runtime itself; see tuneGC
}

// setting describes one configuration entry, for flags, the environment and the docs.
type setting struct {
	env, flag, def, usage string
	set                   func(c *config, v string) error
	// secret settings can also be read from the file that the variable env+"_FILE" names.
	secret bool
}

func settings() []setting {
	str := func(f func(c *config) *string) func(*config, string) error {
		return func(c *config, v string) error { *f(c) = v; return nil }
	}
	dur := func(f func(c *config) *time.Duration) func(*config, string) error {
		return func(c *config, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				return fmt.Errorf("want a non-negative duration such as 2s or 150ms, got %q", v)
			}
			*f(c) = d
			return nil
		}
	}
	integer := func(f func(c *config, n int64)) func(*config, string) error {
		return func(c *config, v string) error {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("want an integer, got %q", v)
			}
			f(c, n)
			return nil
		}
	}
	all := []setting{
		{"STOCKSVC_ADDR", "addr", ":8080", "address to listen on", str(func(c *config) *string { return &c.Addr }), false},
		{"STOCKSVC_ADMIN_ADDR", "admin-addr", "", "address of a separate listener for the admin routes and /metrics, which STOCKSVC_ADDR then leaves out; empty serves them on STOCKSVC_ADDR", str(func(c *config) *string { return &c.AdminAddr }), false},
		{"DATABASE_URL", "database-url", "postgres://postgres@localhost:5432/stocksvc?sslmode=disable", "Postgres URL or key=value settings; the database is created if missing and permitted", str(func(c *config) *string { return &c.DatabaseURL }), true},
		{"REDIS_URL", "redis-url", "redis://localhost:6379/0", "Redis URL; for sentinel, cluster and redlock, more nodes as ?addr=host:port&addr=... and the sentinel master as ?master_name=", str(func(c *config) *string { return &c.RedisURL }), true},
		{"STOCKSVC_REDIS_MODE", "redis-mode", "single", "Redis topology: single, sentinel, cluster, or redlock (product locks on a quorum of independent nodes)", str(func(c *config) *string { return &c.RedisMode }), false},
		{"STOCKSVC_REDIS_PREFIX", "redis-prefix", "stocksvc:", "prefix of every Redis key the service writes: one per deployment (the keys under it are bound to one database), the same for all its replicas", str(func(c *config) *string { return &c.RedisPrefix }), false},
		{"STOCKSVC_ADMIN_TOKEN", "admin-token", "", "bearer token for the admin routes; empty disables them", str(func(c *config) *string { return &c.AdminToken }), true},
		{"STOCKSVC_DB_MAX_CONNS", "db-max-conns", "20", "Postgres connection pool size", integer(func(c *config, n int64) { c.DBMaxConns = int(n) }), false},
		{"STOCKSVC_LOCK_TTL", "lock-ttl", "10s", "lease of a product lock; refreshed every third of it while held", dur(func(c *config) *time.Duration { return &c.LockTTL }), false},
		{"STOCKSVC_LOCK_WAIT", "lock-wait", "2s", "longest an order waits for its product locks before answering 429", dur(func(c *config) *time.Duration { return &c.LockWait }), false},
		{"STOCKSVC_QUEUE_WAIT", "queue-wait", "500ms", "longest an order may expect to wait in its product's queue before its batch begins; one that would wait longer is answered 429 at once; capped at STOCKSVC_LOCK_WAIT", dur(func(c *config) *time.Duration { return &c.QueueWait }), false},
		{"STOCKSVC_LOCK_RETRY", "lock-retry", "wait", "how lock waits are paced: wait (queue, woken by releases) or, polling, exponential[:BASE:MAX], linear[:STEP:MAX], fixed:PAUSE, none", str(func(c *config) *string { return &c.LockRetry }), false},
		{"STOCKSVC_LOCK_MAX_RETRIES", "lock-max-retries", "0", "cap on polling lock attempts after the first; 0 means only the wait bounds them", integer(func(c *config, n int64) { c.LockMaxRetries = int(n) }), false},
		{"STOCKSVC_MAX_QUANTITY", "max-quantity", "10", "most units of one product per order", integer(func(c *config, n int64) { c.MaxQuantity = n }), false},
		{"STOCKSVC_MAX_BATCH", "max-batch", "256", "most orders of one product decided together (one lock, one read, one write); 1 decides each order alone", integer(func(c *config, n int64) { c.MaxBatch = int(n) }), false},
		{"STOCKSVC_ASYNC_WORKERS", "async-workers", "4", "how many products' lines of orders sent with Prefer: respond-async this replica drains at once, each holding a Postgres connection for its line's lock (at most half of STOCKSVC_DB_MAX_CONNS); 0 leaves deciding them to the other replicas (this one still accepts them)", integer(func(c *config, n int64) { c.AsyncWorkers = int(n) }), false},
		{"STOCKSVC_CACHE_LEASE", "cache-lease", "50ms", "how long a replica answers product reads, and refuses orders for a sold-out product, from a view without asking Redis again, and remembers that a product does not exist; every restock and product creation waits it out; 0 turns the view cache off", dur(func(c *config) *time.Duration { return &c.CacheLease }), false},
		{"STOCKSVC_CACHE_TTL", "cache-ttl", "5s", "how long a product's view lives in Redis without an update: the bound on a view whose update was lost", dur(func(c *config) *time.Duration { return &c.CacheTTL }), false},
		{"STOCKSVC_CACHE_REDIS_WAIT", "cache-redis-wait", "500ms", "how long a product read waits for each Redis command before it reads Postgres instead: what a read costs while Redis hangs", dur(func(c *config) *time.Duration { return &c.CacheRedisWait }), false},
		{"STOCKSVC_LINE_POLL", "line-poll", "250ms", "how often each replica reads the versions of the lines it serves and checks whether one needs an advance no announcement asked for: the bound on how late a lost announcement (a failover, a dropped connection) leaves a ticket's status", dur(func(c *config) *time.Duration { return &c.LinePoll }), false},
		{"STOCKSVC_LINE_MAX_WAIT", "line-max-wait", "30s", "the longest a ticket's long-poll (Prefer: wait) waits for a change, at most 1m; it comes on top of STOCKSVC_REQUEST_TIMEOUT", dur(func(c *config) *time.Duration { return &c.LineMaxWait }), false},
		{"STOCKSVC_REQUEST_TIMEOUT", "request-timeout", "10s", "bound on each API request", dur(func(c *config) *time.Duration { return &c.RequestTimeout }), false},
		{"STOCKSVC_SHUTDOWN_GRACE", "shutdown-grace", "15s", "the whole shutdown after SIGTERM: the shutdown delay, requests in flight, the async workers, queued orders and closing connections, under one deadline; keep it below the orchestrator's grace period (Compose: 20s)", dur(func(c *config) *time.Duration { return &c.ShutdownGrace }), false},
		{"STOCKSVC_SHUTDOWN_DELAY", "shutdown-delay", "2s", "how long /readyz answers 503 before the listener closes, so a balancer can notice; part of STOCKSVC_SHUTDOWN_GRACE, and shorter than it", dur(func(c *config) *time.Duration { return &c.ShutdownDelay }), false},
		{"STOCKSVC_STARTUP_TIMEOUT", "startup-timeout", "30s", "how long start-up may take to reach Postgres, migrate and, when Redis answers, find the running replicas of the database in this one's lock space before giving up (Redis is not waited for)", dur(func(c *config) *time.Duration { return &c.StartupTimeout }), false},
		{"STOCKSVC_IDEMPOTENCY_TTL", "idempotency-ttl", "24h", "how long idempotency keys are kept (at least)", dur(func(c *config) *time.Duration { return &c.IdempotencyTTL }), false},
		{"STOCKSVC_DEFENSE", "defense", "lock,version,guard", "defense layers; anything else needs STOCKSVC_DEMO_UNSAFE=1", str(func(c *config) *string { return &c.Defense }), false},
		{"STOCKSVC_DEMO_UNSAFE", "demo-unsafe", "", "set to 1 to allow a non-default STOCKSVC_DEFENSE (demonstrations only)", func(c *config, v string) error {
			c.DemoUnsafe = v == "1" || strings.EqualFold(v, "true")
			return nil
		}, false},
		{"STOCKSVC_RULE_CHECKS", "rule-checks", "on", "where the sale rules (window, limit per customer) are checked: on (this replica refuses at once and in each batch, Postgres behind it) or postgres-only (Postgres alone; needs STOCKSVC_DEMO_UNSAFE=1, demonstrations only)", str(func(c *config) *string { return &c.RuleChecks }), false},
		{"STOCKSVC_CLOCK_SKEW", "clock-skew", "0s", "drills only (needs STOCKSVC_DEMO_UNSAFE=1): run this replica's clock this far ahead (negative: behind), to show that Postgres's clock decides when a sale opens", dur(func(c *config) *time.Duration { return &c.ClockSkew }), false},
		{"STOCKSVC_LOG_FORMAT", "log-format", "json", "log format: json or text", str(func(c *config) *string { return &c.LogFormat }), false},
		{"STOCKSVC_LOG_LEVEL", "log-level", "info", "log level: debug, info, warn or error", str(func(c *config) *string { return &c.LogLevel }), false},
		{"STOCKSVC_DEBUG_ADDR", "debug-addr", "", "address of the Go profiler (net/http/pprof), on loopback only, e.g. 127.0.0.1:6060; empty turns it off", str(func(c *config) *string { return &c.DebugAddr }), false},
		{"STOCKSVC_CUSTOMER_AUTH", "customer-auth", "token", "who the customer of an order is: token (the sub of a verified Authorization: Bearer JWT), gateway (a header a trusted gateway sets: STOCKSVC_CUSTOMER_HEADER) or body (the body's customer_id, unverified: demonstrations and tests only)", str(func(c *config) *string { return &c.CustomerAuth }), false},
		{"STOCKSVC_JWKS_FILE", "jwks-file", "", "token mode: the JWKS file of the keys that sign customer tokens; read again when it changes (rename a new file over it); this or STOCKSVC_JWKS_URL", str(func(c *config) *string { return &c.JWKSFile }), false},
		{"STOCKSVC_JWKS_URL", "jwks-url", "", "token mode: the http(s) URL of the JWKS of the keys that sign customer tokens, fetched at start and every STOCKSVC_JWKS_REFRESH; this or STOCKSVC_JWKS_FILE", str(func(c *config) *string { return &c.JWKSURL }), false},
		{"STOCKSVC_JWKS_REFRESH", "jwks-refresh", "5m", "token mode: how often STOCKSVC_JWKS_URL is fetched again (a token signed by a key not yet seen fetches it at once, at most once a second)", dur(func(c *config) *time.Duration { return &c.JWKSRefresh }), false},
		{"STOCKSVC_JWT_ISSUER", "jwt-issuer", "", "token mode: the iss every customer token must carry (required)", str(func(c *config) *string { return &c.JWTIssuer }), false},
		{"STOCKSVC_JWT_AUDIENCE", "jwt-audience", "", "token mode: the audience that must be among every customer token's aud (required)", str(func(c *config) *string { return &c.JWTAudience }), false},
		{"STOCKSVC_JWT_LEEWAY", "jwt-leeway", "30s", "token mode: clock skew allowed on a token's exp, nbf and iat", dur(func(c *config) *time.Duration { return &c.JWTLeeway }), false},
		{"STOCKSVC_CUSTOMER_HEADER", "customer-header", "X-Customer-Id", "gateway mode: the header in which the trusted gateway names the customer", str(func(c *config) *string { return &c.CustomerHeader }), false},
	}
	return append(all, limitSettings()...)
}

// loadConfig reads the environment through getenv, then the flags in args.
func loadConfig(args []string, getenv func(string) string, usage io.Writer) (config, []string, error) {
	var c config
	fs := flag.NewFlagSet("stocksvc", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), commands)
		fs.PrintDefaults()
	}
	all := settings()
	envErrs := make([]error, len(all))
	flagIndex := map[string]int{}
	for i, s := range all {
		v, err := lookup(s, getenv) // its errors name the variables
		if v == "" {
			v = s.def
		}
		if err == nil {
			if err = s.set(&c, v); err != nil {
				err = fmt.Errorf("%s: %w", s.env, err)
			}
		}
		envErrs[i] = err
		flagIndex[s.flag] = i
		usage := fmt.Sprintf("%s (env %s, default %q)", s.usage, s.env, s.def)
		if s.secret {
			usage = fmt.Sprintf("%s (env %s or %s_FILE, default %q)", s.usage, s.env, s.env, s.def)
		}
		fs.Func(s.flag, usage, func(v string) error { return s.set(&c, v) })
	}
	if err := fs.Parse(args); err != nil {
		return config{}, nil, err
	}
	// A flag wins over its variable, even over one that could not be read.
	fs.Visit(func(f *flag.Flag) { envErrs[flagIndex[f.Name]] = nil })
	if err := errors.Join(envErrs...); err != nil {
		return config{}, nil, err
	}
	return c, fs.Args(), c.validate()
}

// lookup reads a setting's variable, or for a secret one the file its *_FILE variable names.
func lookup(s setting, getenv func(string) string) (string, error) {
	v := getenv(s.env)
	if !s.secret {
		return v, nil
	}
	fileVar := s.env + "_FILE"
	path := getenv(fileVar)
	switch {
	case path == "":
		return v, nil
	case v != "":
		return "", fmt.Errorf("%s and %s are both set: %w", s.env, fileVar, errBothSet)
	}
	return readSecretFile(fileVar, path)
}

func (c *config) validate() error {
	var errs []error
	var err error
	if c.defense, err = stock.ParseDefense(c.Defense); err != nil {
		errs = append(errs, fmt.Errorf("STOCKSVC_DEFENSE: %w", err))
	} else if c.defense != stock.DefaultDefense() && !c.DemoUnsafe {
		errs = append(errs, fmt.Errorf("STOCKSVC_DEFENSE=%s can oversell or weaken the service; set STOCKSVC_DEMO_UNSAFE=1 to run it anyway", c.Defense))
	}
	switch c.RuleChecks {
	case "on":
	case "postgres-only":
		if !c.DemoUnsafe {
			errs = append(errs, errors.New("STOCKSVC_RULE_CHECKS=postgres-only refuses nothing before Postgres; set STOCKSVC_DEMO_UNSAFE=1 to run it anyway"))
		}
	default:
		errs = append(errs, fmt.Errorf("STOCKSVC_RULE_CHECKS: %q is neither on nor postgres-only", c.RuleChecks))
	}
	if c.ClockSkew != 0 && !c.DemoUnsafe {
		errs = append(errs, errors.New("STOCKSVC_CLOCK_SKEW makes this replica's clock wrong on purpose; set STOCKSVC_DEMO_UNSAFE=1 to run it anyway"))
	}
	if err := checkAdminToken(c.AdminToken); err != nil {
		errs = append(errs, err)
	}
	if c.retry, err = parseRetry(c.LockRetry, c.LockMaxRetries); err != nil {
		errs = append(errs, fmt.Errorf("STOCKSVC_LOCK_RETRY: %w", err))
	}
	if c.LockTTL < 100*time.Millisecond {
		errs = append(errs, fmt.Errorf("STOCKSVC_LOCK_TTL: %v is too short (minimum 100ms)", c.LockTTL))
	}
	if c.LockWait <= 0 {
		errs = append(errs, errors.New("STOCKSVC_LOCK_WAIT: must be positive"))
	}
	if c.MaxQuantity < 1 {
		errs = append(errs, errors.New("STOCKSVC_MAX_QUANTITY: must be at least 1"))
	}
	if c.QueueWait <= 0 {
		errs = append(errs, errors.New("STOCKSVC_QUEUE_WAIT: must be positive"))
	}
	if c.MaxBatch < 1 || c.MaxBatch > 10000 {
		errs = append(errs, fmt.Errorf("STOCKSVC_MAX_BATCH: %d is outside 1..10000", c.MaxBatch))
	}
	// A line being drained holds a connection for its lock for as long as it drains; half the
	// pool stays for the purchases, the reads and River's own.
	if c.AsyncWorkers < 0 || c.DBMaxConns >= 1 && c.AsyncWorkers > c.DBMaxConns/2 {
		errs = append(errs, fmt.Errorf("STOCKSVC_ASYNC_WORKERS: %d is outside 0..%d (half of STOCKSVC_DB_MAX_CONNS: each line being drained holds a connection)", c.AsyncWorkers, c.DBMaxConns/2))
	}
	if c.CacheLease > time.Second {
		errs = append(errs, fmt.Errorf("STOCKSVC_CACHE_LEASE: %v is too long (every restock waits it out; at most 1s)", c.CacheLease))
	}
	if c.CacheRedisWait <= 0 {
		errs = append(errs, errors.New("STOCKSVC_CACHE_REDIS_WAIT: must be positive"))
	}
	if c.CacheLease > 0 && c.CacheTTL < c.CacheLease {
		errs = append(errs, fmt.Errorf("STOCKSVC_CACHE_TTL: %v is shorter than STOCKSVC_CACHE_LEASE", c.CacheTTL))
	}
	if c.LinePoll < 10*time.Millisecond || c.LinePoll > 5*time.Second {
		errs = append(errs, fmt.Errorf("STOCKSVC_LINE_POLL: %v is outside 10ms..5s", c.LinePoll))
	}
	if c.LineMaxWait < time.Second || c.LineMaxWait > time.Minute {
		errs = append(errs, fmt.Errorf("STOCKSVC_LINE_MAX_WAIT: %v is outside 1s..1m", c.LineMaxWait))
	}
	if c.DBMaxConns < 1 {
		errs = append(errs, errors.New("STOCKSVC_DB_MAX_CONNS: must be at least 1"))
	}
	if c.RequestTimeout <= 0 {
		errs = append(errs, errors.New("STOCKSVC_REQUEST_TIMEOUT: must be positive"))
	}
	if c.ShutdownGrace <= 0 {
		errs = append(errs, errors.New("STOCKSVC_SHUTDOWN_GRACE: must be positive"))
	} else if c.ShutdownDelay >= c.ShutdownGrace {
		errs = append(errs, fmt.Errorf("STOCKSVC_SHUTDOWN_DELAY: %v leaves nothing of STOCKSVC_SHUTDOWN_GRACE (%v), the budget of the whole shutdown, for the requests in flight", c.ShutdownDelay, c.ShutdownGrace))
	}
	if err := checkDebugAddr(c.DebugAddr); err != nil {
		errs = append(errs, err)
	}
	if c.StartupTimeout <= 0 {
		errs = append(errs, errors.New("STOCKSVC_STARTUP_TIMEOUT: must be positive"))
	}
	if c.IdempotencyTTL < 24*time.Hour {
		errs = append(errs, fmt.Errorf("STOCKSVC_IDEMPOTENCY_TTL: %v is below the promised 24h", c.IdempotencyTTL))
	}
	// Port 0 asks for any free port: two such addresses are two listeners.
	if _, port, _ := net.SplitHostPort(c.AdminAddr); c.AdminAddr != "" && c.AdminAddr == c.Addr && port != "0" {
		errs = append(errs, fmt.Errorf("STOCKSVC_ADMIN_ADDR: %q is STOCKSVC_ADDR too; leave it empty to serve the admin routes there", c.AdminAddr))
	}
	if err := checkDatabaseURL(c.DatabaseURL); err != nil {
		errs = append(errs, err)
	}
	switch c.RedisMode {
	case "single", "sentinel", "cluster", "redlock":
		if err := checkRedisURL(c.RedisURL, c.RedisMode); err != nil {
			errs = append(errs, err)
		}
	default:
		errs = append(errs, fmt.Errorf("STOCKSVC_REDIS_MODE: want single, sentinel, cluster or redlock, got %q", c.RedisMode))
	}
	if c.LogFormat != "json" && c.LogFormat != "text" {
		errs = append(errs, fmt.Errorf("STOCKSVC_LOG_FORMAT: want json or text, got %q", c.LogFormat))
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.LogLevel)); err != nil {
		errs = append(errs, fmt.Errorf("STOCKSVC_LOG_LEVEL: %w", err))
	}
	errs = append(errs, c.validateCustomerAuth()...)
	errs = append(errs, c.validateLimits()...)
	return errors.Join(errs...)
}

// validateCustomerAuth checks the customer identity settings that are wrong whatever the
// command: a mode or URL that cannot be read. What token mode needs in order to serve is
// checkCustomerAuth's: migrate and healthcheck run without it.
func (c *config) validateCustomerAuth() []error {
	var errs []error
	var err error
	if c.mode, err = identity.ParseMode(c.CustomerAuth); err != nil {
		errs = append(errs, fmt.Errorf("STOCKSVC_CUSTOMER_AUTH: %w", err))
	}
	if c.JWKSURL != "" {
		if err := identity.CheckJWKSURL(c.JWKSURL); err != nil {
			// Printed before the log's scrubber exists: the URL's credentials are hidden here.
			errs = append(errs, parseHTTPURL(c.JWKSURL).hideError(fmt.Errorf("STOCKSVC_JWKS_URL: %w", err), c.JWKSURL))
		}
	}
	if c.JWKSRefresh < time.Second {
		errs = append(errs, fmt.Errorf("STOCKSVC_JWKS_REFRESH: %v is too short (at least 1s: the key server is asked by every replica)", c.JWKSRefresh))
	}
	if c.JWTLeeway > 5*time.Minute {
		errs = append(errs, fmt.Errorf("STOCKSVC_JWT_LEEWAY: %v is too long (at most 5m: an expired token stays good that long)", c.JWTLeeway))
	}
	if !validHeaderName(c.CustomerHeader) {
		errs = append(errs, fmt.Errorf("STOCKSVC_CUSTOMER_HEADER: %q is not a header name", c.CustomerHeader))
	}
	return errs
}

// checkCustomerAuth says what the chosen mode lacks to serve: token mode needs the issuer,
// the audience and exactly one source of keys.
func (c config) checkCustomerAuth() error {
	if c.mode != identity.ModeToken {
		return nil
	}
	var errs []error
	if c.JWTIssuer == "" {
		errs = append(errs, errors.New("STOCKSVC_JWT_ISSUER: required in token mode"))
	}
	if c.JWTAudience == "" {
		errs = append(errs, errors.New("STOCKSVC_JWT_AUDIENCE: required in token mode"))
	}
	switch {
	case c.JWKSFile == "" && c.JWKSURL == "":
		errs = append(errs, errors.New("STOCKSVC_JWKS_FILE or STOCKSVC_JWKS_URL: one is required in token mode"))
	case c.JWKSFile != "" && c.JWKSURL != "":
		errs = append(errs, errors.New("STOCKSVC_JWKS_FILE and STOCKSVC_JWKS_URL: both are set; choose one"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("STOCKSVC_CUSTOMER_AUTH=token (the default; body serves without verifying anyone, for demonstrations and tests): %w", err)
	}
	return nil
}

// validHeaderName reports whether name is an HTTP field name (RFC 9110 token).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		ch := name[i]
		if ch <= ' ' || ch >= 0x7f || strings.IndexByte(`"(),/:;<=>?@[\]{}`, ch) >= 0 {
			return false
		}
	}
	return true
}

// checkDebugAddr refuses a profiler address that is not on loopback: profiles show the
// service's internals, and a profile or trace request costs the replica CPU for as long as it
// asks. An empty address (the profiler off) is fine; "localhost" is loopback by name.
func checkDebugAddr(addr string) error {
	if addr == "" {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("STOCKSVC_DEBUG_ADDR: %q is not host:port: %w", addr, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("STOCKSVC_DEBUG_ADDR: %q is not a loopback address (127.0.0.1, ::1 or localhost); the profiler must not be reachable from other hosts", addr)
}

// parseRetry reads a lock retry policy: "wait" (nil: queue and wake on release), or a polling
// one — "exponential[:BASE:MAX]", "linear[:STEP:MAX]", "fixed:PAUSE" or "none" — capped at
// maxRetries retries when that is positive.
func parseRetry(spec string, maxRetries int) (lock.RetryStrategy, error) {
	if spec == "wait" {
		if maxRetries > 0 {
			return nil, fmt.Errorf("%q does not poll, so STOCKSVC_LOCK_MAX_RETRIES does not apply", spec)
		}
		return nil, nil
	}
	parts := strings.Split(spec, ":")
	durs := make([]time.Duration, len(parts)-1)
	for i, p := range parts[1:] {
		d, err := time.ParseDuration(p)
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q: %q is not a positive duration", spec, p)
		}
		durs[i] = d
	}
	var s lock.RetryStrategy
	switch {
	case parts[0] == "none" && len(durs) == 0:
		s = lock.NoRetry()
	case parts[0] == "exponential" && len(durs) == 0:
		s = lock.Exponential(time.Millisecond, 50*time.Millisecond)
	case parts[0] == "exponential" && len(durs) == 2:
		s = lock.Exponential(durs[0], durs[1])
	case parts[0] == "linear" && len(durs) == 0:
		s = lock.Linear(2*time.Millisecond, 50*time.Millisecond)
	case parts[0] == "linear" && len(durs) == 2:
		s = lock.Linear(durs[0], durs[1])
	case parts[0] == "fixed" && len(durs) == 1:
		s = lock.Fixed(durs[0])
	default:
		return nil, fmt.Errorf("%q: want wait, exponential[:BASE:MAX], linear[:STEP:MAX], fixed:PAUSE or none", spec)
	}
	if maxRetries > 0 {
		s = lock.Limit(s, maxRetries)
	}
	return s, nil
}

// logAttrs describes the configuration for the start-up log line, secrets masked.
func (c config) logAttrs() []any {
	masked := ""
	if c.AdminToken != "" {
		masked = "***"
	}
	return append([]any{
		slog.String("addr", c.Addr),
		slog.String("admin_addr", c.AdminAddr),
		slog.String("database_url", maskDSN(c.DatabaseURL)),
		slog.String("redis_url", maskDSN(c.RedisURL)),
		slog.String("redis_mode", c.RedisMode),
		slog.String("redis_prefix", c.RedisPrefix),
		slog.String("admin_token", masked),
		slog.Int("db_max_conns", c.DBMaxConns),
		slog.String("lock_ttl", c.LockTTL.String()),
		slog.String("lock_wait", c.LockWait.String()),
		slog.String("lock_retry", c.LockRetry),
		slog.Int("lock_max_retries", c.LockMaxRetries),
		slog.Int64("max_quantity", c.MaxQuantity),
		slog.Int("max_batch", c.MaxBatch),
		slog.Int("async_workers", c.AsyncWorkers),
		slog.String("queue_wait", c.QueueWait.String()),
		slog.String("cache_lease", c.CacheLease.String()),
		slog.String("cache_ttl", c.CacheTTL.String()),
		slog.String("cache_redis_wait", c.CacheRedisWait.String()),
		slog.String("line_poll", c.LinePoll.String()),
		slog.String("line_max_wait", c.LineMaxWait.String()),
		slog.String("request_timeout", c.RequestTimeout.String()),
		slog.String("shutdown_grace", c.ShutdownGrace.String()),
		slog.String("shutdown_delay", c.ShutdownDelay.String()),
		slog.String("startup_timeout", c.StartupTimeout.String()),
		slog.String("idempotency_ttl", c.IdempotencyTTL.String()),
		slog.String("defense", c.defense.String()),
		slog.String("debug_addr", c.DebugAddr),
		slog.String("customer_auth", string(c.mode)),
		slog.String("jwks_file", c.JWKSFile),
		slog.String("jwks_url", maskHTTPURL(c.JWKSURL)),
		slog.String("jwks_refresh", c.JWKSRefresh.String()),
		slog.String("jwt_issuer", c.JWTIssuer),
		slog.String("jwt_audience", c.JWTAudience),
		slog.String("jwt_leeway", c.JWTLeeway.String()),
		slog.String("customer_header", c.CustomerHeader),
	}, c.limitAttrs()...)
}

// secrets lists the secret values in the configuration that free text can be scrubbed of:
// the admin token, the connection strings' passwords, and the JWKS URL's user information and
// query values. A password that is also written in plain sight in its connection string, such
// as "postgres" in postgres://postgres:postgres@..., is left out: scrubbing it would garble
// every line that names the database, the user or the scheme, and the masked configuration
// line hides it anyway.
func (c config) secrets() []string {
	db, rd, jwks := parseDSN(c.DatabaseURL), parseDSN(c.RedisURL), parseHTTPURL(c.JWKSURL)
	shown := []string{db.masked, rd.masked, jwks.masked}
	var keep []string
	for _, s := range slices.Concat([]string{c.AdminToken}, db.secrets, rd.secrets, jwks.secrets) {
		if s != "" && !slices.ContainsFunc(shown, func(m string) bool { return strings.Contains(m, s) }) {
			keep = append(keep, s)
		}
	}
	return keep
}

// checkDatabaseURL says why raw cannot be a Postgres connection string, showing it masked.
// Nothing is dialled: these are the mistakes that waiting cannot fix.
func checkDatabaseURL(raw string) error {
	d := parseDSN(raw)
	switch {
	case d.scheme != "" && d.scheme != "postgres" && d.scheme != "postgresql":
		return fmt.Errorf("DATABASE_URL %q: scheme %q is not postgres:// or postgresql://", d.masked, d.scheme)
	case d.scheme == "" && d.malformedAt >= 0:
		return fmt.Errorf("DATABASE_URL %q: neither a postgres:// URL nor key=value settings (unreadable from character %d on)", d.masked, d.malformedAt+1)
	}
	if _, err := pgx.ParseConfig(raw); err != nil {
		return fmt.Errorf("DATABASE_URL %q: %s", d.masked, parseErrorText(err, d))
	}
	return nil
}

// checkRedisURL says why raw cannot be a Redis URL for mode, showing it masked.
func checkRedisURL(raw, mode string) error {
	d := parseDSN(raw)
	if d.scheme == "" {
		return fmt.Errorf("REDIS_URL %q: not a URL (want redis://[[user]:password@]host[:port][/db], rediss://... or unix://...)", d.masked)
	}
	if _, err := parseRedisURL(raw, mode); err != nil {
		return fmt.Errorf("REDIS_URL %q: %s", d.masked, newRedactor(d.secrets).scrub(err.Error()))
	}
	return nil
}

// parseErrorText is what pgx says about a connection string it cannot parse, without the
// string itself: pgx quotes it with its own, best-effort redaction, which garbles a URL of the
// wrong scheme, and the wrapped net/url error may quote it whole.
func parseErrorText(err error, d dsn) string {
	text := err.Error()
	if pe := (*pgconn.ParseConfigError)(nil); errors.As(err, &pe) {
		const quoted = "cannot parse `"
		if i, j := strings.Index(text, quoted), strings.LastIndex(text, "`: "); i >= 0 && j > i {
			text = text[j+len("`: "):]
		}
	}
	return newRedactor(d.secrets).scrub(text)
}
