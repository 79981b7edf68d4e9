// Package testenv gives integration tests real servers: one Postgres and one Redis per test
// package, a fresh database per test cloned from a template that the migrations built once
// for the package, and a random Redis key prefix per test. Nothing shared is ever flushed or
// dropped, and nothing the tests made is left behind.
//
// The servers come from STOCKSVC_TEST_DATABASE_URL and STOCKSVC_TEST_REDIS_URL when set (CI,
// or servers elsewhere); otherwise the usual local servers are used when they take a
// connection, on loopback only: Postgres at 127.0.0.1:5432 as user postgres, Redis at
// 127.0.0.1:6379; otherwise testcontainers (postgres and redis modules) starts them, when a
// Docker engine answers. With none of these, tests skip with a message saying how to enable
// them, and the package fails at its end with a line that says how many skipped: a skipped
// suite must not read "ok" in piped output or a CI log, where go test shows nothing else of a
// passing package. STOCKSVC_REQUIRE_INTEGRATION=0 (or -short) accepts the skips (the package
// passes, and the line is still printed); STOCKSVC_REQUIRE_INTEGRATION=1 turns each skip into
// a failure at once (CI).
//
// Every database and Redis key prefix a test binary makes is named STOCKSVC_TEST_PREFIX
// (default DefaultPrefix), then an id of the binary's own, so that runs on the same servers
// never collide. The binary drops its databases and deletes its keys when it ends (Main); a
// binary killed before that leaves them to the next run under the same prefix, which removes
// those of every run that is no longer alive (see servers.sweep).
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver that postgresReady queries with
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/redis/go-redis/v9"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	tcredis "github.com/testcontainers/testcontainers-go/modules/redis"
	"github.com/testcontainers/testcontainers-go/wait"
	"go.uber.org/goleak"

	"github.com/stocksvc/stocksvc/migrations"
)

// Environment variables that select the servers.
const (
	EnvDatabaseURL = "STOCKSVC_TEST_DATABASE_URL"
	EnvRedisURL    = "STOCKSVC_TEST_REDIS_URL"
	EnvRequire     = "STOCKSVC_REQUIRE_INTEGRATION"
	EnvPrefix      = "STOCKSVC_TEST_PREFIX"
)

// The usual local servers, tried when the environment names no server and no Docker engine
// answers. Loopback only: the tests never reach beyond this machine on their own.
const (
	localPostgresURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	localRedisURL    = "redis://127.0.0.1:6379/0"
)

// Images used when testcontainers starts the servers.
const (
	postgresImage = "postgres:16-alpine"
	redisImage    = "redis:7-alpine"
)

const howToEnable = "integration tests need Postgres and Redis: run them on 127.0.0.1:5432 (user postgres) and " +
	"127.0.0.1:6379, or set " + EnvDatabaseURL + " (e.g. " + localPostgresURL + ") and " + EnvRedisURL +
	" (e.g. " + localRedisURL + "), or run a Docker engine for testcontainers"

// servers is what this test binary found. It is set up once, on first use.
type servers struct {
	namesOnce sync.Once
	names     names
	namesErr  error // a prefix that cannot be used: a failure, never a skip

	once         sync.Once
	postgresURL  string // a database on the server where test databases are created
	postgresBase *url.URL
	redisURL     string
	admin        *pgxpool.Pool
	pgOwner      *pgx.Conn     // holds the run's lock (own)
	rdb          *redis.Client // the shared Redis, for the run's own use
	redisOwner   *redis.Conn   // the connection named after the run (own)
	template     string
	err          error
	containers   []testcontainers.Container
}

var env servers

