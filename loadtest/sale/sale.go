package sale

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// saleSpec is one configuration of the service to put under load.
type saleSpec struct {
	label          string // names the run's directory
	defense        string
	lockRetry      string
	lockMaxRetries int
	maxBatch       int           // the replicas' STOCKSVC_MAX_BATCH; 0 keeps their default
	queueWait      time.Duration // the replicas' STOCKSVC_QUEUE_WAIT; 0 keeps their default
	scenarios      string
}

// saleRun is everything one sale produced.
type saleRun struct {
	spec       saleSpec
	dir        string
	database   string
	deployment *cluster.Cluster // stopped; its database is kept for the checks until closeRun
	pool       *pgxpool.Pool    // to the run's database, for the invariant checks
	summary    k6Summary
	orders     []confirmedOrder
	replicas   []replicaReport
	balancer   map[string]int64 // requests per replica, as HAProxy counted them
	killed     int              // index of the replica killed mid-run, or -1
	killedAt   time.Time        // when it was killed
	stopped    bool             // Ctrl-C (or SIGTERM) ended the load before its time
	k6Err      error
	k6Started  time.Time
	k6Ended    time.Time
}

type replicaReport struct {
	name     string
	port     int
	orders   float64 // POST /v1/orders answered, by its own metrics
	catches  map[string]float64
	outcomes map[string]float64
	killed   bool
	exit     error
}

// confirmedOrder is one 201 that k6 logged: the order id and units per product role.
type confirmedOrder struct {
	id    uuid.UUID
	units map[string]int64
}

// k6Summary is the part of k6's end-of-test summary the harness reads.
type k6Summary struct {
	SetupData struct {
		Hot    int64 `json:"hot"`
		Second int64 `json:"second"`
		Race   int64 `json:"race"`
	} `json:"setup_data"`
	report.K6Metrics
	State struct {
		TestRunDurationMs float64 `json:"testRunDurationMs"`
	} `json:"state"`
}

// customers makes the sale's customers in token mode: an issuer of the run's own, whose key
// set the replicas verify with, and a token for each customer vu-1, vu-2, ... in dir's
// tokens.json, which flashsale.js reads (TOKENS_FILE: k6 cannot sign ES256 itself). In body
// mode there is neither, and the orders name their customer in the body.
func (h *harness) customers(dir, label string, o Options) (*cluster.Identity, string, error) {
	if o.CustomerAuth == "body" {
		h.Printf("[%s] customers named in the orders' bodies, unverified (-customer-auth body)\n", label)
		return nil, "", nil
	}
	identity, err := cluster.NewIdentity(dir)
	if err != nil {
		return nil, "", err
	}
	customers := make([]string, tokenCustomers(o.VUs))
	for i := range customers {
		customers[i] = "vu-" + strconv.Itoa(i+1)
	}
	tokens := filepath.Join(dir, "tokens.json")
	if err := identity.WriteTokens(tokens, customers); err != nil {
		return nil, "", err
	}
	h.Printf("[%s] customers verified by token: %d minted, one a k6 VU\n", label, len(customers))
	return identity, tokens, nil
}

// tokenCustomers is how many customers' tokens a sale with vus VUs mints: as many as
// flashsale.js's scenarios can start VUs (the rush 2×vus, carts and retries max(4, vus/5)
// each, the race at most 50), so that no two VUs share a customer. Were the script to start
// more, those past the tokens would share them, which the sale's products (no limit per
// customer) allow.
func tokenCustomers(vus int) int { return 2*vus + 2*max(4, (vus+4)/5) + 50 }

