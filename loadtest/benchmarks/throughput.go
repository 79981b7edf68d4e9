package benchmarks

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/traffic"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
	vegeta "github.com/tsenart/vegeta/v12/lib"
)

// The throughput benchmark (-throughput): how many purchases of one hot product the deployment
// confirms per second, against what Postgres alone does to that product's row — pgbench running
// the bare conditional decrement, measured in the same run. Then the latency at 80% of that peak
// and the behaviour at twice it, and where the CPU went.
//
// The load comes from vegeta, in this process: a Go HTTP client costs a few tens of
// microseconds per request, where k6's JavaScript VUs cost several times that, and on a
// two-core machine the load generator's share is taken from the service's. Every order carries
// an Idempotency-Key, as a real client's would.

// maxOpenLoopWorkers bounds the requests the probe has in flight.
const maxOpenLoopWorkers = 2048

// throughputStock is the hot product's stock: enough that no run sells out, so every answer
// of the closed loop is a purchase.
const throughputStock = 1_000_000_000

// startCluster starts a deployment of -replicas replicas with the default defense, each with a
// profiler (STOCKSVC_DEBUG_ADDR) and one core's worth of Go scheduler.
func (h *harness) startCluster(ctx context.Context, label string) (*cluster.Cluster, error) {
	return h.startClusterHA(ctx, label, false, nil)
}

// startClusterHA is startCluster, on a Patroni topology of the run's own when ha, and with
// replicas that verify identity's tokens when it is set.
func (h *harness) startClusterHA(ctx context.Context, label string, ha bool, identity *cluster.Identity) (*cluster.Cluster, error) {
	return cluster.Start(ctx, cluster.Config{
		Dir: filepath.Join(h.Out, label), Binary: h.Binary, HAProxy: h.HAProxy, Replicas: h.Cluster.Replicas,
		ServerURL: h.Cluster.DatabaseURL, PostgresHA: ha, PatroniFsync: ha, Database: fmt.Sprintf("stocksvc_load_%d_%s", time.Now().Unix(), strings.ReplaceAll(label, "-", "_")),
		RedisURL: h.Cluster.RedisURL, Prefix: "stocksvc-load:" + rand.Text()[:10] + ":", Token: rand.Text(),
		DebugPorts: true, Keep: h.Cluster.Keep, Warnings: h.W, Identity: identity,
		Env: func(int) []string {
			return []string{
				"STOCKSVC_LOCK_WAIT=" + h.Cluster.LockWait.String(),
				// One core's worth each, as the Compose file's CPU limit gives every replica (Go
				// reads it from the cgroup there); bare processes would each schedule for two.
				"GOMAXPROCS=1",
			}
		},
	})
}

// phase is what one load phase measured.
type phase struct {
	name      string
	generator string  // what made the load
	offered   float64 // requests/s asked for; 0: closed loop
	window    time.Duration
	counts    map[uint16]int        // answers by status; 0 is a transport error
	pct       map[uint16][2]float64 // p50 and p99 in ms, by status
	cpu       cpuUse
	batches   batchStats
}

func (p phase) count(code uint16) int { return p.counts[code] }

func (p phase) total() int {
	n := 0
	for _, c := range p.counts {
		n += c
	}
	return n
}

func (p phase) confirmedPerS() float64 {
	if p.window <= 0 {
		return 0
	}
	return float64(p.count(http.StatusCreated)) / p.window.Seconds()
}

// summarise fills counts and percentiles from every answer's latency.
func (p *phase) summarise(latencies map[uint16][]time.Duration) {
	p.counts, p.pct = map[uint16]int{}, map[uint16][2]float64{}
	for code, ds := range latencies {
		ms := make([]float64, len(ds))
		for i, d := range ds {
			ms[i] = float64(d) / float64(time.Millisecond)
		}
		p.counts[code] = len(ds)
		p.pct[code] = [2]float64{report.Percentile(ms, 50), report.Percentile(ms, 99)}
	}
}

