package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/testenv/redisserver"
)

// startRedis starts a redis-server of the run's own in dir (package redisserver: no
// persistence, so a restart comes back empty, as a crashed cache without disks would), which
// sup stops with everything else.
func startRedis(ctx context.Context, sup *Supervisor, dir string) (*redisserver.Server, error) {
	r, err := redisserver.Start(ctx, redisserver.Options{Dir: dir})
	if err != nil {
		return nil, err
	}
	sup.Adopt(r.Stop)
	return r, nil
}

// -redlock N runs the replicas with STOCKSVC_REDIS_MODE=redlock over N redis-servers of the
// run's own, on free loopback ports, which the run's supervisor stops with everything else.
// The first node also keeps the views, as in a deployment.

// RedlockNodes are a run's Redlock nodes.
type RedlockNodes []*redisserver.Server

// startRedlockNodes starts n empty redis-servers, each with a directory (and log) of its own
// under dir.
func startRedlockNodes(ctx context.Context, sup *Supervisor, dir string, n int) (RedlockNodes, error) {
	nodes := make(RedlockNodes, n)
	for i := range nodes {
		nodeDir := filepath.Join(dir, "redis-node-"+strconv.Itoa(i+1))
		if err := os.MkdirAll(nodeDir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", nodeDir, err)
		}
		var err error
		if nodes[i], err = startRedis(ctx, sup, nodeDir); err != nil {
			return nil, fmt.Errorf("redlock node %d: %w", i+1, err)
		}
	}
	return nodes, nil
}

// URL is the nodes' REDIS_URL for redlock mode: the first as the host, the others as addr.
func (nodes RedlockNodes) URL() string {
	addrs := make([]string, len(nodes)-1)
	for i, n := range nodes[1:] {
		addrs[i] = "addr=" + n.Addr()
	}
	return nodes[0].URL() + "?" + strings.Join(addrs, "&")
}

// CleanRedisPrefix deletes the keys under prefix on the Redis at redisURL: a run's locks,
// fencing counters and claims, and nothing else.
func CleanRedisPrefix(redisURL, prefix string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Unlink(ctx, iter.Val())
	}
}
