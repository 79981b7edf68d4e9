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

// A Redis under Sentinel of the run's own: a master, one replica and three sentinels (quorum
// 2) on free loopback ports, which the replicas reach in STOCKSVC_REDIS_MODE=sentinel. None
// persists anything, like the run's other redis-servers; the supervisor stops them all.

// SentinelMaster is the name the sentinels monitor the master under.
const SentinelMaster = "mymaster"

// RedisSentinel is the run's Sentinel deployment. Master and Replica are the servers as
// started: after a failover the sentinels' master is the other one.
type RedisSentinel struct {
	Master, Replica *redisserver.Server
	Sentinels       []*redisserver.Server
}

// startSentinel starts the deployment in dir and waits until every sentinel knows the master
// and its replica.
func startSentinel(ctx context.Context, sup *Supervisor, dir string) (*RedisSentinel, error) {
	node := func(name string, opts redisserver.Options) (*redisserver.Server, error) {
		opts.Dir = filepath.Join(dir, name)
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, err
		}
		srv, err := redisserver.Start(ctx, opts)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		sup.Adopt(srv.Stop)
		return srv, nil
	}
	g := &RedisSentinel{}
	var err error
	if g.Master, err = node("redis-master", redisserver.Options{}); err != nil {
		return nil, err
	}
	if g.Replica, err = node("redis-replica", redisserver.Options{Args: []string{"--replicaof", "127.0.0.1", strconv.Itoa(g.Master.Port())}}); err != nil {
		return nil, err
	}
	for i := range 3 {
		name := "sentinel-" + strconv.Itoa(i+1)
		conf := filepath.Join(dir, name+".conf")
		// A master that answers nothing for a second is down; a failover that has not ended
		// within 5 s may be tried again.
		directives := strings.Join([]string{
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", SentinelMaster, g.Master.Port()),
			"sentinel down-after-milliseconds " + SentinelMaster + " 1000",
			"sentinel failover-timeout " + SentinelMaster + " 5000",
		}, "\n") + "\n"
		if err := os.WriteFile(conf, []byte(directives), 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", conf, err)
		}
		s, err := node(name, redisserver.Options{ConfigFile: conf, Args: []string{"--sentinel"}})
		if err != nil {
			return nil, err
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	deadline := time.Now().Add(20 * time.Second)
	for _, s := range g.Sentinels {
		for {
			master, replicas, err := g.ask(ctx, s)
			if err == nil && master == g.Master.Addr() && replicas == 1 {
				break
			}
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("sentinel %s does not know the master and its replica (master %q, %d replicas, %v)", s.Addr(), master, replicas, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	return g, nil
}

// ask asks sentinel s for the master's address and how many replicas it knows.
func (g *RedisSentinel) ask(ctx context.Context, s *redisserver.Server) (string, int, error) {
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.Addr(), DialTimeout: time.Second, ReadTimeout: time.Second})
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, SentinelMaster).Result()
	if err != nil {
		return "", 0, err
	}
	replicas, err := sc.Replicas(ctx, SentinelMaster).Result()
	if err != nil {
		return "", 0, err
	}
	return strings.Join(addr, ":"), len(replicas), nil
}

// MasterAddr is the master's address as the first sentinel that answers says.
func (g *RedisSentinel) MasterAddr(ctx context.Context) (string, error) {
	var last error
	for _, s := range g.Sentinels {
		addr, _, err := g.ask(ctx, s)
		if err == nil {
			return addr, nil
		}
		last = err
	}
	return "", fmt.Errorf("no sentinel answered: %w", last)
}

// URL is the replicas' REDIS_URL: the sentinels, and the master's name.
func (g *RedisSentinel) URL() string {
	addrs := make([]string, len(g.Sentinels)-1)
	for i, s := range g.Sentinels[1:] {
		addrs[i] = "addr=" + s.Addr()
	}
	return "redis://" + g.Sentinels[0].Addr() + "?" + strings.Join(addrs, "&") + "&master_name=" + SentinelMaster
}