// pacedConnections is how many connections carry a paced phase's load: at twice the peak each
// sends one request every few tens of milliseconds, above the answers' latency while the
// deployment keeps up. A connection waits for its answer before the next pause, so the rate
// sent falls short of the rate offered by the answers' latency (sent/s shows it). Four times as
// many connections came closer to the offered rate but cost the balancer and the replicas more
// than they added, on two cores.
const pacedConnections = 512

// probeRate is the arrival rate of the probe that measures latency by status during a paced
// phase: wrk reports one latency for all answers, and the phase needs the refusals' apart.
const probeRate = 200

// pacedLoad offers rate orders/s for d: wrk paced over pacedConnections carries the bulk, and a
// vegeta probe sends probeRate of them on a schedule, recording every answer's status and
// latency. Counts add up both; the latencies by status are the probe's.
func (h *harness) pacedLoad(ctx context.Context, c *deployment, name string, product int64, rate float64, d time.Duration) (phase, error) {
	type probed struct {
		p   phase
		err error
	}
	probe := make(chan probed, 1)
	go func() {
		p, err := h.probe(ctx, c, name+" (probe)", product, probeRate, d)
		probe <- probed{p, err}
	}()
	p, err := h.wrkLoop(ctx, c, name, product, pacedConnections, rate-probeRate, d)
	pr := <-probe
	if err != nil {
		return phase{}, err
	}
	if pr.err != nil {
		return phase{}, pr.err
	}
	p.offered, p.generator = rate, "wrk paced + vegeta probe"
	for code, n := range pr.p.counts {
		p.counts[code] += n
	}
	p.pct = pr.p.pct
	return p, nil
}

// orderTargeter makes each request a new order of one unit of product, with its own customer
// and Idempotency-Key.
func orderTargeter(front int, product int64) vegeta.Targeter {
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/orders", front)
	var n atomic.Int64
	return func(t *vegeta.Target) error {
		i := n.Add(1)
		t.Method, t.URL = http.MethodPost, url
		t.Body = fmt.Appendf(nil, `{"customer_id":"c%d","items":[{"product_id":%d,"quantity":1}]}`, i, product)
		t.Header = http.Header{"Content-Type": {"application/json"}, "Idempotency-Key": {uuid.NewString()}}
		return nil
	}
}

// probe sends rate orders/s for d on a fixed schedule (vegeta), recording every answer's status
// and latency. Enough workers that an arrival rarely waits for a free one (latency is measured
// from the send), but bounded like a real crowd's connections.
func (h *harness) probe(ctx context.Context, c *deployment, name string, product int64, rate float64, d time.Duration) (phase, error) {
	opts := []func(*vegeta.Attacker){vegeta.KeepAlive(true), vegeta.MaxBody(0), vegeta.Timeout(30 * time.Second),
		vegeta.Workers(64), vegeta.MaxWorkers(maxOpenLoopWorkers), vegeta.Connections(maxOpenLoopWorkers)}
	pacer := vegeta.Rate{Freq: int(math.Round(rate)), Per: time.Second}
	atk := vegeta.NewAttacker(opts...)
	before, err := c.sample(ctx)
	if err != nil {
		return phase{}, err
	}
	p := phase{name: name, generator: "vegeta", offered: rate}
	latencies := map[uint16][]time.Duration{}
	var first, last time.Time
	results := atk.Attack(orderTargeter(c.front, product), pacer, d, name)
	stop := context.AfterFunc(ctx, func() { atk.Stop() })
	defer stop()
	for r := range results {
		if first.IsZero() || r.Timestamp.Before(first) {
			first = r.Timestamp
		}
		if end := r.Timestamp.Add(r.Latency); end.After(last) {
			last = end
		}
		latencies[r.Code] = append(latencies[r.Code], r.Latency)
	}
	if ctx.Err() != nil {
		return phase{}, ctx.Err()
	}
	after, err := c.sample(ctx)
	if err != nil {
		return phase{}, err
	}
	p.window = last.Sub(first)
	p.summarise(latencies)
	p.cpu = after.cpu.minus(before.cpu)
	p.batches = after.batches.minus(before.batches)
	return p, nil
}

