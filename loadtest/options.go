package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/benchmarks"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/faults"
	"github.com/stocksvc/stocksvc/loadtest/opening"
	"github.com/stocksvc/stocksvc/loadtest/sale"
)

// The command line is parsed once, into flagValues, and then cut into what each part reads:
// env.ClusterOptions, which every mode's deployment shares, and one options struct per mode. A
// mode's code sees its own struct and the cluster's, nothing else.

// mode is what one invocation runs.
type mode int

const (
	modeSale mode = iota
	modeCompare
	modeThroughput
	modeCache
	modeAsync
	modeFlood
	modeReplays
	modeDrills
	modeRecheck
	modeOpening
	modeHolds
)

// options is the parsed command line.
type options struct {
	mode    mode
	out     string // the invocation's directory
	k6      string // the k6 binary given, if any
	script  string // the k6 script
	cluster env.ClusterOptions

	sale       sale.Options
	throughput benchmarks.ThroughputOptions
	cache      benchmarks.CacheOptions
	async      faults.AsyncOptions
	drills     faults.DrillOptions
	flood      benchmarks.FloodOptions
	replays    benchmarks.ReplayOptions
	opening    opening.Options
	holds      faults.HoldsOptions
}

// flagValues holds every flag as parsed; parseOptions cuts it into options.
type flagValues struct {
	replicas        int
	stock           int
	rate            int
	duration        time.Duration
	vus             int
	raceStock       int
	scenarios       string
	defense         string
	lockRetry       string
	lockMaxRetries  int
	lockWait        time.Duration
	killAfter       time.Duration
	compare         bool
	throughput      bool
	cache           bool
	async           bool
	asyncBaseline   bool
	pauseAfter      time.Duration
	pauseFor        time.Duration
	rounds          int
	stampedeRounds  int
	stampedeReaders int
	closedOnly      bool
	postgresHA      bool
	reference       bool
	clients         int
	pgbenchClients  int
	databaseURL     string
	redisURL        string
	out             string
	keep            bool
	k6              string
	script          string
	fault           string
	runs            int
	seed            uint64
	drillRate       float64
	lockTTL         time.Duration
	clientTimeout   time.Duration
	checkTimeout    time.Duration
	readSlack       time.Duration
	looseSoldOut    bool
	rules           bool
	recheck         string
	redlock         int
	flood           benchmarks.FloodOptions
	replays         benchmarks.ReplayOptions
	openingOn       bool
	opening         opening.Options
	holds           bool
	holdFor         time.Duration
	pay             float64
	cancel          float64
	customerAuth    string
}