// runSale starts a deployment (cluster.Start), drives k6 through its balancer, gathers what
// everyone saw, and stops every process; the run's database stays for the checks until
// closeRun.
func (h *harness) runSale(ctx context.Context, spec saleSpec, o Options) (*saleRun, error) {
	run := &saleRun{spec: spec, dir: filepath.Join(h.Out, spec.label), killed: -1}
	if err := os.MkdirAll(run.dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", run.dir, err)
	}
	// A database and a Redis key prefix of the run's own.
	run.database = fmt.Sprintf("stocksvc_load_%d_%s", time.Now().Unix(), strings.ReplaceAll(spec.label, "-", "_"))

	h.Printf("[%s] starting %d replicas (defense %s, lock retry %s", spec.label, h.Cluster.Replicas, spec.defense, spec.lockRetry)
	if spec.lockMaxRetries > 0 {
		h.Printf(", at most %d retries", spec.lockMaxRetries)
	}
	h.Printf(")\n")
	settings := []string{
		"STOCKSVC_DEFENSE=" + spec.defense,
		"STOCKSVC_LOCK_RETRY=" + spec.lockRetry,
		"STOCKSVC_LOCK_MAX_RETRIES=" + strconv.Itoa(spec.lockMaxRetries),
		"STOCKSVC_LOCK_WAIT=" + h.Cluster.LockWait.String(),
	}
	if spec.defense != env.DefaultDefense {
		settings = append(settings, "STOCKSVC_DEMO_UNSAFE=1")
	}
	if spec.maxBatch > 0 {
		settings = append(settings, "STOCKSVC_MAX_BATCH="+strconv.Itoa(spec.maxBatch))
	}
	if spec.queueWait > 0 {
		settings = append(settings, "STOCKSVC_QUEUE_WAIT="+spec.queueWait.String())
	}
	identity, tokens, err := h.customers(run.dir, spec.label, o)
	if err != nil {
		return nil, err
	}
	c, err := cluster.Start(ctx, cluster.Config{
		Dir: run.dir, Binary: h.Binary, HAProxy: h.HAProxy, Replicas: h.Cluster.Replicas,
		ServerURL: h.Cluster.DatabaseURL, Database: run.database,
		RedisURL: h.Cluster.RedisURL, Prefix: "stocksvc-load:" + rand.Text()[:10] + ":", Token: rand.Text(),
		Redlock: h.Cluster.Redlock, Keep: h.Cluster.Keep, Warnings: h.W, Identity: identity,
		Env: func(int) []string { return settings },
		BeforeReplicas: func(c *cluster.Cluster) error {
			if c.Redlock != nil {
				h.Printf("[%s] product locks on Redlock over %d redis-servers: %s\n", spec.label, len(c.Redlock), c.Redlock.URL())
			}
			return nil
		},
	})
	if err != nil {
		return nil, err
	}
	run.deployment = c
	completed := false
	defer func() {
		if !completed {
			c.Close()
		}
	}()
	for _, r := range c.Replicas {
		run.replicas = append(run.replicas, replicaReport{name: r.Name, port: r.Port})
	}

	// The load.
	k6env := []string{
		"BASE_URL=" + c.FrontURL(),
		"ADMIN_TOKEN=" + c.Token,
		"STOCK=" + strconv.Itoa(o.Stock),
		"RATE=" + strconv.Itoa(o.Rate),
		"DURATION=" + o.Duration.String(),
		"VUS=" + strconv.Itoa(o.VUs),
		"RACE_STOCK=" + strconv.Itoa(o.RaceStock),
		"SCENARIOS=" + spec.scenarios,
		"SUMMARY_JSON=" + filepath.Join(run.dir, "summary.json"),
		"SUMMARY_TXT=" + filepath.Join(run.dir, "summary.txt"),
		"ORDER_LOG=1",
		"K6_NO_USAGE_REPORT=true",
		// Every request's end, status and duration, for the report page's plots and -compare's
		// figures: k6's CSV output, compressed (a few MB for a default sale).
		"K6_CSV_TIME_FORMAT=unix_milli",
	}
	if tokens != "" {
		k6env = append(k6env, "TOKENS_FILE="+tokens)
	}
	if o.KillAfter > 0 {
		// Requests in flight on the killed replica fail (the balancer answers 502 for them)
		// until its health check takes it out; allow for them. The invariants stay strict.
		k6env = append(k6env, "FAILED_RATE_MAX=0.05", "CHECKS_RATE_MIN=0.95")
	}
	argv := []string{h.K6, "run", "--no-usage-report", "--quiet", "--console-output", filepath.Join(run.dir, "k6-console.log"),
		"--out", "csv=" + filepath.Join(run.dir, "requests.csv.gz"), h.Script}
	h.Printf("[%s] k6: rate %d/s for %v, stock %d, scenarios %s; balancer http://127.0.0.1:%d\n",
		spec.label, o.Rate, o.Duration, o.Stock, spec.scenarios, c.Front)
	run.k6Started = time.Now()
	k6, err := c.Sup.Start("k6", filepath.Join(run.dir, "k6.log"), k6env, argv...)
	if err != nil {
		return nil, err
	}

	var wg sync.WaitGroup
	progressCtx, stopProgress := context.WithCancel(ctx)
	wg.Go(func() { h.progress(progressCtx, spec.label, run.k6Started, c.ReplicaPorts(), c.Token) })
	if o.KillAfter > 0 {
		victim := len(c.Replicas) / 2
		wg.Go(func() {
			select {
			case <-time.After(o.KillAfter):
				c.Replicas[victim].Proc.Signal(syscall.SIGKILL)
				run.killed, run.killedAt = victim, time.Now()
				h.Printf("[%s] killed replica %s with SIGKILL at %v\n", spec.label, run.replicas[victim].name, o.KillAfter)
			case <-progressCtx.Done():
			}
		})
	}
	select {
	case <-k6.Done():
	case <-ctx.Done():
		// Ctrl-C: let k6 stop its scenarios and still run teardown and the summary.
		run.stopped = true
		k6.Signal(syscall.SIGINT)
		<-k6.Done()
	}
	run.k6Ended = time.Now()
	stopProgress()
	wg.Wait()
	run.k6Err = k6.Err()

	// What the replicas and the balancer counted, before stopping them.
	scrapeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	for i := range run.replicas {
		r := &run.replicas[i]
		if i == run.killed {
			r.killed = true
			continue
		}
		if m, err := cluster.ScrapeReplica(scrapeCtx, r.port, c.Token); err == nil {
			r.orders, r.catches, r.outcomes = m.Orders, m.Catches, m.Outcomes
		}
	}
	if counts, err := cluster.HAProxyRequests(scrapeCtx, c.Stats); err == nil {
		run.balancer = counts
	}
	// Together: each waits out its shutdown delay (readiness failing) before it drains.
	var stopping sync.WaitGroup
	for i, r := range c.Replicas {
		if i != run.killed {
			stopping.Go(func() {
				run.replicas[i].exit = r.Proc.Stop(20 * time.Second)
				if run.replicas[i].exit == nil {
					run.replicas[i].exit = r.Proc.Err()
				}
			})
		}
	}
	stopping.Wait()
	if err := c.Stop(); err != nil {
		h.Printf("  warning: %v\n", err)
	}

	if err := readJSON(filepath.Join(run.dir, "summary.json"), &run.summary); err != nil {
		return nil, fmt.Errorf("k6 left no usable summary (see %s): %w", filepath.Join(run.dir, "k6.log"), err)
	}
	if run.orders, err = readOrderLog(filepath.Join(run.dir, "k6-console.log")); err != nil {
		return nil, err
	}
	pool, err := pgxpool.New(context.WithoutCancel(ctx), c.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", run.database, err)
	}
	run.pool = pool
	completed = true
	return run, nil
}