// throughput runs the benchmark and writes throughput.md.
func (h *harness) throughput(ctx context.Context, o ThroughputOptions) error {
	// On an HA topology, pgbench runs on it too, and so after it is up.
	var c *cluster.Cluster
	if o.PostgresHA {
		var err error
		if c, err = h.startClusterHA(ctx, "throughput", true, nil); err != nil {
			return err
		}
		defer c.Close()
		h.Printf("[throughput] on a Patroni topology: a primary and two standbys, synchronous_mode_strict, fsync on (%s)\n", c.HA.Timing)
	}
	anchor := func() (traffic.Anchor, error) {
		if o.PostgresHA {
			return traffic.PGBench(ctx, h.Harness, c.ServerURL, o.PGBenchClients)
		}
		return traffic.PGBench(ctx, h.Harness, h.Cluster.DatabaseURL, o.PGBenchClients)
	}
	before, err := anchor()
	if err != nil {
		return err
	}
	if c == nil {
		if c, err = h.startCluster(ctx, "throughput"); err != nil {
			return err
		}
		defer c.Close()
	}
	product, err := c.CreateProduct(ctx, "hot", throughputStock)
	if err != nil {
		return err
	}
	clients, d := o.Clients, o.Duration
	srv, err := findServers(ctx, c.DatabaseURL, c.RedisURL)
	if err != nil {
		// Then every postgres and redis-server process on the machine is counted.
		h.Printf("[throughput]   the servers' pids: %v\n", err)
	}
	svc := serviceDeployment(c, srv)
	var (
		ref  *deployment
		refS *reference
	)
	if o.Reference {
		if ref, refS, err = h.startReference(ctx, c, srv, product, throughputStock); err != nil {
			return err
		}
		defer refS.rdb.Close()
	}
	// The report page's plots: the replicas' counters, sampled through every load.
	sampler := sampleCounters(ctx, c)
	var loads []report.Window
	load := func(name string, began time.Time) {
		loads = append(loads, report.Window{Start: sampler.since(began), End: sampler.since(time.Now()), Label: name})
	}
	var (
		peak phase
		sbs  *sideBySide
	)
	if o.Reference {
		began := time.Now()
		s, err := h.sideBySideRounds(ctx, c, svc, ref, refS, product, clients, max(1, o.Rounds), d)
		if err != nil {
			return err
		}
		load("side by side", began)
		sbs, peak = &s, medianPhase(s.service)
		peak.name = "closed loop (the median round of stocksvc)"
	} else {
		h.Printf("[throughput] warm-up: %d clients for 3s\n", clients)
		began := time.Now()
		if _, err := h.wrkLoop(ctx, svc, "warm-up", product, clients, 0, 3*time.Second); err != nil {
			return err
		}
		load("warm-up", began)
		h.Printf("[throughput] closed loop: %d clients for %v\n", clients, d)
		profiled := make(chan error, 1)
		go func() { profiled <- c.Profile(ctx, 0, d-time.Second, "r1.cpu.pprof") }()
		began = time.Now()
		if peak, err = h.wrkLoop(ctx, svc, "closed loop", product, clients, 0, d); err != nil {
			return err
		}
		load("closed loop", began)
		if err := <-profiled; err != nil {
			h.Printf("[throughput]   no CPU profile of r1: %v\n", err)
		}
	}
	if _, err := os.Stat(filepath.Join(c.Dir, "r1.cpu.pprof")); err == nil {
		h.Printf("[throughput]   CPU profile of r1: %s (go tool pprof -top %s %s)\n",
			filepath.Join(c.Dir, "r1.cpu.pprof"), h.Binary, filepath.Join(c.Dir, "r1.cpu.pprof"))
	}
	// pgbench again, right after: its rate varies from run to run on a shared machine, and the
	// ratio is taken against the better of the two.
	began := time.Now()
	after, err := anchor()
	if err != nil {
		return err
	}
	load("pgbench alone", began)
	anchors := []traffic.Anchor{before, after}
	best := max(before.TPS, after.TPS)
	h.Printf("[throughput]   %.0f confirmed/s (%.2f× pgbench's better run)\n", peak.confirmedPerS(), peak.confirmedPerS()/best)
	phases := []phase{peak}
	for _, f := range []float64{0.8, 2} {
		if o.ClosedOnly {
			break
		}
		rate := f * peak.confirmedPerS()
		h.Printf("[throughput] paced load: %.0f orders/s (%.0f%% of the peak) for %v, and a probe\n", rate, 100*f, d)
		began = time.Now()
		p, err := h.pacedLoad(ctx, svc, fmt.Sprintf("%.0f%% of the peak", 100*f), product, rate, d)
		if err != nil {
			return err
		}
		load(p.name, began)
		phases = append(phases, p)
	}
	samples := sampler.finish()
	table := throughputReport(h.Cluster.Replicas, o, anchors, phases)
	if sbs != nil {
		table += sbs.report()
	}
	h.Printf("\n%s\n", table)
	path := filepath.Join(h.Out, "throughput.md")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		return err
	}
	h.Printf("written to %s\n", path)

	checks, err := ledgerChecks(ctx, c.DatabaseURL)
	if err != nil {
		return err
	}
	run := report.ThroughputRun(report.Throughput{Replicas: h.Cluster.Replicas, Clients: o.Clients, Duration: o.Duration,
		PGBenchClients: o.PGBenchClients, Stock: throughputStock, Samples: samples, SampleEvery: sampleEvery, Loads: loads,
		Checks: checks, Anchors: []float64{before.TPS, after.TPS}})
	run.Files = []report.Field{{Name: "table", Value: "throughput.md"}, {Name: "CPU profile of r1", Value: "throughput/r1.cpu.pprof"}}
	page := report.Page{Title: "stocksvc throughput", Command: "go run -C loadtest . " + strings.Join(h.Args, " "), Runs: []report.Run{run}}
	path = filepath.Join(h.Out, "report.html")
	if err := report.Write(path, page); err != nil {
		return err
	}
	h.Printf("report page   %s\n", path)
	return nil
}

