package benchmarks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// The cache benchmark (-cache, issue #9): what the product view buys the two answers a flash
// sale gives most — "sold out" and "here is the product" — measured against GET /healthz, the
// cheapest answer the same deployment gives (no Postgres, no Redis, the same HTTP path through
// HAProxy). On two shared cores a rate means little from one run to the next, so each figure
// is a ratio to healthz measured in the same run, in rounds that take turns (a round of one,
// a round of the other, and so on), and the medians of the rounds are compared.
//
//  1. Sold-out refusals: a product is sold out, then wrk sends orders for it, each with its own
//     Idempotency-Key; every answer must be 409 sold-out, and the view should give it without
//     Postgres or the lock.
//  2. Product reads during a sale: a closed loop of buyers keeps ordering another product for
//     the whole phase, while the rounds read that product.
//  3. Stampede: the view's Redis key is deleted, the in-process lease waited out, and hundreds
//     of reads arrive at once; Postgres should see one rebuild, not one per reader.

const (
	// soldOutStock is what the sold-out product starts with: a few dozen orders sell it out.
	soldOutStock = 50
	// saleBuyers is how many connections of wrk keep buying during the reads phase: enough to
	// keep the purchase path busy (batches of several orders), few enough that the reads and
	// healthz rounds are not starved of CPU by the buyers alone.
	saleBuyers = 32
	// viewLease is STOCKSVC_CACHE_LEASE's default: how long a replica answers from the view it
	// holds in process before it looks at Redis again. The harness does not set it.
	viewLease = 50 * time.Millisecond
	// leaseMargin is waited on top of the lease before a stampede, for timers and scheduling
	// on a loaded machine.
	leaseMargin = 200 * time.Millisecond
	// cacheWarmUp is how long each kind of round runs once, unmeasured, before a phase's
	// rounds: connections opened, pools filled, the view built.
	cacheWarmUp = 2 * time.Second
	// profiledWarmUp is the warm-up of the load a phase measures, during which one replica is
	// profiled (for a second less: the profile must end before the load does).
	profiledWarmUp = 5 * time.Second
	// readTarget is issue #9's target for both ratios to healthz.
	readTarget = 0.7
)

// The kinds of round.
const (
	kindHealthz  = "healthz"
	kindRefusals = "sold-out orders"
	kindReads    = "product reads"
)

// cacheLoad is what a wrk round sends: GETs of path, or orders of product when it is nonzero.
type cacheLoad struct {
	kind    string
	path    string
	product int64
}

// cacheRound is what one wrk round measured.
type cacheRound struct {
	kind  string
	wrk   wrkSummary
	cpu   cpuUse
	view  viewStats // counted by the replicas over the round
	scans int64     // scans of the run's tables over the round (pg_stat_user_tables)
	// buyers is how many orders the background buyers had confirmed over the round, from the
	// replicas' stocksvc_orders_total; zero outside the reads phase.
	buyers float64
}

// rate is the answers with status per second of the round's window; status 0 counts all.
func (r cacheRound) rate(status int) float64 {
	if r.wrk.window <= 0 {
		return 0
	}
	n := r.wrk.requests
	if status != 0 {
		n = r.wrk.statuses[status]
	}
	return float64(n) / r.wrk.window.Seconds()
}

// cacheBench holds what the phases of the -cache mode share.
type cacheBench struct {
	h      *harness
	o      CacheOptions
	c      *cluster.Cluster
	script string // statusLua's path
	// tables reads the statistics of the run's database: its own queries scan no table of it.
	tables *pgx.Conn
	rdb    *redis.Client
	client *http.Client // the harness's own requests: selling out, stampedes
}

// soldOutPhase is what phase 1 measured.
type soldOutPhase struct {
	product int64
	sold    int           // orders confirmed while selling out (must be soldOutStock)
	zeroIn  time.Duration // from the last sale until a read said stock 0
	rounds  []cacheRound  // in the order they ran
}

// readsPhase is what phase 2 measured.
type readsPhase struct {
	product int64
	rounds  []cacheRound
	buyers  wrkSummary // the background buyers over the whole phase
}

// stampedeRound is what one stampede measured.
type stampedeRound struct {
	readBurst
	deleted bool // the view's key was in Redis when the harness deleted it
	view    viewStats
}

