package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is a redis-server process of the benchmark's own, on a free loopback port, without
// persistence. Its statistics are reset and read by the benchmarks, which is why it must not be
// anybody else's server.
type Server struct {
	addr  string
	dir   string
	cmd   *exec.Cmd
	done  chan struct{} // closed when the process has exited
	admin *redis.Client // for FLUSHALL, CONFIG RESETSTAT and INFO, outside the measurements
}

// StartServer starts redis-server (found on PATH) in a temporary directory and waits until it
// answers. The caller must Close it.
func StartServer(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, fmt.Errorf("find redis-server: %w", err)
	}
	dir, err := os.MkdirTemp("", "lockbench-redis-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	var last error
	for range 3 { // the free port can be taken between finding and binding it
		port, err := freePort()
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
		s, err := startOn(ctx, bin, dir, port)
		if err == nil {
			return s, nil
		}
		last = err
	}
	_ = os.RemoveAll(dir)
	return nil, last
}

func startOn(ctx context.Context, bin, dir string, port int) (*Server, error) {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"), "--daemonize", "no")
	// Should the benchmark die without closing the server, the kernel ends it too.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start redis-server: %w", err)
	}
	s := &Server{addr: addr, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	s.admin = redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	deadline := time.Now().Add(10 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := s.admin.Ping(pctx).Err()
		cancel()
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			_ = s.admin.Close()
			return nil, fmt.Errorf("redis-server on %s exited at start: %s", addr, log)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.kill()
			return nil, fmt.Errorf("redis-server on %s not answering: %w", addr, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.addr }

// Version returns the server's redis_version.
func (s *Server) Version(ctx context.Context) (string, error) {
	info, err := s.admin.Info(ctx, "server").Result()
	if err != nil {
		return "", fmt.Errorf("info server: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:"); ok {
			return v, nil
		}
	}
	return "", errors.New("info server: no redis_version")
}

// Reset empties the server and zeroes its command statistics, so that the next
// CommandStats counts only what ran in between.
func (s *Server) Reset(ctx context.Context) error {
	if err := s.admin.FlushAll(ctx).Err(); err != nil {
		return fmt.Errorf("flushall: %w", err)
	}
	return s.ResetStats(ctx)
}

// ResetStats zeroes the server's command statistics (CONFIG RESETSTAT), keeping its data.
func (s *Server) ResetStats(ctx context.Context) error {
	if err := s.admin.ConfigResetStat(ctx).Err(); err != nil {
		return fmt.Errorf("config resetstat: %w", err)
	}
	return nil
}

// notLockTraffic are the commands CommandStats leaves out: the statistics calls themselves and
// the handshake go-redis sends on every new connection (HELLO, CLIENT SETINFO), which would
// otherwise charge a library for the size of its connection pool rather than for its locking.
var notLockTraffic = map[string]bool{"info": true, "config": true, "hello": true, "client": true}

// CommandStat is what INFO commandstats says of one command.
type CommandStat struct {
	Calls int64
	// Usec is the time Redis spent running the command. A script's EVALSHA includes the time
	// of the commands it ran, which report their own time as well.
	Usec int64
}

// CommandStats returns the statistics per command since the last reset, from INFO
// commandstats. Commands that Lua scripts run count, as Redis counts them, beside the EVALSHA
// that ran the script. The statistics and handshake commands are left out.
func (s *Server) CommandStats(ctx context.Context) (map[string]CommandStat, error) {
	info, err := s.admin.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("info commandstats: %w", err)
	}
	return parseCommandStats(info, notLockTraffic)
}

// parseCommandStats reads lines like "cmdstat_set:calls=3,usec=10,...". Subcommands appear as
// "cmdstat_client|setinfo"; they are counted under their parent command.
func parseCommandStats(info string, skip map[string]bool) (map[string]CommandStat, error) {
	stats := map[string]CommandStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		rest, ok := strings.CutPrefix(line, "cmdstat_")
		if !ok {
			continue
		}
		name, fields, ok := strings.Cut(rest, ":")
		if !ok {
			return nil, fmt.Errorf("commandstats line %q", line)
		}
		parent, _, _ := strings.Cut(name, "|")
		if skip[parent] {
			continue
		}
		st := stats[parent]
		for f := range strings.SplitSeq(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			if k != "calls" && k != "usec" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("commandstats line %q: %w", line, err)
			}
			if k == "calls" {
				st.Calls += n
			} else {
				st.Usec += n
			}
		}
		stats[parent] = st
	}
	return stats, sc.Err()
}

// Close shuts the server down and removes its directory.
func (s *Server) Close() error {
	s.kill()
	return os.RemoveAll(s.dir)
}

func (s *Server) kill() {
	_ = s.admin.Close()
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}