// ledgerChecks is the SQL verdict on the run's database: every product's ledger.
func ledgerChecks(ctx context.Context, databaseURL string) ([]report.Check, error) {
	pool, err := pgxpool.New(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to the run's database: %w", err)
	}
	defer pool.Close()
	invs, _, err := verdict.Ledgers(ctx, pool)
	if err != nil {
		return nil, err
	}
	return verdict.Checks(invs), nil
}

func throughputReport(replicas int, o ThroughputOptions, anchors []traffic.Anchor, phases []phase) string {
	var b strings.Builder
	peak := phases[0]
	best := 0.0
	for _, a := range anchors {
		best = max(best, a.TPS)
	}
	fmt.Fprintf(&b, "One run: %d replicas behind HAProxy, one product, every order one unit with its own Idempotency-Key; pgbench measured in the same run, before and after the closed loop, and ratios taken against its better run.\n\n", replicas)
	if o.PostgresHA {
		b.WriteString("Postgres: a Patroni topology of the run's own (a primary and two standbys on this machine, synchronous_mode_strict, fsync on): every commit, the service's and pgbench's, waits for a standby's flush.\n\n")
	}
	fmt.Fprintf(&b, "| load | generator | offered | sent/s | confirmed/s | × pgbench | 201 p50 / p99 | not 201 (429 …) | 429 p50 / p99 | failed |\n")
	fmt.Fprintf(&b, "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i, a := range anchors {
		when := []string{"before", "after"}[min(i, 1)]
		fmt.Fprintf(&b, "| pgbench %s: %d clients, bare `UPDATE ... WHERE stock > 0` | pgbench | closed | | %.0f tx/s | %.2f× | – / %.1f ms | | | |\n",
			when, o.PGBenchClients, a.TPS, a.TPS/best, a.P99)
	}
	for _, p := range phases {
		offered := fmt.Sprintf("%d clients", o.Clients)
		if p.offered > 0 {
			offered = fmt.Sprintf("%.0f/s", p.offered)
		}
		refused := p.total() - p.count(http.StatusCreated) - p.count(0)
		busy := "–"
		if pct, ok := p.pct[http.StatusTooManyRequests]; ok {
			busy = fmt.Sprintf("%.1f / %.1f ms", pct[0], pct[1])
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.2f× | %.1f / %.1f ms | %d | %s | %d |\n",
			p.name, p.generator, offered, float64(p.total())/p.window.Seconds(), p.confirmedPerS(), p.confirmedPerS()/best,
			p.pct[http.StatusCreated][0], p.pct[http.StatusCreated][1], refused, busy, p.count(0))
	}
	if len(phases) > 1 {
		over := phases[len(phases)-1]
		fmt.Fprintf(&b, "\nAt twice the peak the deployment confirmed %.0f/s, %.0f%% of the closed-loop peak.\n", over.confirmedPerS(), 100*over.confirmedPerS()/peak.confirmedPerS())
	}
	fmt.Fprintf(&b, "\nBatches in the closed loop: %s.\n", peak.batches)
	fmt.Fprintf(&b, "\nCPU per confirmed order in the closed loop (utime+stime over the window, %d confirmed):\n\n", peak.count(http.StatusCreated))
	b.WriteString(peak.cpu.table(peak.count(http.StatusCreated), peak.window))
	return b.String()
}

