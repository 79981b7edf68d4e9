package benchmarks

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/loadtest/cluster"
)

// The reference of -throughput -reference (issue #24): the flash-sale design that keeps nothing
// (prededuct/main.go: a Lua check-and-decrement and a stream append in Redis, then 201),
// deployed as the service is — three processes with GOMAXPROCS=1 behind HAProxy with the same
// configuration, on the same Redis under a key prefix of the run's — and measured in the same
// run, in rounds that take turns with the service's and with GET /healthz through the service's
// balancer. A ratio taken within a run absorbs the shared machine's changes of speed.

// deployment is what a load is sent to and whose CPU is counted: balanced processes, and the
// servers they use.
type deployment struct {
	name     string
	front    int             // the balancer's port
	dir      string          // where wrk's script and output go
	replicas []*cluster.Proc // their CPU is the "replicas" row
	balancer *cluster.Proc
	metrics  []int    // replicas' ports whose batch histograms are read (none for the reference)
	token    string   // the admin token the replicas' /metrics asks for
	servers  *servers // nil: every postgres and redis-server process on the machine
}

// serviceDeployment is the service's replicas and balancer.
func serviceDeployment(c *cluster.Cluster, srv *servers) *deployment {
	d := &deployment{name: "stocksvc", front: c.Front, dir: c.Dir, balancer: c.Balancer, metrics: c.ReplicaPorts(), token: c.Token, servers: srv}
	for _, r := range c.Replicas {
		d.replicas = append(d.replicas, r.Proc)
	}
	return d
}

// servers are the Postgres and Redis servers a run uses: their CPU is counted, and no other
// server's (the machine may run other Postgres clusters and redis-servers, a drill's or a
// peer's).
type servers struct {
	postmaster int // the postmaster's pid; its children are the backends and workers
	redis      int // redis-server's pid
}

// findServers finds the pids of the servers behind databaseURL and redisURL, which run on this
// machine (loopback): the postmaster is the parent of a backend, and Redis says its own pid.
func findServers(ctx context.Context, databaseURL, redisURL string) (*servers, error) {
	conn, err := pgx.Connect(ctx, databaseURL)
	if err != nil {
		return nil, fmt.Errorf("connect to find Postgres's pid: %w", err)
	}
	defer conn.Close(ctx)
	var backend int
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		return nil, fmt.Errorf("find Postgres's pid: %w", err)
	}
	s := &servers{postmaster: parentPid(backend)}
	if s.postmaster <= 1 {
		return nil, fmt.Errorf("backend %d has no postmaster in /proc: is Postgres on this machine?", backend)
	}
	opts, err := redis.ParseURL(redisURL)
	if err != nil {
		return nil, err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return nil, fmt.Errorf("find Redis's pid: %w", err)
	}
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			s.redis, _ = strconv.Atoi(v)
		}
	}
	if s.redis == 0 {
		return nil, fmt.Errorf("redis INFO server gave no process_id")
	}
	return s, nil
}

// pids lists the Postgres processes (the postmaster's children; the postmaster is counted by
// postgresCPU) and Redis's.
func (s *servers) pids() (postgres, rds []int, err error) {
	if s == nil {
		if postgres, err = pidsNamed("postgres"); err != nil {
			return nil, nil, err
		}
		rds, err = pidsNamed("redis-server")
		return postgres, rds, err
	}
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil, err
	}
	postgres = []int{}
	for _, e := range entries {
		if pid, err := strconv.Atoi(e.Name()); err == nil && parentPid(pid) == s.postmaster {
			postgres = append(postgres, pid)
		}
	}
	return postgres, []int{s.redis}, nil
}

