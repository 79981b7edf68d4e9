// Package cluster is the one way the load harness brings a deployment up on loopback: a
// database of the run's own (on the shared Postgres server, on a Postgres cluster of the run's
// own that a drill may crash, or on a Patroni topology of its own: patroni.go), Redis (a key prefix on the shared server, a redis-server
// of the run's own, or Redlock nodes), N stocksvc replicas, and HAProxy in front,
// health-checking /readyz. Every process it starts belongs to a Supervisor that stops them all,
// together, on every way out.
//
// It also finds the tools the harness drives (k6, haproxy, wrk) and builds the service.
package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv/redisserver"
)

// Config describes a deployment. Fields without a documented default are required.
type Config struct {
	Dir      string // the run's directory: logs, HAProxy's config, the servers of its own
	Binary   string // the stocksvc binary
	HAProxy  string // the haproxy binary
	Replicas int

	// ServerURL is the Postgres server the run's database is created on, unless OwnPostgres.
	ServerURL string
	Database  string // the run's database, created by Start
	// RedisURL is the shared Redis, where the run keeps its keys under Prefix, unless
	// OwnRedis or Redlock.
	RedisURL string
	Prefix   string
	Token    string // the replicas' STOCKSVC_ADMIN_TOKEN

	OwnPostgres bool // a Postgres cluster of the run's own (initdb), for faults that crash it
	OwnRedis    bool // a redis-server of the run's own, for faults that stop it
	Redlock     int  // replicas in STOCKSVC_REDIS_MODE=redlock over this many nodes of the run's own (0: none)
	DebugPorts  bool // each replica gets STOCKSVC_DEBUG_ADDR (pprof), on a port of its own
	Direct      bool // no balancer: clients talk to the replicas (tests)
	Keep        bool // Close keeps the run's database

	// PostgresHA runs the database on a Patroni topology of the run's own (patroni.go): a
	// primary and two synchronous-capable standbys, reached with a multi-host URL.
	PostgresHA bool
	Patroni    PatroniTiming // PostgresHA's timing (default DefaultPatroniTiming)
	// PatroniFsync turns fsync on on PostgresHA's nodes, for benchmarks (the drills run
	// without: they kill processes, not machines).
	PatroniFsync bool
	// RedisSentinel runs the replicas in STOCKSVC_REDIS_MODE=sentinel over a master, a
	// replica and three sentinels of the run's own (sentinel.go).
	RedisSentinel bool
	// Identity, when set, makes the replicas verify customer tokens of its issuer
	// (STOCKSVC_CUSTOMER_AUTH=token); nil has them take the body's customer_id (body), for the
	// loads whose clients carry no token (wrk's).
	Identity *Identity

	// Env, when set, returns replica i's settings beyond the cluster's own (address, database,
	// Redis, prefix, token, log level). An entry overrides one of the cluster's: the last
	// value of a variable wins.
	Env func(i int) []string
	// BeforeReplicas, when set, runs once the servers and the database are up and before any
	// replica starts: a drill puts its proxies between a replica and the servers there.
	BeforeReplicas func(c *Cluster) error
	// Warnings receives the problems Close meets, which end nothing (default: discarded).
	Warnings io.Writer
}

// Cluster is a running deployment.
type Cluster struct {
	Config
	Sup         *Supervisor
	DatabaseURL string              // the run's database
	RedisURL    string              // what the replicas are given as REDIS_URL
	Postgres    *Postgres           // the run's own (OwnPostgres), or nil
	HA          *PostgresHA         // the run's own Patroni topology (PostgresHA), or nil
	Sentinel    *RedisSentinel      // the run's own Redis under Sentinel (RedisSentinel), or nil
	Redis       *redisserver.Server // the run's own (OwnRedis), or nil
	Redlock     RedlockNodes        // the run's own Redlock nodes, or nil
	Front       int                 // the balancer's port
	Stats       int                 // the balancer's statistics port
	Replicas    []*Replica
	Balancer    *Proc // nil when Direct
}

// Replica is one stocksvc process slot; a restart starts a new process on the same port.
type Replica struct {
	Name      string
	Port      int
	DebugPort int // 0 without Config.DebugPorts
	Env       []string
	Proc      *Proc
}