// Main runs a test package: m.Run, then the servers' cleanup, then a goroutine leak check.
// Call it from TestMain. When integration tests skipped for want of servers, it says so in one
// line with the command that makes them run (see skipSummary).
func Main(m *testing.M, leakOptions ...goleak.Option) {
	code := m.Run()
	if line := skips.summary(filepath.Base(os.Args[0])); line != "" {
		announce(line)
		if !skipsAccepted() && code == 0 {
			// go test prints a failing package's whole output, piped or not: the line
			// above is then seen, and the package does not read "ok".
			fmt.Printf("testenv: FAIL: integration tests skipped, and %s=0 (or -short) does not say that is fine\n", EnvRequire)
			code = 1
		}
	}
	if err := env.close(); err != nil {
		fmt.Printf("testenv: FAIL: %v\n", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

// close removes what the run left on the servers and lets go of them.
func (s *servers) close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := s.cleanUp(ctx)
	if s.admin != nil {
		s.admin.Close()
	}
	for _, c := range s.containers {
		_ = testcontainers.TerminateContainer(c)
	}
	if err != nil {
		return fmt.Errorf("clean up after the tests: %w", err)
	}
	return nil
}

// skipLog counts the tests of this binary that skipped for want of servers, and keeps the
// first reason, for the summary Main prints.
type skipLog struct {
	mu     sync.Mutex
	n      int
	reason string
}

var skips skipLog

func (l *skipLog) add(reason string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if l.reason == "" {
		l.reason = strings.Join(strings.Fields(reason), " ") // one line, whatever the error
	}
}

// summary is the line that says how many tests skipped, why, and how to make them run, or ""
// when none skipped.
func (l *skipLog) summary(binary string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n == 0 {
		return ""
	}
	tests := "tests"
	if l.n == 1 {
		tests = "test"
	}
	return fmt.Sprintf("testenv: %s: %d integration %s SKIPPED (%s). To run them, and fail instead of skipping: "+
		"%s=1 %s='postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable' %s='redis://127.0.0.1:6379/0' go test ./... "+
		"To skip them and pass: %s=0 go test ./... (or go test -short ./...)",
		strings.TrimSuffix(binary, ".test"), l.n, tests, l.reason, EnvRequire, EnvDatabaseURL, EnvRedisURL, EnvRequire)
}

// announce prints the skip summary where it will be seen. go test shows a passing package's
// output only with -v (or when run in the package's directory without arguments), so the line
// also goes to the terminal, when the tests run in one: with the skips accepted, `go test
// ./...` would otherwise print "ok" and nothing else for a package that tested nothing. Where
// there is no terminal (a pipe, a CI log), only a failing package's output is shown: that is
// why skips that were not accepted fail the package (Main).
func announce(line string) {
	fmt.Println(line)
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return
	}
	defer tty.Close()
	fmt.Fprintln(tty, line)
}

// skipsAccepted reports whether integration tests that skipped for want of servers may leave
// the package passing: only when asked, by EnvRequire=0 or -short.
func skipsAccepted() bool {
	v := os.Getenv(EnvRequire)
	return v == "0" || strings.EqualFold(v, "false") || testing.Short()
}

// required reports whether missing servers must fail the tests instead of skipping them.
func required() bool {
	v := os.Getenv(EnvRequire)
	return v == "1" || strings.EqualFold(v, "true")
}

// runNames returns the run's names, or fails the test when EnvPrefix cannot be used.
func (s *servers) runNames(t testing.TB) names {
	t.Helper()
	s.namesOnce.Do(func() { s.names, s.namesErr = namesFromEnv() })
	if s.namesErr != nil {
		t.Fatal(s.namesErr)
	}
	return s.names
}

func (s *servers) get(t testing.TB) *servers {
	t.Helper()
	s.runNames(t)
	s.once.Do(s.setUp)
	if s.err != nil {
		if required() {
			t.Fatalf("%s is set but the integration servers are unavailable: %v", EnvRequire, s.err)
		}
		skips.add(s.err.Error())
		t.Skipf("skipping: %v (%s)", s.err, howToEnable)
	}
	return s
}

func (s *servers) setUp() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if s.err = s.locate(ctx); s.err != nil {
		return
	}
	base, err := url.Parse(s.postgresURL)
	if err != nil {
		s.err = fmt.Errorf("parse %s: %w", EnvDatabaseURL, err)
		return
	}
	s.postgresBase = base
	admin, err := pgxpool.New(ctx, s.postgresURL)
	if err == nil {
		if err = admin.Ping(ctx); err != nil {
			admin.Close() // or its health-check goroutine outlives the tests, and goleak fails them
		}
	}
	if err != nil {
		s.err = fmt.Errorf("postgres at %s: %w", redact(s.postgresURL), err)
		return
	}
	s.admin = admin
	rdb, err := redisClient(s.redisURL)
	if err == nil {
		err = rdb.Ping(ctx).Err()
		_ = rdb.Close()
	}
	if err != nil {
		s.err = fmt.Errorf("redis at %s: %w", redact(s.redisURL), err)
		return
	}
	if s.err = s.own(ctx); s.err != nil {
		return
	}
	// What killed runs left is removed before anything new is made; failing to is no reason
	// to fail the tests (nothing is removed then), but it is said.
	if dropped, deleted, err := s.sweep(ctx); err != nil {
		fmt.Printf("testenv: removing what earlier runs left under %s: %v\n", s.names.prefix, err)
	} else if dropped+deleted > 0 {
		fmt.Printf("testenv: removed %d databases and %d Redis keys left under %s by runs that ended without cleaning up\n", dropped, deleted, s.names.prefix)
	}
	s.template, s.err = s.buildTemplate(ctx)
}