// readBurst is what reads released together got.
type readBurst struct {
	statuses  map[int]int   // 0: no answer (a transport error)
	latencies []float64     // ms, one per reader
	took      time.Duration // from the release to the last answer
	// misses counts the answers the service says it read from Postgres for (Cache-Status
	// fwd=miss): on a rebuild, the readers that joined the rebuilding replica's flight.
	misses int
}

// cache runs the three phases on one deployment and writes cache.md.
func (h *harness) cache(ctx context.Context, o CacheOptions) error {
	c, err := h.startCluster(ctx, "cache")
	if err != nil {
		return err
	}
	defer c.Close()
	b := &cacheBench{h: h, o: o, c: c, script: filepath.Join(c.Dir, "status.lua")}
	if err := os.WriteFile(b.script, []byte(statusLua), 0o644); err != nil {
		return err
	}
	if b.tables, err = pgx.Connect(ctx, c.DatabaseURL); err != nil {
		return fmt.Errorf("connect to %s: %w", c.Database, err)
	}
	defer b.tables.Close(context.WithoutCancel(ctx))
	redisOpts, err := redis.ParseURL(h.Cluster.RedisURL)
	if err != nil {
		return fmt.Errorf("parse %s: %w", cluster.Redact(h.Cluster.RedisURL), err)
	}
	b.rdb = redis.NewClient(redisOpts)
	defer b.rdb.Close()
	readers := o.StampedeReaders
	b.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: readers, MaxIdleConnsPerHost: readers, IdleConnTimeout: time.Minute}}
	defer b.client.CloseIdleConnections()

	if s, err := scrapeViews(ctx, c); err != nil {
		return err
	} else if missing := missingMetrics(s); len(missing) > 0 {
		h.Printf("[cache] warning: the replicas export no %s: this build has no view cache, and those figures will be absent\n", strings.Join(missing, ", "))
	}
	soldOut, err := b.soldOut(ctx)
	if err != nil {
		return err
	}
	reads, err := b.reads(ctx)
	if err != nil {
		return err
	}
	stampedes, err := b.stampedes(ctx, reads.product)
	if err != nil {
		return err
	}
	report := cacheReport(h.Cluster.Replicas, o, soldOut, reads, stampedes)
	h.Printf("\n%s\n", report)
	path := filepath.Join(h.Out, "cache.md")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	h.Printf("written to %s\n", path)
	if failed := cacheChecks(soldOut, reads, stampedes); len(failed) > 0 {
		for _, f := range failed {
			h.Printf("FAIL: %s\n", f)
		}
		return env.ErrFailed
	}
	return nil
}

func missingMetrics(s viewStats) []string {
	var missing []string
	for _, name := range viewMetrics {
		if !s.present[name] {
			missing = append(missing, name)
		}
	}
	return missing
}

// soldOut sells a product out, checks that reads say so, then measures refusals against
// healthz.
func (b *cacheBench) soldOut(ctx context.Context) (soldOutPhase, error) {
	var p soldOutPhase
	var err error
	if p.product, err = b.c.CreateProduct(ctx, "sold-out", soldOutStock); err != nil {
		return p, err
	}
	b.h.Printf("[cache] 1. sold-out refusals: selling out product %d (%d units)\n", p.product, soldOutStock)
	if p.sold, err = b.sellOut(ctx, p.product); err != nil {
		return p, err
	}
	lastSale := time.Now()
	if err := b.waitStock(ctx, p.product, 0, 10*time.Second); err != nil {
		return p, err
	}
	p.zeroIn = time.Since(lastSale)
	b.h.Printf("[cache]   %d sold; reads said stock 0 %v after the last sale\n", p.sold, p.zeroIn.Round(time.Millisecond))
	refusals := cacheLoad{kind: kindRefusals, product: p.product}
	healthz := cacheLoad{kind: kindHealthz, path: "/healthz"}
	p.rounds, err = b.alternate(ctx, refusals, healthz, nil)
	return p, err
}

// sellOut orders one unit at a time until the answer is 409, and returns how many were sold.
func (b *cacheBench) sellOut(ctx context.Context, product int64) (int, error) {
	sold := 0
	for {
		status, err := b.order(ctx, product)
		if err != nil {
			return sold, err
		}
		switch status {
		case http.StatusCreated:
			sold++
		case http.StatusConflict:
			if sold != soldOutStock {
				return sold, fmt.Errorf("sold out after %d sales of %d units", sold, soldOutStock)
			}
			return sold, nil
		default:
			return sold, fmt.Errorf("selling out: order answered %d", status)
		}
		if sold > soldOutStock {
			return sold, fmt.Errorf("sold %d of %d units", sold, soldOutStock)
		}
	}
}