// closeRun releases the run's database connection and removes what the run left (its
// database unless -keep, its Redis keys).
func (h *harness) closeRun(run *saleRun) {
	if run.pool != nil {
		run.pool.Close()
	}
	if h.Cluster.Keep {
		h.Printf("[%s] kept database %s\n", run.spec.label, run.database)
	}
	run.deployment.Close()
}

func (h *harness) createDatabase(ctx context.Context, name string) (string, error) {
	return cluster.CreateDatabase(ctx, h.Cluster.DatabaseURL, name)
}

func (h *harness) dropDatabase(name string) {
	if err := cluster.DropDatabase(h.Cluster.DatabaseURL, name); err != nil {
		h.Printf("  warning: %v\n", err)
	}
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

// readOrderLog reads the "ORDER <id> <role>=<units>,..." lines k6 logged for each 201.
func readOrderLog(path string) ([]confirmedOrder, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var orders []confirmedOrder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		_, rest, found := strings.Cut(line, `msg="ORDER `)
		if !found {
			continue
		}
		msg, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(msg)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s: unreadable order line %q", path, line)
		}
		id, err := uuid.Parse(fields[0])
		if err != nil {
			return nil, fmt.Errorf("%s: bad order id in %q", path, line)
		}
		o := confirmedOrder{id: id, units: map[string]int64{}}
		for _, part := range strings.Split(fields[1], ",") {
			role, qty, _ := strings.Cut(part, "=")
			n, err := strconv.ParseInt(qty, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("%s: bad quantity in %q", path, line)
			}
			o.units[role] += n
		}
		orders = append(orders, o)
	}
	return orders, sc.Err()
}