func parseOptions(args []string, usage io.Writer) (options, error) {
	var o flagValues
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.IntVar(&o.replicas, "replicas", 3, "stocksvc replicas behind the balancer")
	fs.IntVar(&o.stock, "stock", 500, "units of the hot product (and of the cart product)")
	fs.IntVar(&o.rate, "rate", 200, "peak order arrivals per second of the rush")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "length of the load")
	fs.IntVar(&o.vus, "vus", 100, "k6 virtual users pre-allocated for the rush")
	fs.IntVar(&o.raceStock, "race-stock", 20, "units of the exact-race product (ten buyers per unit)")
	fs.StringVar(&o.scenarios, "scenarios", "rush,carts,retries,race", "k6 scenarios to run")
	fs.StringVar(&o.customerAuth, "customer-auth", "token", "how the sale's (and -compare's) orders name their customer: token (each k6 VU sends a customer token the harness minted, which the replicas verify, as in production) or body (the order's customer_id, unverified)")
	fs.StringVar(&o.defense, "defense", env.DefaultDefense, "STOCKSVC_DEFENSE of the replicas (anything else is a demonstration)")
	fs.StringVar(&o.lockRetry, "lock-retry", "wait", "STOCKSVC_LOCK_RETRY of the replicas")
	fs.IntVar(&o.lockMaxRetries, "lock-max-retries", 0, "STOCKSVC_LOCK_MAX_RETRIES of the replicas")
	fs.DurationVar(&o.lockWait, "lock-wait", 2*time.Second, "STOCKSVC_LOCK_WAIT of the replicas")
	fs.DurationVar(&o.killAfter, "kill-after", 0, "SIGKILL one replica this long into the load (0: never)")
	fs.BoolVar(&o.compare, "compare", false, "compare the default path, polling the lock, the seeds' naive retry policy, the guard alone and a bare pgbench UPDATE")
	fs.BoolVar(&o.throughput, "throughput", false, "benchmark: confirmed purchases/s of one hot product in a closed loop, against pgbench in the same run; then latency at 80% and 2× of that peak")
	fs.IntVar(&o.clients, "clients", 128, "closed-loop clients in -throughput, and of each round in -cache")
	fs.BoolVar(&o.cache, "cache", false, "benchmark: sold-out refusals and product reads during a sale against GET /healthz, in alternating rounds of -duration; then view rebuild stampedes")
	fs.BoolVar(&o.async, "async", false, "the asynchronous sale: every order Prefer: respond-async through the balancer, a replica SIGKILLed at -kill-after and restarted; every accepted order must be decided, first-fit in arrival order, none twice")
	fs.BoolVar(&o.asyncBaseline, "async-baseline", false, "in -async, first send the same load without the preference (on another product, no fault) and compare latencies")
	fs.DurationVar(&o.pauseAfter, "pause-after", 0, "in -async, SIGSTOP the replica draining the product's line this long into the load (0: never)")
	fs.DurationVar(&o.pauseFor, "pause-for", 20*time.Second, "in -async, how long -pause-after pauses it: past the line lock's lease (15 s), so another replica takes the line over")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of each load in -cache and -throughput -reference (medians are reported)")
	fs.IntVar(&o.stampedeRounds, "stampede-rounds", 10, "stampedes in -cache (0: none)")
	fs.IntVar(&o.stampedeReaders, "stampede-readers", 500, "reads released at once in each stampede of -cache")
	fs.BoolVar(&o.closedOnly, "closed-only", false, "in -throughput, only the closed loop (no open-loop phases)")
	fs.BoolVar(&o.postgresHA, "postgres-ha", false, "in -throughput, the deployment and pgbench on a Patroni topology of the run's own with a synchronous standby (patroni and etcd-server packages)")
	fs.BoolVar(&o.reference, "reference", false, "in -throughput, the closed loop as -rounds rounds each of the service, the Redis pre-deduction reference (issue #24) and GET /healthz, in turn, with ratios")
	fs.IntVar(&o.pgbenchClients, "pgbench-clients", 8, "pgbench clients in -compare and -throughput")
	fs.StringVar(&o.databaseURL, "database-url", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "Postgres server to create the run's database on")
	fs.StringVar(&o.redisURL, "redis-url", "redis://127.0.0.1:6379/0", "Redis (the run uses a key prefix of its own and deletes it afterwards)")
	fs.StringVar(&o.out, "out", "", "directory for reports and logs (default loadtest/out/<time> in the repository)")
	fs.BoolVar(&o.keep, "keep", false, "keep the run's database for inspection")
	fs.StringVar(&o.k6, "k6", "", "k6 binary (default: k6 "+cluster.K6Version+" on PATH or in GOPATH/bin, installed if missing)")
	fs.StringVar(&o.script, "script", "", "the k6 script (default loadtest/flashsale.js in the repository)")
	fs.StringVar(&o.fault, "fault", "", "run fault drills instead of the k6 sale: a comma-separated list of scenarios, or all (see docs/reliability.md)")
	fs.IntVar(&o.runs, "runs", 1, "runs of each fault drill")
	fs.Uint64Var(&o.seed, "seed", 1, "seed of the first drill run (run i uses seed+i-1): which replica is the victim, timings, quantities")
	fs.Float64Var(&o.drillRate, "drill-rate", 40, "operations per second a drill sends (orders, reads) besides its restocks")
	fs.DurationVar(&o.lockTTL, "lock-ttl", 2*time.Second, "STOCKSVC_LOCK_TTL of the replicas in drills (pauses last twice as long)")
	fs.DurationVar(&o.clientTimeout, "client-timeout", 5*time.Second, "drill clients give up on an answer after this long (the outcome is then unknown)")
	fs.DurationVar(&o.checkTimeout, "check-timeout", 5*time.Minute, "longest the linearizability checker may take on one history before the run is called undecided")
	fs.DurationVar(&o.readSlack, "read-slack", 50*time.Millisecond, "how stale a product read may be: the replicas' view lease (STOCKSVC_CACHE_LEASE, 50ms); 0: reads must be linearizable")
	fs.StringVar(&o.recheck, "recheck", "", "check a drill's saved history.json again (with -read-slack, -loose-sold-out, -check-timeout) and exit")
	fs.IntVar(&o.redlock, "redlock", 0, "run the sale or drills with STOCKSVC_REDIS_MODE=redlock over this many redis-servers of the run's own, on free loopback ports (0: the one Redis of -redis-url)")
	fs.BoolVar(&o.looseSoldOut, "loose-sold-out", false, "a sold-out answer's available need not equal the stock when it took effect (only be short)")
	fs.BoolVar(&o.rules, "rules", true, "in drills, a third product has a sale window and a limit per customer (issue #20); false: the same product and orders without them, for comparison")
	fs.BoolVar(&o.holds, "holds", false, "the sale with holds (issue #21) beside the plain sale: -rate buyers/s split over two products of -stock units, one held for -hold-for; held buyers pay (-pay), cancel (-cancel) or never pay; measures holds/s, expiries/s and the time from expires_at to the units sold again")
	fs.DurationVar(&o.holdFor, "hold-for", 3*time.Second, "in -holds, the held product's hold_for (whole seconds, at most 1h)")
	fs.Float64Var(&o.pay, "pay", 0.3, "in -holds, the share of held buyers who confirm")
	fs.Float64Var(&o.cancel, "cancel", 0.1, "in -holds, the share of held buyers who cancel (the rest never pay)")
	o.flood.Register(fs)
	o.replays.Register(fs)
	o.opening.Register(fs, &o.openingOn)
	if err := fs.Parse(args); err != nil {
		return options{}, err
	}
	if err := o.flood.Validate(); err != nil {
		return options{}, err
	}
	if err := o.replays.Validate(); err != nil {
		return options{}, err
	}
	if o.openingOn {
		if err := o.opening.Validate(); err != nil {
			return options{}, err
		}
	}
	if modes := countTrue(o.compare, o.throughput, o.cache, o.async, o.flood.On, o.replays.On, o.fault != "", o.openingOn, o.holds); modes > 1 {
		return options{}, errors.New("-compare, -throughput, -cache, -async, -flood, -replays, -fault, -opening and -holds are modes: pick one")
	}
	if o.holds && (o.holdFor < time.Second || o.holdFor > time.Hour || o.holdFor%time.Second != 0 || o.pay < 0 || o.cancel < 0 || o.pay+o.cancel > 1 || o.rate < 2) {
		return options{}, errors.New("-holds: -hold-for is whole seconds (1s to 1h, the service's ceiling), -pay and -cancel are shares adding up to at most 1, -rate at least 2")
	}
	switch {
	case fs.NArg() > 0:
		return options{}, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.replicas < 1:
		return options{}, errors.New("-replicas must be at least 1")
	case o.customerAuth != "token" && o.customerAuth != "body":
		return options{}, fmt.Errorf("-customer-auth %q: want token or body", o.customerAuth)
	case o.stock < 1 || o.rate < 1 || o.vus < 1 || o.clients < 1:
		return options{}, errors.New("-stock, -rate, -vus and -clients must be positive")
	case o.duration < 5*time.Second:
		return options{}, errors.New("-duration must be at least 5s")
	case o.pauseAfter > 0 && (!o.async || o.pauseAfter >= o.duration):
		return options{}, errors.New("-pause-after needs -async and must fall within -duration")
	case o.killAfter >= o.duration:
		return options{}, errors.New("-kill-after must fall within -duration")
	case o.killAfter > 0 && o.replicas < 2:
		return options{}, errors.New("-kill-after needs at least 2 replicas")
	case o.rounds < 1 || o.stampedeRounds < 0 || o.stampedeReaders < 1:
		return options{}, errors.New("-rounds and -stampede-readers must be positive, -stampede-rounds not negative")
	case o.fault != "" && (o.runs < 1 || o.drillRate <= 0):
		return options{}, errors.New("-runs and -drill-rate must be positive")
	case o.fault != "" && o.replicas < 2:
		return options{}, errors.New("fault drills need at least 2 replicas")
	}
	if o.postgresHA && !o.throughput {
		return options{}, errors.New("-postgres-ha goes with -throughput (the drills that need an HA Postgres start one themselves)")
	}
	if o.redlock != 0 && (o.redlock < 3 || o.compare || o.throughput || o.cache || o.flood.On || o.replays.On) {
		return options{}, errors.New("-redlock takes 3 nodes or more, for the sale and the fault drills")
	}
	if o.fault != "" {
		if err := faults.CheckScenarios(o.fault, o.redlock); err != nil {
			return options{}, err
		}
	}
	if o.recheck == "" && (o.out == "" || o.script == "") {
		root, err := cluster.RepositoryRoot()
		if err != nil {
			return options{}, err
		}
		if o.out == "" {
			o.out = filepath.Join(root, "loadtest", "out", time.Now().Format("20060102-150405"))
		}
		if o.script == "" {
			o.script = filepath.Join(root, "loadtest", "flashsale.js")
		}
	}
	return o.options(), nil
}

