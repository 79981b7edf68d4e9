package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv/redisserver"
)

// -redlock N runs the replicas with STOCKSVC_REDIS_MODE=redlock over N redis-servers of the
// run's own, on free loopback ports, which the run's supervisor stops with everything else.
// The first node also keeps the views, as in a deployment.

// redlockNodes are a run's Redlock nodes.
type redlockNodes []*redisserver.Server

// startRedlockNodes starts n empty redis-servers, each with a directory (and log) of its own
// under dir.
func startRedlockNodes(ctx context.Context, sup *supervisor, dir string, n int) (redlockNodes, error) {
	nodes := make(redlockNodes, n)
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

// url is the nodes' REDIS_URL for redlock mode: the first as the host, the others as addr.
func (nodes redlockNodes) url() string {
	addrs := make([]string, len(nodes)-1)
	for i, n := range nodes[1:] {
		addrs[i] = "addr=" + n.Addr()
	}
	return nodes[0].URL() + "?" + strings.Join(addrs, "&")
}

// env is what a replica needs to lock on the nodes.
func (nodes redlockNodes) env() []string {
	return []string{"STOCKSVC_REDIS_MODE=redlock", "REDIS_URL=" + nodes.url()}
}

// restartRedlockNode kills one of the run's Redlock nodes in the middle of purchases, keeps
// it down for a second (the others, a quorum, go on selling), and starts it again empty, as a
// node without persistence comes back from a crash: no locks and no fencing counters, which it
// seeds again from its clock. Locks held elsewhere must stay exclusive and their fencing
// tokens must keep increasing, or Postgres refuses writes (noFenceCatches).
func restartRedlockNode(ctx context.Context, d *drillEnv) error {
	i := d.rng.intN(len(d.redlock))
	node := d.redlock[i]
	d.primeVictim(ctx, d.replicas[d.victim])
	d.event("SIGKILL redlock node %d of %d (%s)", i+1, len(d.redlock), node.Addr())
	node.Kill()
	if err := sleep(ctx, time.Second); err != nil {
		return err
	}
	if err := node.Start(ctx); err != nil {
		return err
	}
	d.event("redlock node %d started again, empty", i+1)
	d.note("redlock node %d of %d restarted empty mid-sale", i+1, len(d.redlock))
	return nil
}

// noFenceCatches: the fence refused no write. With no lock lost (a minority of nodes down
// leaves every holder its quorum), a refused write would mean a holder's fencing token was
// below one issued earlier: Redlock's tokens went backwards.
func noFenceCatches(d *drillEnv, _ []*op, _ availability) (failed, notes []string) {
	n := d.catches["fence"]
	if n > 0 {
		failed = append(failed, fmt.Sprintf("the fence refused %.0f writes: a fencing token went backwards", n))
	}
	return failed, []string{fmt.Sprintf("fence catches: %.0f", n)}
}