// order places an order of one unit of product through the balancer and returns the status.
func (b *cacheBench) order(ctx context.Context, product int64) (int, error) {
	body := fmt.Sprintf(`{"customer_id":"sell-out","items":[{"product_id":%d,"quantity":1}]}`, product)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url("/v1/orders"), strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", uuid.NewString())
	res, err := b.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("order: %w", err)
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, res.Body)
	return res.StatusCode, nil
}

// waitStock reads product until its stock is want, for at most within.
func (b *cacheBench) waitStock(ctx context.Context, product, want int64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		stock, err := b.stock(ctx, product)
		if err != nil {
			return err
		}
		if stock == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("product %d: reads still say stock %d, not %d, %v after the last sale", product, stock, want, within)
		}
		if err := clock.Sleep(ctx, 5*time.Millisecond); err != nil {
			return err
		}
	}
}

func (b *cacheBench) stock(ctx context.Context, product int64) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url(fmt.Sprintf("/v1/products/%d", product)), nil)
	if err != nil {
		return 0, err
	}
	res, err := b.client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("read product %d: %w", product, err)
	}
	defer res.Body.Close()
	var p struct {
		Stock int64 `json:"stock"`
	}
	if err := json.NewDecoder(res.Body).Decode(&p); err != nil || res.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("read product %d: status %d (%v)", product, res.StatusCode, err)
	}
	return p.Stock, nil
}

func (b *cacheBench) url(path string) string {
	return fmt.Sprintf("http://127.0.0.1:%d%s", b.c.Front, path)
}

// reads measures product reads against healthz while buyers keep ordering the product.
func (b *cacheBench) reads(ctx context.Context) (readsPhase, error) {
	var p readsPhase
	var err error
	if p.product, err = b.c.CreateProduct(ctx, "on-sale", throughputStock); err != nil {
		return p, err
	}
	o := b.o
	// The buyers run until stopped; the bound is only for a harness that died without
	// stopping them (the supervisor kills them on every other way out).
	bound := time.Duration(2*o.Rounds+2)*(o.Duration+10*time.Second) + time.Minute
	b.h.Printf("[cache] 2. product reads during a sale: %d buyers ordering product %d throughout\n", saleBuyers, p.product)
	buyers, err := b.c.Sup.Start("buyers", filepath.Join(b.c.Dir, "buyers.wrk.txt"),
		[]string{"PRODUCT=" + strconv.FormatInt(p.product, 10)},
		b.h.Wrk, "-t", "2", "-c", strconv.Itoa(saleBuyers), "-d", fmt.Sprintf("%ds", int(bound.Seconds())),
		"-s", b.script, b.url(""))
	if err != nil {
		return p, err
	}
	reads := cacheLoad{kind: kindReads, path: fmt.Sprintf("/v1/products/%d", p.product)}
	healthz := cacheLoad{kind: kindHealthz, path: "/healthz"}
	p.rounds, err = b.alternate(ctx, reads, healthz, buyers)
	// wrk ends on SIGINT as at the end of its duration, printing its summary.
	buyers.Signal(syscall.SIGINT)
	if werr := buyers.Wait(); werr != nil && err == nil {
		err = fmt.Errorf("buyers' wrk: %w (see %s)", werr, buyers.Log)
	}
	if err != nil {
		return p, err
	}
	out, err := os.ReadFile(buyers.Log)
	if err != nil {
		return p, err
	}
	if p.buyers, err = parseWrkSummary(string(out)); err != nil {
		return p, fmt.Errorf("buyers: %w", err)
	}
	b.h.Printf("[cache]   buyers: %.0f confirmed/s over %v\n",
		float64(p.buyers.statuses[http.StatusCreated])/p.buyers.window.Seconds(), p.buyers.window.Round(time.Second))
	return p, nil
}