// clusterSample is what the harness reads from the machine and the replicas at a phase's ends.
type clusterSample struct {
	cpu     cpuUse
	batches batchStats
}

// sample reads the CPU of d's processes and of the servers, and its replicas' batches.
func (d *deployment) sample(ctx context.Context) (clusterSample, error) {
	var s clusterSample
	var err error
	if s.cpu, err = d.readCPU(ctx); err != nil {
		return s, err
	}
	for _, port := range d.metrics {
		b, err := scrapeBatches(ctx, port, d.token)
		if err != nil {
			return s, err
		}
		s.batches = s.batches.plus(b)
	}
	return s, nil
}

// cpuUse is CPU time (user + system) by process group.
type cpuUse map[string]time.Duration

// cpuGroups lists the groups in the order they are reported.
var cpuGroups = []string{"replicas", "postgres", "haproxy", "load generator", "redis"}

func (a cpuUse) minus(b cpuUse) cpuUse {
	out := cpuUse{}
	for k, v := range a {
		out[k] = v - b[k]
	}
	return out
}

func (a cpuUse) table(orders int, window time.Duration) string {
	var b strings.Builder
	b.WriteString("| process | CPU per confirmed order | share of the window's cores |\n| --- | ---: | ---: |\n")
	var total time.Duration
	for _, g := range cpuGroups {
		total += a[g]
		fmt.Fprintf(&b, "| %s | %.0f µs | %.2f cores |\n", g, perOrder(a[g], orders), a[g].Seconds()/window.Seconds())
	}
	fmt.Fprintf(&b, "| **all of the above** | **%.0f µs** | **%.2f cores** |\n", perOrder(total, orders), total.Seconds()/window.Seconds())
	fmt.Fprintf(&b, "| whole machine (/proc/stat) | %.0f µs | %.2f cores |\n", perOrder(a["machine"], orders), a["machine"].Seconds()/window.Seconds())
	return b.String()
}

func perOrder(d time.Duration, orders int) float64 {
	if orders == 0 {
		return math.NaN()
	}
	return float64(d.Microseconds()) / float64(orders)
}

// readCPU sums the CPU time of the cluster's processes, of the shared Postgres and Redis
// servers, and of this process (the load generator), from /proc. Postgres and Redis are shared
// with anything else using them, so their figures are upper bounds.
func readCPU(ctx context.Context, c *cluster.Cluster) (cpuUse, error) {
	return serviceDeployment(c, nil).readCPU(ctx)
}