// locate finds the servers: those the environment names; for any it does not, the usual
// local server when it takes a connection; for any still missing, containers, when a Docker
// engine answers. The local servers come before Docker because they are there at once, need no
// image (none can be pulled offline, even where an engine runs), and are what CI tests on.
func (s *servers) locate(ctx context.Context) error {
	s.postgresURL, s.redisURL = os.Getenv(EnvDatabaseURL), os.Getenv(EnvRedisURL)
	missing := "no server URLs set"
	if s.postgresURL != "" || s.redisURL != "" {
		missing = "no " + EnvRedisURL + " set"
		if s.postgresURL == "" {
			missing = "no " + EnvDatabaseURL + " set"
		}
	}
	var localErrs []error
	if s.postgresURL == "" {
		if err := probePostgres(ctx, localPostgresURL); err != nil {
			localErrs = append(localErrs, err)
		} else {
			s.postgresURL = localPostgresURL
		}
	}
	if s.redisURL == "" {
		if err := probeRedis(ctx, localRedisURL); err != nil {
			localErrs = append(localErrs, err)
		} else {
			s.redisURL = localRedisURL
		}
	}
	if s.postgresURL != "" && s.redisURL != "" {
		return nil
	}
	local := localErrs[0] // one per server neither named nor found
	if len(localErrs) == 2 {
		local = fmt.Errorf("%w, %w", localErrs[0], localErrs[1])
	}
	host, err := dockerHost(ctx)
	if err != nil {
		return fmt.Errorf("%s, %w, and no Docker engine for testcontainers (%w)", missing, local, err)
	}
	if err := s.startContainers(ctx, host); err != nil {
		return fmt.Errorf("%s, %w, and testcontainers failed: %w", missing, local, err)
	}
	return nil
}

// probeTimeout bounds each try of a usual local server: on loopback, a server that is there
// answers at once, and one that is not refuses at once.
const probeTimeout = 2 * time.Second

// probePostgres reports whether the Postgres server of rawURL takes a connection.
func probePostgres(ctx context.Context, rawURL string) error {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := pgx.Connect(ctx, rawURL)
	if err != nil {
		return fmt.Errorf("no Postgres at %s to use: %w", redact(rawURL), err)
	}
	return conn.Close(ctx)
}

// probeRedis reports whether the Redis server of rawURL answers a PING.
func probeRedis(ctx context.Context, rawURL string) error {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return fmt.Errorf("parse %s: %w", redact(rawURL), err)
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	// A port that refuses is told by a dial of our own: go-redis would retry it, and log each
	// failed dial.
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", opts.Addr)
	if err != nil {
		return fmt.Errorf("no Redis at %s to use: %w", redact(rawURL), err)
	}
	_ = conn.Close()
	opts.MaxRetries, opts.DialerRetries = -1, 1
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("no Redis at %s to use: %w", redact(rawURL), err)
	}
	return nil
}

// dockerHost returns the host of the Docker engine testcontainers would use, or why there is
// none.
func dockerHost(ctx context.Context) (string, error) {
	provider, err := testcontainers.NewDockerProvider()
	if err != nil {
		return "", err
	}
	defer provider.Close()
	if err := provider.Health(ctx); err != nil {
		return "", err
	}
	return provider.DaemonHost(ctx)
}

// startContainers starts whichever server the environment did not name, on the Docker engine
// at host.
func (s *servers) startContainers(ctx context.Context, host string) error {
	if s.postgresURL == "" {
		pg, err := tcpostgres.Run(ctx, postgresImage,
			tcpostgres.WithDatabase("postgres"), tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
			testcontainers.WithWaitStrategy(postgresReady()), publishOn(host, "5432/tcp"))
		if pg != nil {
			s.containers = append(s.containers, pg)
		}
		if err != nil {
			return fmt.Errorf("start postgres container: %w", err)
		}
		if s.postgresURL, err = pg.ConnectionString(ctx, "sslmode=disable"); err != nil {
			return fmt.Errorf("postgres container address: %w", err)
		}
	}
	if s.redisURL == "" {
		rc, err := tcredis.Run(ctx, redisImage, publishOn(host, "6379/tcp"))
		if rc != nil {
			s.containers = append(s.containers, rc)
		}
		if err != nil {
			return fmt.Errorf("start redis container: %w", err)
		}
		if s.redisURL, err = rc.ConnectionString(ctx); err != nil {
			return fmt.Errorf("redis container address: %w", err)
		}
	}
	return nil
}