// alternate runs a warm-up of a and of b, then o.rounds rounds of each in turn, a first.
// background, if not nil, is a load running throughout: its CPU counts as the generator's.
func (b *cacheBench) alternate(ctx context.Context, a, other cacheLoad, background *cluster.Proc) ([]cacheRound, error) {
	// Where a replica's CPU goes under the load measured — what bounds the ratio, if anything
	// does — is profiled in its warm-up, longer for it, so that no measured round pays for it.
	file := "r1-" + strings.ReplaceAll(a.kind, " ", "-") + ".cpu.pprof"
	profiled := make(chan error, 1)
	go func() { profiled <- b.c.Profile(ctx, 0, profiledWarmUp-time.Second, file) }()
	_, err := b.round(ctx, a, "warm-up", profiledWarmUp, background)
	if perr := <-profiled; perr != nil {
		b.h.Printf("[cache]   no CPU profile of r1: %v\n", perr)
	} else {
		b.h.Printf("[cache]   CPU profile of r1 under %s: go tool pprof -top %s %s\n", a.kind, b.h.Binary, filepath.Join(b.c.Dir, file))
	}
	if err != nil {
		return nil, err
	}
	if _, err := b.round(ctx, other, "warm-up", cacheWarmUp, background); err != nil {
		return nil, err
	}
	var rounds []cacheRound
	for i := range b.o.Rounds {
		for _, l := range []cacheLoad{a, other} {
			r, err := b.round(ctx, l, fmt.Sprintf("round %d", i+1), b.o.Duration, background)
			if err != nil {
				return nil, err
			}
			b.h.Printf("[cache]   round %d, %s: %.0f/s, %s, p50 %.1f ms, p99 %.1f ms\n",
				i+1, l.kind, r.rate(0), report.Statuses(r.wrk.statuses), r.wrk.p50, r.wrk.p99)
			rounds = append(rounds, r)
		}
	}
	return rounds, nil
}

// cacheSample is what the harness reads at a round's ends.
type cacheSample struct {
	cpu    cpuUse
	view   viewStats
	scans  int64
	buyers float64 // confirmed orders, all products
}

func (b *cacheBench) sample(ctx context.Context, background *cluster.Proc) (cacheSample, error) {
	var s cacheSample
	var err error
	if s.cpu, err = readCPU(ctx, b.c); err != nil {
		return s, err
	}
	if background != nil {
		s.cpu["load generator"] += procCPU(background.Pid())
	}
	if s.view, err = scrapeViews(ctx, b.c); err != nil {
		return s, err
	}
	s.buyers = s.view.outcomes["confirmed"]
	// An independent count of what the service asked Postgres: every query of the read, sold-out
	// or purchase path scans at least one of the run's tables. (pg_stat_database's transaction
	// count is no use here: the readiness checks' pings count as transactions, and reach it in
	// bursts whenever a backend next does real work.) A backend reports its scans when it next
	// goes idle, at most once a second, or ten seconds later when it stays idle: a scan may be
	// counted in the round after its own.
	err = b.tables.QueryRow(ctx, `SELECT coalesce(sum(coalesce(seq_scan, 0) + coalesce(idx_scan, 0)), 0)::bigint FROM pg_stat_user_tables`).Scan(&s.scans)
	if err != nil {
		return s, fmt.Errorf("read pg_stat_user_tables: %w", err)
	}
	return s, nil
}

// round runs one wrk round of load for d through the balancer.
func (b *cacheBench) round(ctx context.Context, l cacheLoad, name string, d time.Duration, background *cluster.Proc) (cacheRound, error) {
	before, err := b.sample(ctx, background)
	if err != nil {
		return cacheRound{}, err
	}
	cmd := exec.CommandContext(ctx, b.h.Wrk, "-t", "2", "-c", strconv.Itoa(b.o.Clients),
		"-d", fmt.Sprintf("%ds", int(d.Seconds())), "--latency", "-s", b.script, b.url(l.path))
	cmd.Env = os.Environ()
	if l.product != 0 {
		cmd.Env = append(cmd.Env, "PRODUCT="+strconv.FormatInt(l.product, 10))
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return cacheRound{}, fmt.Errorf("wrk %s: %w: %s", l.kind, err, out.String())
	}
	after, err := b.sample(ctx, background)
	if err != nil {
		return cacheRound{}, err
	}
	file := strings.NewReplacer(" ", "-", "/", "").Replace(l.kind + " " + name)
	_ = os.WriteFile(filepath.Join(b.c.Dir, file+".wrk.txt"), out.Bytes(), 0o644)
	s, err := parseWrkSummary(out.String())
	if err != nil {
		return cacheRound{}, err
	}
	if s.statuses == nil {
		return cacheRound{}, errors.New("wrk printed no status counts (is the script statusLua?)")
	}
	r := cacheRound{kind: l.kind, wrk: s, cpu: after.cpu.minus(before.cpu), view: after.view.minus(before.view),
		scans: after.scans - before.scans, buyers: after.buyers - before.buyers}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.cpu["load generator"] += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return r, nil
}

