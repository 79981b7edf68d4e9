package testenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv/redisserver"
)

// RedisServer is a redis-server process of a test's own, on a loopback port, for tests that
// stop, pause, restart or cluster Redis — which a shared server must never be put through. It
// keeps nothing on disk unless told to, and is killed when the test ends. The process itself
// is package redisserver's, which the load harness and the benchmarks use too.
type RedisServer struct {
	t    testing.TB
	Port int
	srv  *redisserver.Server
}

// StartRedis starts redis-server on a free loopback port with extra arguments (for example
// "--cluster-enabled", "yes"). Without a redis-server binary the test is skipped, or fails
// under STOCKSVC_REQUIRE_INTEGRATION=1.
func StartRedis(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	return startRedisServer(t, redisserver.Options{Dir: t.TempDir(), Args: args})
}

// StartSentinel starts a Redis Sentinel on a free loopback port, its config file made of
// directives, one a line (for example "sentinel monitor mymaster 127.0.0.1 6379 2"). Sentinel
// rewrites that file as it learns the topology; it lives in Dir.
func StartSentinel(t testing.TB, directives ...string) *RedisServer {
	t.Helper()
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(strings.Join(directives, "\n")+"\n"), 0o600); err != nil {
		t.Fatalf("write sentinel config: %v", err)
	}
	return startRedisServer(t, redisserver.Options{Dir: dir, ConfigFile: conf, Args: []string{"--sentinel"}})
}

func startRedisServer(t testing.TB, opts redisserver.Options) *RedisServer {
	t.Helper()
	srv, err := redisserver.Start(context.Background(), opts)
	if errors.Is(err, redisserver.ErrNotInstalled) {
		if required() {
			t.Fatalf("%s is set but redis-server is not installed: %v", EnvRequire, err)
		}
		skips.add("redis-server is not installed")
		t.Skipf("skipping: %v", err)
	}
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(srv.Kill)
	return &RedisServer{t: t, Port: srv.Port(), srv: srv}
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return s.srv.Addr() }

// Client returns a new client of the server, closed when the test ends. Its commands end with
// their contexts, as the service's do, so that a paused server cannot hold a test past them.
func (s *RedisServer) Client() *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	s.t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// NodeClients returns a new client of each server, closed when the test ends, as a service
// gives a Redlock's nodes: commands end with their contexts, and go-redis does not retry them,
// because Redlock's rounds are the retries and a retried command on a node that is down would
// make every round wait the whole node timeout.
func NodeClients(t testing.TB, servers []*RedisServer) []*redis.Client {
	t.Helper()
	clients := make([]*redis.Client, len(servers))
	for i, s := range servers {
		clients[i] = redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = clients[i].Close() })
	}
	return clients
}

// StartRedisNodes starts n independent redis-servers of the test's own: a Redlock's nodes.
func StartRedisNodes(t testing.TB, n int) []*RedisServer {
	t.Helper()
	nodes := make([]*RedisServer, n)
	for i := range nodes {
		nodes[i] = StartRedis(t)
	}
	return nodes
}

// Redlock returns a Redlock over servers with clients of its own (NodeClients), as a replica
// has. The node timeout leaves live nodes room under the race detector on a busy machine: one
// that missed the default 50ms would count as down.
func Redlock(t testing.TB, servers []*RedisServer) *lock.Redlock {
	t.Helper()
	r, err := lock.NewRedlock(NodeClients(t, servers), lock.RedlockOptions{NodeTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatalf("redlock: %v", err)
	}
	return r
}

// Kill ends the server at once (SIGKILL), losing everything in memory.
func (s *RedisServer) Kill() { s.srv.Kill() }

// Restart kills the server and starts a new, empty one on the same port: what a Redis without
// persistence looks like after a crash.
func (s *RedisServer) Restart() {
	s.t.Helper()
	if err := s.srv.Restart(context.Background()); err != nil {
		s.t.Fatalf("restart: %v", err)
	}
}

// Pause stops the process (SIGSTOP): it keeps its connections but answers nothing, and its
// keys' TTLs run on by the wall clock.
func (s *RedisServer) Pause() {
	if err := s.srv.Pause(); err != nil {
		s.t.Fatalf("%v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *RedisServer) Resume() {
	if err := s.srv.Resume(); err != nil {
		s.t.Fatalf("%v", err)
	}
}

// Dir is the server's working directory (its log is redis.log there).
func (s *RedisServer) Dir() string { return s.srv.Dir() }

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := redisserver.FreePort()
	if err != nil {
		t.Fatalf("%v", err)
	}
	return port
}