// publishOn publishes a container's port on the loopback interface only when the tests reach
// the Docker engine through loopback (a local engine, or TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1):
// Docker's default, every interface, would open a password-known database to the network for
// no use. A remote engine keeps the default, as its loopback is not ours.
func publishOn(host, port string) testcontainers.CustomizeRequestOption {
	return testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
		if !isLoopback(host) {
			return
		}
		p, err := network.ParsePort(port)
		if err != nil {
			return // a constant of this file; the test then fails to reach the server and says so
		}
		if hc.PortBindings == nil {
			hc.PortBindings = network.PortMap{}
		}
		hc.PortBindings[p] = []network.PortBinding{{HostIP: netip.AddrFrom4([4]byte{127, 0, 0, 1}), HostPort: ""}}
	})
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// postgresReady waits until a query over the published port succeeds. It asks the server
// itself rather than counting "ready to accept connections" lines in the log (the module's
// default): the official image logs that line once for its set-up server and once more for the
// real one, but an image that skips set-up (a data volume, a derived image) logs it only once
// and would never be taken for ready.
func postgresReady() wait.Strategy {
	return wait.ForSQL("5432/tcp", "pgx", func(host string, port network.Port) string {
		return fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", net.JoinHostPort(host, port.Port()))
	}).WithStartupTimeout(2 * time.Minute)
}

// buildTemplate builds the run's template: a database holding the migrated schema, from which
// every test's database is cloned. It is the run's own, so no other run is cloning from it
// when the run drops it at its end, and one left half-built goes with the rest of the run's.
func (s *servers) buildTemplate(ctx context.Context) (string, error) {
	name := s.names.template()
	if _, err := s.admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	if err := migrations.Up(withDatabase(s.postgresBase, name)); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	return name, nil
}

// DatabaseURL returns the URL of a new database holding the migrated schema and nothing else.
// The database is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	s := env.get(t)
	ctx := context.Background()
	name := s.names.newDatabase()
	if _, err := s.admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE `+pgx.Identifier{s.template}.Sanitize()); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		if err := dropDatabase(context.Background(), s.admin, name); err != nil {
			t.Error(err)
		}
	})
	return withDatabase(s.postgresBase, name)
}

// DatabaseName returns a name for a database that the test creates itself (or has the code
// under test create), on the server of DatabaseURL. It is the run's, like every database the
// tests make: whatever the test leaves is dropped when the run ends.
func DatabaseName(t testing.TB) string {
	t.Helper()
	return env.runNames(t).newDatabase()
}

// NamePrefix returns the prefix of every database and Redis key prefix the tests make
// (EnvPrefix, or DefaultPrefix).
func NamePrefix(t testing.TB) string {
	t.Helper()
	return env.runNames(t).prefix
}

// Pool returns a connection pool to a new database (see DatabaseURL), closed when the test
// ends.
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), DatabaseURL(t))
	if err != nil {
		t.Fatalf("connect to test database: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// RedisURL returns the URL of the Redis server the tests share. Use KeyPrefix to stay apart.
func RedisURL(t testing.TB) string {
	t.Helper()
	return env.get(t).redisURL
}

// Redis returns a client of the shared Redis server and a key prefix of the test's own. Keys
// under the prefix are deleted, and the client closed, when the test ends.
func Redis(t testing.TB) (*redis.Client, string) {
	t.Helper()
	rdb, err := redisClient(RedisURL(t))
	if err != nil {
		t.Fatalf("redis client: %v", err)
	}
	prefix := KeyPrefix(t)
	t.Cleanup(func() {
		defer rdb.Close()
		DeleteKeys(t, rdb, prefix)
	})
	return rdb, prefix
}

// KeyPrefix returns a random Redis key prefix for one test, under the run's (see NamePrefix):
// keys under it that the test leaves on the shared server are deleted when the run ends.
func KeyPrefix(t testing.TB) string {
	t.Helper()
	return env.runNames(t).newKeyPrefix()
}

// DeleteKeys deletes every key that starts with prefix, and nothing else.
func DeleteKeys(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	if _, err := deleteKeys(context.Background(), rdb, prefix); err != nil {
		t.Error(err)
	}
}

func escapeGlob(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`)
	return r.Replace(s)
}

func redisClient(rawURL string) (*redis.Client, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("parse %s: %w", EnvRedisURL, err)
	}
	return redis.NewClient(opts), nil
}

// withDatabase returns base with its database replaced by name.
func withDatabase(base *url.URL, name string) string {
	u := *base
	u.Path = "/" + name
	return u.String()
}

func redact(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// DeadEndpoint returns the address of a TCP listener that accepts connections and closes them
// at once: a Postgres or Redis that is down, without the port-reuse race of a closed port.
func DeadEndpoint(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				if !errors.Is(err, net.ErrClosed) {
					t.Errorf("dead endpoint accept: %v", err)
				}
				return
			}
			_ = conn.Close()
		}
	})
	t.Cleanup(func() {
		_ = ln.Close()
		wg.Wait()
	})
	return ln.Addr().String()
}
