// Command loadtest runs a whole flash sale on one machine and proves, from Postgres, that
// nothing was oversold or lost: it builds stocksvc, starts N replicas on loopback ports against
// one Postgres and one Redis, puts HAProxy in front (health-checking /readyz), drives k6
// (loadtest/flashsale.js) through the balancer, checks the invariants with SQL, prints a
// one-screen summary and stops everything it started — also on Ctrl-C.
//
//	go run -C loadtest .                         # the default sale
//	go run -C loadtest . -replicas 5 -stock 2000 -rate 400 -duration 60s -kill-after 20s
//	go run -C loadtest . -compare                # the comparison for docs/benchmarks.md
//	go run -C loadtest . -cache -duration 10s    # reads and sold-out answers against healthz
//	go run -C loadtest . -async -kill-after 3s   # every order Prefer: respond-async, a replica killed
//	go run -C loadtest . -flood                  # buyers beside floods of audits, missing ids and healthz
//	go run -C loadtest . -replays                # fresh keys against every key sent twice
//
// It is a module of its own (github.com/stocksvc/stocksvc/loadtest), so that its load
// generators and checkers stay out of the service's go.mod. It builds the service from the
// repository it sits in, wherever it is started from; relative paths given in flags are
// relative to the working directory (loadtest/ under go run -C loadtest).
//
// It exits 1 when an invariant or a k6 threshold fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/cluster"
)

const defaultDefense = "lock,version,guard"

