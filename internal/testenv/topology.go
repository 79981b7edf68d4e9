package testenv

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of masters started by a test, each a RedisServer of its own.
type Cluster struct {
	Nodes []*RedisServer
}

// StartCluster starts masters cluster-enabled servers, joins them with redis-cli and waits
// until every node reports the cluster healthy. Each node's cluster bus gets a free port of its
// own: the default, port+10000, may be taken or beyond 65535.
func StartCluster(t testing.TB, masters int) *Cluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if required() {
			t.Fatalf("%s is set but redis-cli, needed to create a cluster, is not installed: %v", EnvRequire, err)
		}
		skips.add("redis-cli is not installed")
		t.Skipf("skipping: redis-cli is not installed: %v", err)
	}
	cl := &Cluster{}
	create := []string{"--cluster", "create"}
	for range masters {
		n := StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-port", strconv.Itoa(FreePort(t)))
		cl.Nodes = append(cl.Nodes, n)
		create = append(create, n.Addr())
	}
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "redis-cli", create...).CombinedOutput(); err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}
	known := "cluster_known_nodes:" + strconv.Itoa(masters)
	for _, n := range cl.Nodes {
		rdb := n.Client()
		Poll(t, 30*time.Second, "cluster_state:ok on "+n.Addr(), func() bool {
			info, err := rdb.ClusterInfo(ctx).Result()
			return err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, known)
		})
	}
	return cl
}

// Addrs returns the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// SentinelGroup is one master, one replica and three sentinels started by a test.
type SentinelGroup struct {
	MasterName string
	Master     *RedisServer
	Replica    *RedisServer
	Sentinels  []*RedisServer
}

// StartSentinelGroup starts the group and waits until every sentinel knows the master and the
// replica.
func StartSentinelGroup(t testing.TB) *SentinelGroup {
	t.Helper()
	g := &SentinelGroup{MasterName: "mymaster", Master: StartRedis(t)}
	g.Replica = StartRedis(t, "--replicaof", "127.0.0.1", strconv.Itoa(g.Master.Port))
	for range 3 {
		g.Sentinels = append(g.Sentinels, StartSentinel(t,
			"sentinel monitor "+g.MasterName+" 127.0.0.1 "+strconv.Itoa(g.Master.Port)+" 2",
			"sentinel down-after-milliseconds "+g.MasterName+" 1000",
			"sentinel failover-timeout "+g.MasterName+" 5000"))
	}
	ctx := context.Background()
	for _, sn := range g.Sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		Poll(t, 10*time.Second, "sentinel "+sn.Addr()+" knows the master and the replica", func() bool {
			addr, err := sc.GetMasterAddrByName(ctx, g.MasterName).Result()
			if err != nil || strings.Join(addr, ":") != g.Master.Addr() {
				return false
			}
			replicas, err := sc.Replicas(ctx, g.MasterName).Result()
			return err == nil && len(replicas) == 1
		})
		_ = sc.Close()
	}
	return g
}

// SentinelAddrs returns the sentinels' host:port addresses.
func (g *SentinelGroup) SentinelAddrs() []string {
	addrs := make([]string, len(g.Sentinels))
	for i, n := range g.Sentinels {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Poll waits until cond holds, checking every 10 ms, and fails the test after limit. It is for
// conditions a test can only observe, never a stand-in for synchronising with its own code.
func Poll(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