// postmasterCPU is the CPU time of the postmaster itself and of every child of it that has
// ended (cutime and cstime: it reaps them all). With its live children's, it counts every
// backend's time, including the backends that ended between two samples, which a sum over
// the live ones alone would lose.
func (s *servers) postmasterCPU() time.Duration {
	if s == nil {
		return 0
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.postmaster))
	if err != nil {
		return 0
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 15 {
		return 0
	}
	var ticks int64
	for _, f := range fields[11:15] { // utime, stime, cutime, cstime
		n, _ := strconv.ParseInt(f, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * clockTick
}

// parentPid is pid's parent (0 if pid is gone).
func parentPid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := strings.LastIndexByte(string(b), ')')
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// startReference builds the reference, starts it beside the deployment c (under c's
// supervisor, so that c.Close stops it; its keys under c's prefix, so that c.Close deletes
// them) and gives product stock units in it.
func (h *harness) startReference(ctx context.Context, c *cluster.Cluster, srv *servers, product, stock int64) (*deployment, *reference, error) {
	root, err := cluster.RepositoryRoot()
	if err != nil {
		return nil, nil, err
	}
	dir := filepath.Join(c.Dir, "reference")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, nil, err
	}
	binary := filepath.Join(h.Out, "prededuct")
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./benchmarks/prededuct")
	build.Dir = filepath.Join(root, "loadtest")
	if out, err := build.CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("build the reference: %w: %s", err, out)
	}
	ref := &reference{prefix: c.Prefix + "prededuct:", product: product, stock: stock}
	opts, err := redis.ParseURL(c.RedisURL)
	if err != nil {
		return nil, nil, err
	}
	ref.rdb = redis.NewClient(opts)
	if err := ref.rdb.Set(ctx, ref.stockKey(), stock, 0).Err(); err != nil {
		ref.rdb.Close()
		return nil, nil, fmt.Errorf("the reference's stock: %w", err)
	}
	ports, err := cluster.FreePorts(len(c.Replicas))
	if err != nil {
		ref.rdb.Close()
		return nil, nil, err
	}
	d := &deployment{name: "reference", dir: dir, servers: srv}
	for i, port := range ports {
		name := fmt.Sprintf("ref%d", i+1)
		p, err := c.Sup.Start(name, filepath.Join(dir, name+".log"), []string{
			"PREDEDUCT_ADDR=127.0.0.1:" + strconv.Itoa(port), "REDIS_URL=" + c.RedisURL,
			"PREDEDUCT_REDIS_PREFIX=" + ref.prefix, "GOMAXPROCS=1",
		}, binary)
		if err != nil {
			ref.rdb.Close()
			return nil, nil, err
		}
		if err := cluster.WaitReady(ctx, p, fmt.Sprintf("http://127.0.0.1:%d/readyz", port), 30*time.Second); err != nil {
			ref.rdb.Close()
			return nil, nil, err
		}
		d.replicas = append(d.replicas, p)
	}
	if d.front, d.balancer, err = c.StartBalancer(ctx, "reference", ports); err != nil {
		ref.rdb.Close()
		return nil, nil, err
	}
	return d, ref, nil
}

// reference is the reference's state in Redis.
type reference struct {
	rdb            *redis.Client
	prefix         string
	product, stock int64
}

func (r *reference) stockKey() string { return r.prefix + "stock:" + strconv.FormatInt(r.product, 10) }

// ledger reads what the reference recorded: the orders in its stream and the units its stock
// went down by (one unit per order in this load: they must be equal). Both in one transaction:
// the orders still in flight when wrk stopped may be taken meanwhile.
func (r *reference) ledger(ctx context.Context) (orders, taken int64, err error) {
	var xlen *redis.IntCmd
	var left *redis.StringCmd
	if _, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		xlen, left = p.XLen(ctx, r.prefix+"orders"), p.Get(ctx, r.stockKey())
		return nil
	}); err != nil {
		return 0, 0, fmt.Errorf("read the reference's ledger: %w", err)
	}
	n, err := left.Int64()
	return xlen.Val(), r.stock - n, err
}

// sideBySide is the rounds of -throughput -reference, and what they measured.
type sideBySide struct {
	service, reference, healthz []phase // by round
	// The reference's own record after the rounds (warm-up included), beside the 201s that wrk
	// counted: wrk does not count the answers in flight when it stops, so the stream may hold
	// up to one order per connection and run more.
	streamOrders, unitsTaken, counted int64
}

// sideBySideRounds runs rounds rounds, each a closed loop of clients connections for d of the
// service's orders, the reference's, and GET /healthz through the service's balancer, in an
// order that turns each round (so that no load always follows the same one), after a warm-up
// of each. r1's CPU profile is taken during the first round of the service.
func (h *harness) sideBySideRounds(ctx context.Context, c *cluster.Cluster, svc, ref *deployment, refState *reference, product int64, clients, rounds int, d time.Duration) (sideBySide, error) {
	var s sideBySide
	loads := []struct {
		name string
		run  func(name string, d time.Duration) (phase, error)
		into *[]phase
	}{
		{"stocksvc", func(name string, d time.Duration) (phase, error) {
			return h.wrkLoop(ctx, svc, name, product, clients, 0, d)
		}, &s.service},
		{"reference", func(name string, d time.Duration) (phase, error) {
			return h.wrkLoop(ctx, ref, name, product, clients, 0, d)
		}, &s.reference},
		{"healthz", func(name string, d time.Duration) (phase, error) {
			return h.wrkGets(ctx, svc, name, "/healthz", clients, d)
		}, &s.healthz},
	}
	for _, l := range loads {
		h.Printf("[throughput] warm-up of %s: %d clients for 3s\n", l.name, clients)
		p, err := l.run(l.name+" warm-up", 3*time.Second)
		if err != nil {
			return s, err
		}
		if l.name == "reference" {
			s.counted += int64(p.count(http.StatusCreated))
		}
	}
	for i := range rounds {
		for j := range loads {
			l := loads[(i+j)%len(loads)]
			name := fmt.Sprintf("%s round %d", l.name, i+1)
			var profiled chan error
			if i == 0 && l.name == "stocksvc" {
				profiled = make(chan error, 1)
				go func() { profiled <- c.Profile(ctx, 0, d-time.Second, "r1.cpu.pprof") }()
			}
			p, err := l.run(name, d)
			if err != nil {
				return s, err
			}
			if profiled != nil {
				if err := <-profiled; err != nil {
					h.Printf("[throughput]   no CPU profile of r1: %v\n", err)
				}
			}
			ok := p.count(http.StatusCreated)
			if l.name == "healthz" {
				ok = p.count(http.StatusOK)
			}
			if l.name == "reference" {
				s.counted += int64(ok)
			}
			h.Printf("[throughput]   %s: %.0f/s answered 2xx, %d other, %d failed\n", name, float64(ok)/p.window.Seconds(), p.total()-ok-p.count(0), p.count(0))
			*l.into = append(*l.into, p)
		}
	}
	var err error
	s.streamOrders, s.unitsTaken, err = refState.ledger(ctx)
	return s, err
}

