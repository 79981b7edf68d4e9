package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/testenv/redisserver"
)

// Server is a redis-server process of the benchmark's own, on a free loopback port, without
// persistence (package redisserver, which the tests and the load harness use too). Its
// statistics are reset and read by the benchmarks, which is why it must not be anybody else's
// server.
type Server struct {
	srv   *redisserver.Server
	admin *redis.Client // for FLUSHALL, CONFIG RESETSTAT and INFO, outside the measurements
}

// StartServer starts redis-server (found on PATH) in a temporary directory and waits until it
// answers. The caller must Close it.
func StartServer(ctx context.Context) (*Server, error) {
	dir, err := os.MkdirTemp("", "lockbench-redis-")
	if err != nil {
		return nil, fmt.Errorf("temp dir: %w", err)
	}
	srv, err := redisserver.Start(ctx, redisserver.Options{Dir: dir})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return &Server{srv: srv, admin: redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})}, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.srv.Addr() }

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
	_ = s.admin.Close()
	stopErr := s.srv.Stop(5 * time.Second)
	return errors.Join(stopErr, os.RemoveAll(s.srv.Dir()))
}