// Base is the replica's own URL, bypassing the balancer.
func (r *Replica) Base() string { return "http://127.0.0.1:" + strconv.Itoa(r.Port) }

// Start brings the deployment up: the servers of the run's own, the database, the replicas
// (each ready on /readyz) and the balancer (ready too). When it fails, everything it started
// is stopped and the database dropped (unless Keep).
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg.Warnings == nil {
		cfg.Warnings = io.Discard
	}
	c := &Cluster{Config: cfg, Sup: &Supervisor{}}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	if err := os.MkdirAll(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", cfg.Dir, err)
	}
	if cfg.OwnPostgres {
		if c.Postgres, err = startPostgres(ctx, c.Sup, cfg.Dir); err != nil {
			return nil, err
		}
		c.ServerURL = c.Postgres.URL("postgres")
	}
	if cfg.PostgresHA {
		timing := cfg.Patroni
		if timing == (PatroniTiming{}) {
			timing = DefaultPatroniTiming
		}
		if c.HA, err = startPostgresHA(ctx, cfg.Dir, timing, cfg.PatroniFsync, cfg.Warnings); err != nil {
			return nil, err
		}
		c.ServerURL = c.HA.URL("postgres")
	}
	if c.DatabaseURL, err = CreateDatabase(ctx, c.ServerURL, cfg.Database); err != nil {
		return nil, err
	}
	c.RedisURL = cfg.RedisURL
	if cfg.OwnRedis {
		if c.Redis, err = startRedis(ctx, c.Sup, cfg.Dir); err != nil {
			return nil, err
		}
		c.RedisURL = c.Redis.URL()
	}
	if cfg.Redlock > 0 {
		if c.Redlock, err = startRedlockNodes(ctx, c.Sup, cfg.Dir, cfg.Redlock); err != nil {
			return nil, err
		}
		c.RedisURL = c.Redlock.URL()
	}
	if cfg.RedisSentinel {
		if c.Sentinel, err = startSentinel(ctx, c.Sup, cfg.Dir); err != nil {
			return nil, err
		}
		c.RedisURL = c.Sentinel.URL()
	}
	if cfg.BeforeReplicas != nil {
		if err := cfg.BeforeReplicas(c); err != nil {
			return nil, err
		}
	}

	n := cfg.Replicas
	ports, err := FreePorts(2*n + 2)
	if err != nil {
		return nil, err
	}
	c.Front, c.Stats = ports[2*n], ports[2*n+1]
	for i := range n {
		r := &Replica{Name: fmt.Sprintf("r%d", i+1), Port: ports[i]}
		r.Env = []string{
			"STOCKSVC_ADDR=127.0.0.1:" + strconv.Itoa(r.Port),
			"DATABASE_URL=" + c.DatabaseURL,
			"REDIS_URL=" + c.RedisURL,
			"STOCKSVC_REDIS_PREFIX=" + cfg.Prefix,
			"STOCKSVC_ADMIN_TOKEN=" + cfg.Token,
			"STOCKSVC_LOG_LEVEL=warn",
			// The service verifies customer tokens by default (issue #20); a deployment
			// without an Identity serves clients that send none.
			"STOCKSVC_CUSTOMER_AUTH=body",
		}
		if cfg.Identity != nil {
			r.Env = append(r.Env, cfg.Identity.Env()...)
		}
		if cfg.DebugPorts {
			r.DebugPort = ports[n+i]
			r.Env = append(r.Env, "STOCKSVC_DEBUG_ADDR=127.0.0.1:"+strconv.Itoa(r.DebugPort))
		}
		if c.Redlock != nil {
			r.Env = append(r.Env, "STOCKSVC_REDIS_MODE=redlock") // REDIS_URL names the nodes
		}
		if c.Sentinel != nil {
			r.Env = append(r.Env, "STOCKSVC_REDIS_MODE=sentinel") // REDIS_URL names the sentinels
		}
		if cfg.Env != nil {
			r.Env = append(r.Env, cfg.Env(i)...)
		}
		c.Replicas = append(c.Replicas, r)
		if err := c.StartReplica(r); err != nil {
			return nil, err
		}
	}
	for _, r := range c.Replicas {
		if err := c.WaitReplica(ctx, r); err != nil {
			return nil, err
		}
	}
	if cfg.Direct {
		return c, nil
	}
	if c.Balancer, err = startHAProxy(c.Sup, cfg.HAProxy, cfg.Dir, c.Front, c.Stats, c.ReplicaPorts()); err != nil {
		return nil, err
	}
	if err := WaitReady(ctx, c.Balancer, fmt.Sprintf("http://127.0.0.1:%d/readyz", c.Front), 30*time.Second); err != nil {
		return nil, err
	}
	return c, nil
}

