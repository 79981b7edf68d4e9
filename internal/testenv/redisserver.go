package testenv

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
)

// RedisServer is a redis-server process of a test's own, on a loopback port, for tests that
// stop, pause, restart or cluster Redis — which a shared server must never be put through. It
// keeps nothing on disk unless told to, and is killed when the test ends.
type RedisServer struct {
	t    testing.TB
	Port int
	dir  string
	conf string // config file given before the arguments, for Sentinel
	args []string
	cmd  *exec.Cmd
	done chan struct{}
}

// StartRedis starts redis-server on a free loopback port with extra arguments (for example
// "--cluster-enabled", "yes"). Without a redis-server binary the test is skipped, or fails
// under STOCKSVC_REQUIRE_INTEGRATION=1.
func StartRedis(t testing.TB, args ...string) *RedisServer {
	t.Helper()
	s := newRedisServer(t, args)
	s.start()
	t.Cleanup(s.Kill)
	return s
}

// StartSentinel starts a Redis Sentinel on a free loopback port, its config file made of
// directives, one a line (for example "sentinel monitor mymaster 127.0.0.1 6379 2"). Sentinel
// rewrites that file as it learns the topology; it lives in Dir.
func StartSentinel(t testing.TB, directives ...string) *RedisServer {
	t.Helper()
	s := newRedisServer(t, []string{"--sentinel"})
	s.conf = filepath.Join(s.dir, "sentinel.conf")
	if err := os.WriteFile(s.conf, []byte(strings.Join(directives, "\n")+"\n"), 0o600); err != nil {
		t.Fatalf("write sentinel config: %v", err)
	}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

func newRedisServer(t testing.TB, args []string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if required() {
			t.Fatalf("%s is set but redis-server is not installed: %v", EnvRequire, err)
		}
		skips.add("redis-server is not installed")
		t.Skipf("skipping: redis-server is not installed: %v", err)
	}
	return &RedisServer{t: t, Port: FreePort(t), dir: t.TempDir(), args: args}
}

// Addr is the server's host:port.
func (s *RedisServer) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

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

func (s *RedisServer) start() {
	s.t.Helper()
	var argv []string
	if s.conf != "" {
		argv = append(argv, s.conf) // redis-server wants its config file first
	}
	argv = append(argv,
		"--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"), "--daemonize", "no")
	argv = append(argv, s.args...)
	cmd := exec.Command("redis-server", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		_ = cmd.Wait()
		close(done)
	}(s.done)
	s.waitUp()
}

// waitUp waits until the server answers PING.
func (s *RedisServer) waitUp() {
	s.t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := rdb.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.t.Fatalf("redis-server on %s exited at start: %s", s.Addr(), log)
		default:
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s not answering: %v", s.Addr(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Kill ends the server at once (SIGKILL), losing everything in memory.
func (s *RedisServer) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a paused process must be able to die
	_ = s.cmd.Process.Kill()
	<-s.done
}

// Restart kills the server and starts a new, empty one on the same port: what a Redis without
// persistence looks like after a crash.
func (s *RedisServer) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

// Pause stops the process (SIGSTOP): it keeps its connections but answers nothing, and its
// keys' TTLs run on by the wall clock.
func (s *RedisServer) Pause() {
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		s.t.Fatalf("pause redis-server: %v", err)
	}
}

// Resume continues a paused server (SIGCONT).
func (s *RedisServer) Resume() {
	if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		s.t.Fatalf("resume redis-server: %v", err)
	}
}

// Dir is the server's working directory (its log is redis.log there).
func (s *RedisServer) Dir() string { return s.dir }

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