type options struct {
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
	clients         int
	pgbenchClients  int
	databaseURL     string
	redisURL        string
	out             string
	keep            bool
	k6              string
	script          string
	// Fault drills.
	fault         string
	runs          int
	seed          uint64
	drillRate     float64
	lockTTL       time.Duration
	clientTimeout time.Duration
	checkTimeout  time.Duration
	readSlack     time.Duration
	looseSoldOut  bool
	direct        bool // clients talk to the replicas in turn, no balancer (tests)
	recheck       string
	redlock       int // Redlock nodes of the run's own (0: the one Redis of -redis-url)
	// The benchmarks of issue #18, each with flags of its own (flood.go, replays.go).
	flood   floodOptions
	replays replayOptions
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case err == nil:
	case errors.Is(err, errFailed):
		os.Exit(1)
	case errors.Is(err, errStopped) || ctx.Err() != nil:
		// The shell's convention for a command ended by Ctrl-C, so that scripts and CI can tell
		// "stopped" from both "passed" and "found a violation".
		if !errors.Is(err, errStopped) {
			fmt.Fprintln(os.Stderr, "loadtest: stopped by a signal:", err)
		}
		os.Exit(130)
	default:
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

var (
	// errFailed means the run completed and found violations; the summary already said which.
	errFailed = errors.New("verdict: FAIL")
	// errStopped means a signal ended the load early and what ran broke no invariant.
	errStopped = errors.New("verdict: stopped early")
)

func parseOptions(args []string, usage io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("loadtest", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.IntVar(&o.replicas, "replicas", 3, "stocksvc replicas behind the balancer")
	fs.IntVar(&o.stock, "stock", 500, "units of the hot product (and of the cart product)")
	fs.IntVar(&o.rate, "rate", 200, "peak order arrivals per second of the rush")
	fs.DurationVar(&o.duration, "duration", 30*time.Second, "length of the load")
	fs.IntVar(&o.vus, "vus", 100, "k6 virtual users pre-allocated for the rush")
	fs.IntVar(&o.raceStock, "race-stock", 20, "units of the exact-race product (ten buyers per unit)")
	fs.StringVar(&o.scenarios, "scenarios", "rush,carts,retries,race", "k6 scenarios to run")
	fs.StringVar(&o.defense, "defense", defaultDefense, "STOCKSVC_DEFENSE of the replicas (anything else is a demonstration)")
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
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of each load in -cache (medians are reported)")
	fs.IntVar(&o.stampedeRounds, "stampede-rounds", 10, "stampedes in -cache (0: none)")
	fs.IntVar(&o.stampedeReaders, "stampede-readers", 500, "reads released at once in each stampede of -cache")
	fs.BoolVar(&o.closedOnly, "closed-only", false, "in -throughput, only the closed loop (no open-loop phases)")
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
	fs.DurationVar(&o.checkTimeout, "check-timeout", 5*time.Minute, "longest Porcupine may take on one history before the run is called undecided")
	fs.DurationVar(&o.readSlack, "read-slack", 50*time.Millisecond, "how stale a product read may be: the replicas' view lease (STOCKSVC_CACHE_LEASE, 50ms); 0: reads must be linearizable")
	fs.StringVar(&o.recheck, "recheck", "", "check a drill's saved history.json again (with -read-slack, -loose-sold-out, -check-timeout) and exit")
	fs.IntVar(&o.redlock, "redlock", 0, "run the sale or drills with STOCKSVC_REDIS_MODE=redlock over this many redis-servers of the run's own, on free loopback ports (0: the one Redis of -redis-url)")
	fs.BoolVar(&o.looseSoldOut, "loose-sold-out", false, "a sold-out answer's available need not equal the stock when it took effect (only be short)")
	o.flood.register(fs)
	o.replays.register(fs)
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if err := o.flood.validate(); err != nil {
		return o, err
	}
	if err := o.replays.validate(); err != nil {
		return o, err
	}
	if modes := countTrue(o.compare, o.throughput, o.cache, o.async, o.flood.on, o.replays.on, o.fault != ""); modes > 1 {
		return o, errors.New("-compare, -throughput, -cache, -async, -flood, -replays and -fault are modes: pick one")
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.replicas < 1:
		return o, errors.New("-replicas must be at least 1")
	case o.stock < 1 || o.rate < 1 || o.vus < 1 || o.clients < 1:
		return o, errors.New("-stock, -rate, -vus and -clients must be positive")
	case o.duration < 5*time.Second:
		return o, errors.New("-duration must be at least 5s")
	case o.pauseAfter > 0 && (!o.async || o.pauseAfter >= o.duration):
		return o, errors.New("-pause-after needs -async and must fall within -duration")
	case o.killAfter >= o.duration:
		return o, errors.New("-kill-after must fall within -duration")
	case o.killAfter > 0 && o.replicas < 2:
		return o, errors.New("-kill-after needs at least 2 replicas")
	case o.rounds < 1 || o.stampedeRounds < 0 || o.stampedeReaders < 1:
		return o, errors.New("-rounds and -stampede-readers must be positive, -stampede-rounds not negative")
	case o.fault != "" && (o.runs < 1 || o.drillRate <= 0):
		return o, errors.New("-runs and -drill-rate must be positive")
	case o.fault != "" && o.replicas < 2:
		return o, errors.New("fault drills need at least 2 replicas")
	}
	if o.redlock != 0 && (o.redlock < 3 || o.compare || o.throughput || o.cache || o.flood.on || o.replays.on) {
		return o, errors.New("-redlock takes 3 nodes or more, for the sale and the fault drills")
	}
	if o.fault != "" {
		picked, err := pickScenarios(o.fault)
		if err != nil {
			return o, err
		}
		for _, sc := range picked {
			if o.redlock > 0 && (sc.ownRedis || sc.proxyRedis) {
				return o, fmt.Errorf("-redlock: drill %s stops or proxies the one Redis, which a Redlock run does not have", sc.name)
			}
		}
	}
	if o.recheck == "" && (o.out == "" || o.script == "") {
		root, err := cluster.RepositoryRoot()
		if err != nil {
			return o, err
		}
		if o.out == "" {
			o.out = filepath.Join(root, "loadtest", "out", time.Now().Format("20060102-150405"))
		}
		if o.script == "" {
			o.script = filepath.Join(root, "loadtest", "flashsale.js")
		}
	}
	return o, nil
}

// harness holds what every sale of one invocation shares.
type harness struct {
	opts    options
	out     string
	binary  string
	k6      string
	haproxy string
	wrk     string // only for -throughput, -cache, -flood and -replays
	script  string
	w       io.Writer
}

func (h *harness) printf(format string, args ...any) { fmt.Fprintf(h.w, format, args...) }

func countTrue(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

func run(ctx context.Context, args []string, w io.Writer) error {
	o, err := parseOptions(args, w)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	h := &harness{opts: o, w: w}
	if o.recheck != "" {
		return h.recheck(o.recheck)
	}
	if h.out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	// Only the sales drive k6.
	needK6 := o.fault == "" && !o.cache && !o.async && !o.flood.on && !o.replays.on
	if needK6 {
		if h.script, err = filepath.Abs(o.script); err != nil {
			return err
		}
		if _, err := os.Stat(h.script); err != nil {
			return fmt.Errorf("k6 script %s: %w", o.script, err)
		}
	}
	if err := os.MkdirAll(h.out, 0o755); err != nil {
		return err
	}
	if needK6 {
		if h.k6, err = cluster.FindK6(ctx, o.k6, w); err != nil {
			return err
		}
	}
	if h.haproxy, err = cluster.FindTool(ctx, "haproxy", "haproxy", w); err != nil {
		return err
	}
	h.binary = filepath.Join(h.out, "stocksvc")
	if err := cluster.BuildService(ctx, h.binary, w); err != nil {
		return err
	}
	if o.compare {
		return h.compare(ctx)
	}
	if o.throughput {
		if h.wrk, err = cluster.FindTool(ctx, "wrk", "wrk", w); err != nil {
			return err
		}
		return h.throughput(ctx)
	}
	if o.cache || o.flood.on || o.replays.on {
		if h.wrk, err = cluster.FindTool(ctx, "wrk", "wrk", w); err != nil {
			return err
		}
	}
	switch {
	case o.cache:
		return h.cache(ctx)
	case o.flood.on:
		return h.floodBench(ctx)
	case o.replays.on:
		return h.replayBench(ctx)
	}
	if o.fault != "" {
		return h.drills(ctx)
	}
	if o.async {
		return h.asyncSale(ctx)
	}
	return h.sale(ctx)
}

// sale runs the one configured sale and reports it.
func (h *harness) sale(ctx context.Context) error {
	spec := saleSpec{label: "sale", defense: h.opts.defense, lockRetry: h.opts.lockRetry,
		lockMaxRetries: h.opts.lockMaxRetries, scenarios: h.opts.scenarios}
	run, err := h.runSale(ctx, spec)
	if err != nil {
		return err
	}
	defer h.closeRun(run)
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	raceStock := int64(0)
	if strings.Contains(h.opts.scenarios, "race") {
		raceStock = int64(h.opts.raceStock)
	}
	invariants, ledgers, err := checkInvariants(checkCtx, run, raceStock, run.killed >= 0)
	if err != nil {
		return err
	}
	timing, err := saleTiming(checkCtx, run)
	if err != nil {
		return err
	}
	return h.report(run, invariants, ledgers, timing)
}