// StartReplica starts r's process (again, after it was stopped or killed), with r's
// environment, its output in <dir>/<name>.log.
func (c *Cluster) StartReplica(r *Replica) error {
	p, err := c.Sup.Start(r.Name, filepath.Join(c.Dir, r.Name+".log"), r.Env, c.Binary)
	if err != nil {
		return err
	}
	r.Proc = p
	return nil
}

// WaitReplica waits until r answers 200 on /readyz, for at most a minute.
func (c *Cluster) WaitReplica(ctx context.Context, r *Replica) error {
	return WaitReady(ctx, r.Proc, r.Base()+"/readyz", 60*time.Second)
}

// ReplicaPorts are the replicas' ports, in order.
func (c *Cluster) ReplicaPorts() []int {
	ports := make([]int, len(c.Replicas))
	for i, r := range c.Replicas {
		ports[i] = r.Port
	}
	return ports
}

// FrontURL is the balancer's URL.
func (c *Cluster) FrontURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.Front) }

// Stop stops every process of the deployment (replicas, balancer, servers of the run's own but
// Postgres, and whatever else was started under Sup), together, each with 20 s to end. It
// returns what did not end in time; stopping twice is harmless.
func (c *Cluster) Stop() error { return c.Sup.StopAll(20 * time.Second) }

// Close stops the deployment (Stop) and removes what it leaves: the run's database (unless
// Keep, or it lived on the run's own Postgres, which goes with it), and the run's keys on the
// shared Redis. Problems are written to Warnings.
func (c *Cluster) Close() {
	if err := c.Stop(); err != nil {
		fmt.Fprintf(c.Warnings, "  warning: %v\n", err)
	}
	if c.DatabaseURL != "" && !c.Keep && c.Postgres == nil && c.HA == nil {
		if err := DropDatabase(c.ServerURL, c.Database); err != nil {
			fmt.Fprintf(c.Warnings, "  warning: %v\n", err)
		}
	}
	if c.Redis == nil && c.Redlock == nil && c.Sentinel == nil && c.Config.RedisURL != "" {
		CleanRedisPrefix(c.Config.RedisURL, c.Prefix)
	}
	if c.Postgres != nil {
		c.Postgres.stop()
	}
	if c.HA != nil {
		c.HA.stop(agentGrace)
	}
}

// errNoDebugPort is returned by Profile when the cluster was started without DebugPorts.
var errNoDebugPort = errors.New("cluster: the replica has no debug port (Config.DebugPorts)")

// Profile records a CPU profile of replica i for d into <dir>/<file>, from its debug
// listener. It returns errNoDebugPort without Config.DebugPorts.
func (c *Cluster) Profile(ctx context.Context, i int, d time.Duration, file string) error {
	if c.Replicas[i].DebugPort == 0 {
		return errNoDebugPort
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", c.Replicas[i].DebugPort, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: status %d", url, res.StatusCode)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, file), b, 0o644)
}

// CreateProduct creates a product through the balancer and returns its id.
func (c *Cluster) CreateProduct(ctx context.Context, sku string, units int64) (int64, error) {
	var p struct {
		ID int64 `json:"id"`
	}
	err := c.CreateProductWith(ctx, map[string]any{"sku": sku, "name": sku, "stock": units}, &p)
	return p.ID, err
}

// CreateProductWith creates a product from body (sku, name, stock, and any of the sale rules)
// through the balancer, as an admin, and decodes the product answered into created.
func (c *Cluster) CreateProductWith(ctx context.Context, body map[string]any, created any) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.FrontURL()+"/v1/products", bytes.NewReader(raw))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+c.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("create product: %w", err)
	}
	defer res.Body.Close()
	if err := json.NewDecoder(res.Body).Decode(created); err != nil || res.StatusCode != http.StatusCreated {
		return fmt.Errorf("create product: status %d (%v)", res.StatusCode, err)
	}
	return nil
}
