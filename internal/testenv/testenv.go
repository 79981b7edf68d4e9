// Package testenv gives integration tests real servers: one Postgres and one Redis per test
// package, a fresh database per test cloned from a template that the migrations built once,
// and a random Redis key prefix per test. Nothing shared is ever flushed or dropped.
//
// The servers come from STOCKSVC_TEST_DATABASE_URL and STOCKSVC_TEST_REDIS_URL when set (CI,
// or a developer's local servers), and otherwise from testcontainers (postgres and redis
// modules), which needs a Docker engine. With neither, tests skip with a message saying how to
// enable them, and the package fails at its end with a line that says how many skipped: a
// skipped suite must not read "ok" in piped output or a CI log, where go test shows nothing
// else of a passing package. STOCKSVC_REQUIRE_INTEGRATION=0 (or -short) accepts the skips
// (the package passes, and the line is still printed); STOCKSVC_REQUIRE_INTEGRATION=1 turns
// each skip into a failure at once (CI).
package testenv

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
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
)

// Images used when testcontainers starts the servers.
const (
	postgresImage = "postgres:16-alpine"
	redisImage    = "redis:7-alpine"
)

const howToEnable = "integration tests need Postgres and Redis: set " + EnvDatabaseURL +
	" (e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable) and " + EnvRedisURL +
	" (e.g. redis://127.0.0.1:6379/0), or run a Docker engine for testcontainers"

// servers is what this test binary found. It is set up once, on first use.
type servers struct {
	once         sync.Once
	postgresURL  string // a database on the server where test databases are created
	postgresBase *url.URL
	redisURL     string
	admin        *pgxpool.Pool
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
	env.close()
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}

func (s *servers) close() {
	if s.admin != nil {
		s.admin.Close()
	}
	for _, c := range s.containers {
		_ = testcontainers.TerminateContainer(c)
	}
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

func (s *servers) get(t testing.TB) *servers {
	t.Helper()
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
	s.postgresURL, s.redisURL = os.Getenv(EnvDatabaseURL), os.Getenv(EnvRedisURL)
	if s.postgresURL == "" || s.redisURL == "" {
		if err := s.startContainers(ctx); err != nil {
			s.err = err
			return
		}
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
	s.template, s.err = s.ensureTemplate(ctx)
}

// startContainers starts whichever server the environment did not name.
func (s *servers) startContainers(ctx context.Context) error {
	provider, err := testcontainers.NewDockerProvider()
	var host string
	if err == nil {
		if err = provider.Health(ctx); err == nil {
			host, err = provider.DaemonHost(ctx)
		}
		_ = provider.Close()
	}
	if err != nil {
		return fmt.Errorf("no server URLs set and no Docker engine for testcontainers: %w", err)
	}
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

// ensureTemplate builds, once per schema and server, a database holding the migrated schema,
// named after a hash of the migration files so that a changed schema gets a new template. An
// advisory lock makes concurrent test binaries wait for each other; the template is built under
// a temporary name and renamed when complete, so a crash never leaves a half-built template.
func (s *servers) ensureTemplate(ctx context.Context) (string, error) {
	sum, err := migrationsHash()
	if err != nil {
		return "", err
	}
	name := "stocksvc_tpl_" + sum[:16]
	conn, err := s.admin.Acquire(ctx)
	if err != nil {
		return "", fmt.Errorf("acquire admin connection: %w", err)
	}
	defer conn.Release()
	const lockID = 0x5707c5 // arbitrary, shared by every stocksvc test binary
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, lockID); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}
	defer func() { _, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, lockID) }()

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	building := name + "_building"
	if _, err := conn.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{building}.Sanitize()+` WITH (FORCE)`); err != nil {
		return "", fmt.Errorf("drop stale template: %w", err)
	}
	if _, err := conn.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	if err := migrations.Up(withDatabase(s.postgresBase, building)); err != nil {
		return "", fmt.Errorf("migrate template: %w", err)
	}
	if _, err := conn.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{building}.Sanitize()+` RENAME TO `+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("publish template: %w", err)
	}
	return name, nil
}

func migrationsHash() (string, error) {
	h := sha256.New()
	err := fs.WalkDir(migrations.Files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(migrations.Files, path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", path, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	// River's migrations come with its module version, not as files here.
	fmt.Fprintf(h, "river\x00%d", migrations.RiverLatest())
	return hex.EncodeToString(h.Sum(nil)), nil
}

// DatabaseURL returns the URL of a new database holding the migrated schema and nothing else.
// The database is dropped when the test ends.
func DatabaseURL(t testing.TB) string {
	t.Helper()
	s := env.get(t)
	ctx := context.Background()
	name := "stocksvc_test_" + randomHex(8)
	if _, err := s.admin.Exec(ctx, `CREATE DATABASE `+pgx.Identifier{name}.Sanitize()+` TEMPLATE `+pgx.Identifier{s.template}.Sanitize()); err != nil {
		t.Fatalf("create test database: %v", err)
	}
	t.Cleanup(func() {
		if _, err := s.admin.Exec(context.Background(), `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database %s: %v", name, err)
		}
	})
	return withDatabase(s.postgresBase, name)
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

// KeyPrefix returns a random Redis key prefix for one test.
func KeyPrefix(t testing.TB) string {
	t.Helper()
	return "stocksvc-test:" + randomHex(6) + ":"
}

// DeleteKeys deletes every key that starts with prefix, and nothing else.
func DeleteKeys(t testing.TB, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, escapeGlob(prefix)+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Errorf("scan test keys: %v", err)
		return
	}
	for _, k := range keys {
		if err := rdb.Unlink(ctx, k).Err(); err != nil {
			t.Errorf("delete test key %s: %v", k, err)
		}
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