// options cuts the flags into the cluster's options and each mode's.
func (f flagValues) options() options {
	o := options{out: f.out, k6: f.k6, script: f.script,
		cluster: env.ClusterOptions{Replicas: f.replicas, Defense: f.defense, LockWait: f.lockWait, Redlock: f.redlock,
			DatabaseURL: f.databaseURL, RedisURL: f.redisURL, Keep: f.keep},
		sale: sale.Options{Stock: f.stock, Rate: f.rate, Duration: f.duration, VUs: f.vus, RaceStock: f.raceStock,
			Scenarios: f.scenarios, LockRetry: f.lockRetry, LockMaxRetries: f.lockMaxRetries, KillAfter: f.killAfter,
			PGBenchClients: f.pgbenchClients, CustomerAuth: f.customerAuth},
		throughput: benchmarks.ThroughputOptions{Duration: f.duration, Clients: f.clients, ClosedOnly: f.closedOnly, PGBenchClients: f.pgbenchClients,
			PostgresHA: f.postgresHA, Reference: f.reference, Rounds: f.rounds},
		cache: benchmarks.CacheOptions{Duration: f.duration, Clients: f.clients, Rounds: f.rounds, StampedeRounds: f.stampedeRounds,
			StampedeReaders: f.stampedeReaders},
		async: faults.AsyncOptions{Stock: f.stock, Rate: f.rate, Duration: f.duration, KillAfter: f.killAfter, Baseline: f.asyncBaseline,
			PauseAfter: f.pauseAfter, PauseFor: f.pauseFor, Seed: f.seed},
		drills: faults.DrillOptions{Fault: f.fault, Runs: f.runs, Seed: f.seed, Rate: f.drillRate, LockTTL: f.lockTTL,
			ClientTimeout: f.clientTimeout, CheckTimeout: f.checkTimeout, ReadSlack: f.readSlack, LooseSoldOut: f.looseSoldOut,
			Recheck: f.recheck, NoRules: !f.rules},
		flood:   f.flood,
		replays: f.replays,
		opening: f.opening,
		holds: faults.HoldsOptions{Stock: f.stock, Rate: f.rate, Duration: f.duration, HoldFor: f.holdFor, Pay: f.pay, Cancel: f.cancel,
			Seed: f.seed},
	}
	switch {
	case f.recheck != "":
		o.mode = modeRecheck
	case f.compare:
		o.mode = modeCompare
	case f.throughput:
		o.mode = modeThroughput
	case f.cache:
		o.mode = modeCache
	case f.flood.On:
		o.mode = modeFlood
	case f.replays.On:
		o.mode = modeReplays
	case f.fault != "":
		o.mode = modeDrills
	case f.openingOn:
		o.mode = modeOpening
	case f.holds:
		o.mode = modeHolds
	case f.async:
		o.mode = modeAsync
	}
	return o
}

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}