// readCPU sums the CPU time of d's replicas and balancer, of this process (the load
// generator), and of the Postgres and Redis servers, from /proc: the servers d uses when they
// were found (d.servers), else every process named postgres or redis-server on the machine.
// The servers are shared with anything else using them, so their figures are upper bounds.
func (d *deployment) readCPU(ctx context.Context) (cpuUse, error) {
	use := cpuUse{}
	for _, p := range d.replicas {
		use["replicas"] += procCPU(p.Pid())
	}
	use["haproxy"] = procCPU(d.balancer.Pid())
	use["load generator"] = procCPU(os.Getpid())
	postgres, redis, err := d.servers.pids()
	if err != nil {
		return nil, err
	}
	use["postgres"] = d.servers.postmasterCPU()
	for _, pid := range postgres {
		use["postgres"] += procCPU(pid)
	}
	for _, pid := range redis {
		use["redis"] += procCPU(pid)
	}
	machine, err := machineCPU()
	if err != nil {
		return nil, err
	}
	use["machine"] = machine
	return use, ctx.Err()
}

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every Linux this runs on.
const clockTick = 10 * time.Millisecond

// procCPU returns the user + system time of process pid (0 if it is gone).
func procCPU(pid int) time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// The command name (field 2) is in parentheses and may hold spaces: count from the last ')'.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(fields) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * clockTick
}

// machineCPU returns the busy time of all cores since boot (everything but idle and iowait).
func machineCPU() (time.Duration, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 8 || fields[0] != "cpu" {
		return 0, errors.New("unexpected /proc/stat")
	}
	var busy int64
	for i, f := range fields[1:] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(f, 10, 64)
		busy += n
	}
	return time.Duration(busy) * clockTick, nil
}

// pidsNamed lists the processes whose command name is name.
func pidsNamed(name string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// batchStats is the stocksvc_batch_orders histogram, summed over replicas.
type batchStats struct {
	count, sum float64
	buckets    map[float64]float64 // cumulative count by upper bound
	locked     float64             // batches decided under the lock (stocksvc_orders_per_lock count)
}

func (a batchStats) plus(b batchStats) batchStats {
	out := batchStats{count: a.count + b.count, sum: a.sum + b.sum, locked: a.locked + b.locked, buckets: map[float64]float64{}}
	for k, v := range a.buckets {
		out.buckets[k] += v
	}
	for k, v := range b.buckets {
		out.buckets[k] += v
	}
	return out
}

func (a batchStats) minus(b batchStats) batchStats {
	out := batchStats{count: a.count - b.count, sum: a.sum - b.sum, locked: a.locked - b.locked, buckets: map[float64]float64{}}
	for k, v := range a.buckets {
		out.buckets[k] = v - b.buckets[k]
	}
	return out
}

// String summarises the batches: how many, their mean size, and the bucket bounds under which
// half and nine tenths of them fall.
func (a batchStats) String() string {
	if a.count == 0 {
		return "none"
	}
	bounds := slices.Sorted(func(yield func(float64) bool) {
		for k := range a.buckets {
			if !yield(k) {
				return
			}
		}
	})
	at := func(q float64) string {
		for _, ub := range bounds {
			if a.buckets[ub] >= q*a.count {
				return fmt.Sprintf("≤ %g", ub)
			}
		}
		return "> the largest bucket"
	}
	return fmt.Sprintf("%.0f batches, %.1f orders each on average (median %s, p90 %s), %.0f of them under the lock",
		a.count, a.sum/a.count, at(0.5), at(0.9), a.locked)
}

func scrapeBatches(ctx context.Context, port int, token string) (batchStats, error) {
	families, err := cluster.ScrapeFamilies(ctx, port, token)
	if err != nil {
		return batchStats{}, err
	}
	s := batchStats{buckets: map[float64]float64{}}
	if f := families["stocksvc_batch_orders"]; f != nil && len(f.GetMetric()) == 1 {
		h := f.GetMetric()[0].GetHistogram()
		s.count, s.sum = float64(h.GetSampleCount()), h.GetSampleSum()
		for _, b := range h.GetBucket() {
			s.buckets[b.GetUpperBound()] = float64(b.GetCumulativeCount())
		}
	}
	if f := families["stocksvc_orders_per_lock"]; f != nil && len(f.GetMetric()) == 1 {
		s.locked = float64(f.GetMetric()[0].GetHistogram().GetSampleCount())
	}
	return s, nil
}