// stampedes runs o.stampedeRounds stampedes on product.
func (b *cacheBench) stampedes(ctx context.Context, product int64) ([]stampedeRound, error) {
	o := b.o
	if o.StampedeRounds == 0 {
		return nil, nil
	}
	key := viewKey(b.c.Prefix, product)
	b.h.Printf("[cache] 3. stampede: %d rounds of %d reads of product %d at once, its view (%s) deleted and the lease (%v) waited out before each\n",
		o.StampedeRounds, o.StampedeReaders, product, key, viewLease)
	var rounds []stampedeRound
	for i := range o.StampedeRounds {
		r, err := b.stampede(ctx, product, key)
		if err != nil {
			return nil, err
		}
		b.h.Printf("[cache]   round %d: Postgres queries %s, %s (%d read from Postgres for them), p50 %.1f ms, p99 %.1f ms\n", i+1,
			queryFigure(r.view), report.Statuses(r.statuses), r.misses,
			report.Percentile(r.latencies, 50), report.Percentile(r.latencies, 99))
		rounds = append(rounds, r)
	}
	return rounds, nil
}

// viewKey is the Redis key of product's view: the replicas' prefix, then the id in braces (a
// Redis Cluster hash tag, so that the view and its rebuild lock share a slot).
func viewKey(prefix string, product int64) string {
	return fmt.Sprintf("%sview:product:{%d}", prefix, product)
}

func (b *cacheBench) stampede(ctx context.Context, product int64, key string) (stampedeRound, error) {
	var r stampedeRound
	readers := b.o.StampedeReaders
	// The readers' connections are opened first, on healthz, so that the stampede measures
	// reads and not TCP handshakes; and the view is read once, so that its key is there.
	if opened := b.releaseReads(ctx, "/healthz", readers); opened.statuses[http.StatusOK] != readers {
		return r, fmt.Errorf("opening %d connections: %s", readers, report.Statuses(opened.statuses))
	}
	if _, err := b.stock(ctx, product); err != nil {
		return r, err
	}
	before, err := b.sample(ctx, nil)
	if err != nil {
		return r, err
	}
	n, err := b.rdb.Del(ctx, key).Result()
	if err != nil {
		return r, fmt.Errorf("delete %s: %w", key, err)
	}
	r.deleted = n == 1
	if err := clock.Sleep(ctx, viewLease+leaseMargin); err != nil {
		return r, err
	}
	r.readBurst = b.releaseReads(ctx, fmt.Sprintf("/v1/products/%d", product), readers)
	after, err := b.sample(ctx, nil)
	if err != nil {
		return r, err
	}
	r.view = after.view.minus(before.view)
	return r, ctx.Err()
}

// releaseReads sends n GETs of path through the balancer at once: every reader waits at a barrier
// until all are ready.
func (b *cacheBench) releaseReads(ctx context.Context, path string, n int) readBurst {
	codes := make([]int, n)
	missed := make([]bool, n)
	latencies := make([]float64, n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(n)
	for i := range n {
		done.Go(func() {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url(path), nil)
			ready.Done()
			<-start
			if err != nil {
				return
			}
			began := time.Now()
			res, err := b.client.Do(req)
			if err == nil {
				_, err = io.Copy(io.Discard, res.Body)
				res.Body.Close()
				if err == nil {
					codes[i] = res.StatusCode
					missed[i] = strings.Contains(res.Header.Get("Cache-Status"), "fwd=miss")
				}
			}
			latencies[i] = float64(time.Since(began)) / float64(time.Millisecond)
		})
	}
	ready.Wait()
	released := time.Now()
	close(start)
	done.Wait()
	r := readBurst{statuses: map[int]int{}, latencies: latencies, took: time.Since(released)}
	for i, c := range codes {
		r.statuses[c]++
		if missed[i] {
			r.misses++
		}
	}
	return r
}