// rate is a phase's 2xx answers per second (201 for orders, 200 for healthz).
func rate(p phase) float64 {
	if p.window <= 0 {
		return 0
	}
	return float64(p.count(http.StatusCreated)+p.count(http.StatusOK)) / p.window.Seconds()
}

// medianPhase is the service's round with the median rate (the lower middle of an even count).
func medianPhase(ps []phase) phase {
	s := slices.Clone(ps)
	slices.SortFunc(s, func(a, b phase) int {
		switch {
		case rate(a) < rate(b):
			return -1
		case rate(a) > rate(b):
			return 1
		}
		return 0
	})
	return s[(len(s)-1)/2]
}

// report is the side-by-side section of throughput.md.
func (s sideBySide) report() string {
	var b strings.Builder
	b.WriteString("\n## Against the design that keeps nothing (issue #24)\n\n")
	b.WriteString("Closed loops of the same wrk load, in rounds that take turns: the service's orders; the Redis pre-deduction reference's orders (Lua check-and-decrement and stream append, then 201: no Postgres, no idempotency record), three processes behind the same HAProxy configuration; GET /healthz through the service's balancer.\n\n")
	b.WriteString("| round | stocksvc confirmed/s | reference orders/s | healthz/s | stocksvc ÷ reference | stocksvc ÷ healthz | reference ÷ healthz |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	var svc, ref, hz, toRef, toHz, refHz []float64
	for i := range s.service {
		a, r, z := rate(s.service[i]), rate(s.reference[i]), rate(s.healthz[i])
		svc, ref, hz = append(svc, a), append(ref, r), append(hz, z)
		toRef, toHz, refHz = append(toRef, a/r), append(toHz, a/z), append(refHz, r/z)
		fmt.Fprintf(&b, "| %d | %.0f | %.0f | %.0f | %.2f× | %.2f× | %.2f× |\n", i+1, a, r, z, a/r, a/z, r/z)
	}
	fmt.Fprintf(&b, "| **median** | **%.0f** | **%.0f** | **%.0f** | **%.2f×** | **%.2f×** | **%.2f×** |\n",
		median(svc), median(ref), median(hz), median(toRef), median(toHz), median(refHz))
	b.WriteString("\nThe ratios' medians are of the rounds' ratios (each round's loads ran back to back).\n")

	// CPU per answer: each load's rounds summed.
	sum := func(ps []phase, code uint16) (cpuUse, int, time.Duration) {
		total, n, w := cpuUse{}, 0, time.Duration(0)
		for _, p := range ps {
			for k, v := range p.cpu {
				total[k] += v
			}
			n += p.count(code)
			w += p.window
		}
		return total, n, w
	}
	sc, sn, sw := sum(s.service, http.StatusCreated)
	rc, rn, rw := sum(s.reference, http.StatusCreated)
	hc, hn, hw := sum(s.healthz, http.StatusOK)
	b.WriteString("\nCPU per answer (utime+stime of each process group over its rounds, ÷ the 2xx answers; Postgres and Redis are the run's servers, counted in every load):\n\n")
	b.WriteString("| process | stocksvc, per confirmed order | reference, per order | healthz, per answer |\n| --- | ---: | ---: | ---: |\n")
	var st, rt, ht time.Duration
	for _, g := range cpuGroups {
		st, rt, ht = st+sc[g], rt+rc[g], ht+hc[g]
		fmt.Fprintf(&b, "| %s | %.1f µs | %.1f µs | %.1f µs |\n", g, perOrder(sc[g], sn), perOrder(rc[g], rn), perOrder(hc[g], hn))
	}
	fmt.Fprintf(&b, "| **all of the above** | **%.1f µs** | **%.1f µs** | **%.1f µs** |\n", perOrder(st, sn), perOrder(rt, rn), perOrder(ht, hn))
	fmt.Fprintf(&b, "| whole machine (/proc/stat) | %.1f µs | %.1f µs | %.1f µs |\n", perOrder(sc["machine"], sn), perOrder(rc["machine"], rn), perOrder(hc["machine"], hn))
	fmt.Fprintf(&b, "| cores busy (machine) | %.2f | %.2f | %.2f |\n", sc["machine"].Seconds()/sw.Seconds(), rc["machine"].Seconds()/rw.Seconds(), hc["machine"].Seconds()/hw.Seconds())
	fmt.Fprintf(&b, "\nThe reference's own record: %d orders in its stream, its stock down by %d units; wrk counted %d of its 201s (it does not count the answers in flight when it stops).\n",
		s.streamOrders, s.unitsTaken, s.counted)
	return b.String()
}
