// Package opening is -opening, the hardest minute of a sale (issue #20): a product whose sale
// opens a few seconds after the harness creates it (by Postgres's clock), a limit per
// customer, and a crowd driven by k6 (loadtest/opening.js) that arrives before the opening and
// keeps buying through it. It measures the fast refusal before the opening against GET
// /healthz through the same balancer, the time from the opening to the first confirmed order,
// confirmed orders in each of the first seconds and the sold-out moment — all by Postgres's
// clock — and checks the invariants in Postgres: nothing confirmed before the opening, no
// customer above the limit, no oversell.
package opening

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// Options configure -opening.
type Options struct {
	Stock     int           // units of the product
	Limit     int           // max_per_customer
	Customers int           // customers in the crowd, each with a token of its own
	CrowdVUs  int           // k6 VUs buying at once
	Closed    int           // closed-loop VUs of the refusal and healthz phases
	Lead      time.Duration // from the product's creation to the opening
	Crowd     time.Duration // how long the crowd keeps buying after the opening
	Greedy    int           // every Greedy-th customer sends Limit+2 orders at once (0: none)
	// Skew, when not zero, runs the first replica's clock this far ahead (negative: behind)
	// with STOCKSVC_CLOCK_SKEW (a demonstration setting): Postgres's clock must still decide.
	Skew time.Duration
	// Line, when positive, sells the product through a line admitting this many buyers at once
	// (issue #33): the crowd joins, waits with the long-poll and orders with its pass.
	Line int
	// Fair, when on, runs issue #33's acceptance (fair.go) instead of the k6 crowd.
	Fair FairOptions
}

// Script is opening.js's file name, beside flashsale.js.
const Script = "opening.js"

// Register defines the -opening flags on fs.
func (o *Options) Register(fs *flag.FlagSet, on *bool) {
	fs.BoolVar(on, "opening", false, "the opening (issue #20): a sale that opens a few seconds in, with a limit per customer, and a k6 crowd through the opening (loadtest/opening.js); docs/loadtest.md")
	fs.IntVar(&o.Stock, "opening-stock", 500, "in -opening, units of the product")
	fs.IntVar(&o.Limit, "opening-limit", 2, "in -opening, max_per_customer")
	fs.IntVar(&o.Customers, "opening-customers", 3000, "in -opening, customers in the crowd, each with a token of its own")
	fs.IntVar(&o.CrowdVUs, "opening-vus", 150, "in -opening, k6 VUs of the crowd, buying at once")
	fs.IntVar(&o.Closed, "opening-closed", 64, "in -opening, closed-loop clients of the refusal and healthz phases")
	fs.DurationVar(&o.Lead, "opening-lead", 12*time.Second, "in -opening, from the product's creation to the opening (the phases before it take 6 s, k6 needs some to start)")
	fs.DurationVar(&o.Crowd, "opening-crowd", 10*time.Second, "in -opening, how long the crowd buys after the opening (whole seconds)")
	fs.IntVar(&o.Greedy, "opening-greedy", 5, "in -opening, every n-th customer sends limit+2 orders at once (0: none)")
	o.Fair.register(fs)
	fs.IntVar(&o.Line, "opening-line", 0, "in -opening, sell the product through a line admitting this many buyers at once (issue #33): the k6 crowd joins, waits with the long-poll and orders with its pass (0: no line)")
	fs.DurationVar(&o.Skew, "opening-skew", 0, "in -opening, run the first replica's clock this far ahead (negative: behind), STOCKSVC_CLOCK_SKEW with STOCKSVC_DEMO_UNSAFE=1: nothing may sell before the opening all the same")
}

// Validate refuses -opening flags it cannot run with.
func (o Options) Validate() error {
	if o.Fair.On {
		return o.Fair.validate()
	}
	switch {
	case o.Line < 0 || o.Line > 10000:
		return errors.New("-opening-line is 0 (no line) to 10000")
	case o.Stock < 1 || o.Limit < 1 || o.Customers < 1 || o.CrowdVUs < 1 || o.Closed < 1 || o.Greedy < 0:
		return errors.New("-opening-stock, -limit, -customers, -vus and -closed must be positive, -opening-greedy not negative")
	case o.Lead < 8*time.Second:
		return errors.New("-opening-lead must be at least 8s: the refusal and healthz phases take the 6 s before the opening")
	case o.Crowd < time.Second:
		return errors.New("-opening-crowd must be at least 1s")
	}
	return nil
}

// Run runs the opening once and reports it; env.ErrFailed when an invariant or a k6
// threshold failed, env.ErrStopped when a signal cut it short.
func Run(ctx context.Context, h *env.Harness, o Options) error {
	if o.Fair.On {
		return RunFair(ctx, h, o.Fair)
	}
	dir := filepath.Join(h.Out, "opening")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	database := fmt.Sprintf("stocksvc_load_%d_opening", time.Now().Unix())
	// Every customer of the crowd has a token of its own, which the replicas verify; k6
	// cannot sign ES256, so the harness mints them all beforehand.
	identity, err := cluster.NewIdentity(dir)
	if err != nil {
		return err
	}
	customers := make([]string, o.Customers)
	for i := range customers {
		customers[i] = "c-" + strconv.Itoa(i)
	}
	tokens := filepath.Join(dir, "tokens.json")
	if err := identity.WriteTokens(tokens, customers); err != nil {
		return err
	}
	h.Printf("[opening] starting %d replicas, verifying the tokens of %d customers\n", h.Cluster.Replicas, o.Customers)
	if o.Skew != 0 {
		h.Printf("[opening] replica r1's clock runs %v off (STOCKSVC_CLOCK_SKEW)\n", o.Skew)
	}
	c, err := cluster.Start(ctx, cluster.Config{
		Dir: dir, Binary: h.Binary, HAProxy: h.HAProxy, Replicas: h.Cluster.Replicas,
		ServerURL: h.Cluster.DatabaseURL, Database: database,
		RedisURL: h.Cluster.RedisURL, Prefix: "stocksvc-load:" + rand.Text()[:10] + ":", Token: rand.Text(),
		Redlock: h.Cluster.Redlock, Keep: h.Cluster.Keep, Warnings: h.W, Identity: identity,
		Env: func(i int) []string {
			s := []string{"STOCKSVC_DEFENSE=" + h.Cluster.Defense, "STOCKSVC_LOCK_WAIT=" + h.Cluster.LockWait.String()}
			if h.Cluster.Defense != env.DefaultDefense {
				s = append(s, "STOCKSVC_DEMO_UNSAFE=1")
			}
			if i == 0 && o.Skew != 0 {
				s = append(s, "STOCKSVC_CLOCK_SKEW="+o.Skew.String(), "STOCKSVC_DEMO_UNSAFE=1")
			}
			return s
		},
	})
	if err != nil {
		return err
	}
	defer c.Close()
	pool, err := pgxpool.New(context.WithoutCancel(ctx), c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", database, err)
	}
	defer pool.Close()

	// The opening, by Postgres's clock: the clock that decides.
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return fmt.Errorf("read Postgres's clock: %w", err)
	}
	opens := now.Add(o.Lead).Truncate(time.Millisecond)
	product, err := createProduct(ctx, c, o, opens)
	if err != nil {
		return err
	}
	h.Printf("[opening] product %d: %d units, at most %d a customer, opens at %s (Postgres's clock, in %v)\n",
		product, o.Stock, o.Limit, opens.Format("15:04:05.000"), o.Lead)

	script := filepath.Join(filepath.Dir(h.Script), Script)
	summaryPath := filepath.Join(dir, "summary.json")
	k6env := []string{
		"BASE_URL=" + c.FrontURL(),
		"ADMIN_TOKEN=" + c.Token,
		"PRODUCT_ID=" + strconv.FormatInt(product, 10),
		"OPENS_AT_MS=" + strconv.FormatInt(opens.UnixMilli(), 10),
		"LEAD_S=" + strconv.Itoa(int(o.Lead.Seconds())),
		"STOCK=" + strconv.Itoa(o.Stock),
		"LIMIT=" + strconv.Itoa(o.Limit),
		"CUSTOMERS=" + strconv.Itoa(o.Customers),
		"CROWD_VUS=" + strconv.Itoa(o.CrowdVUs),
		"CLOSED_VUS=" + strconv.Itoa(o.Closed),
		"CROWD_S=" + strconv.Itoa(int(o.Crowd.Seconds())),
		"GREEDY=" + strconv.Itoa(o.Greedy),
		"LINE=" + strconv.Itoa(o.Line),
		"TOKENS_FILE=" + tokens,
		"SUMMARY_JSON=" + summaryPath,
		"SUMMARY_TXT=" + filepath.Join(dir, "summary.txt"),
		"K6_NO_USAGE_REPORT=true",
	}
	argv := []string{h.K6, "run", "--no-usage-report", "--quiet", "--console-output", filepath.Join(dir, "k6-console.log"), script}
	k6, err := c.Sup.Start("k6", filepath.Join(dir, "k6.log"), k6env, argv...)
	if err != nil {
		return err
	}
	stopped := false
	select {
	case <-k6.Done():
	case <-ctx.Done():
		stopped = true
		k6.Signal(syscall.SIGINT)
		<-k6.Done()
	}
	k6Err := k6.Err()
	var stopping sync.WaitGroup
	for _, r := range c.Replicas {
		stopping.Go(func() { _ = r.Proc.Stop(20 * time.Second) })
	}
	stopping.Wait()

	var summary k6Summary
	b, err := os.ReadFile(summaryPath)
	if err == nil {
		err = json.Unmarshal(b, &summary)
	}
	if err != nil {
		return fmt.Errorf("k6 left no usable summary (see %s): %w", filepath.Join(dir, "k6.log"), err)
	}
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	fig, err := measure(checkCtx, pool, product)
	if err != nil {
		return err
	}
	invariants, _, err := verdict.Ledgers(checkCtx, pool)
	if err != nil {
		return err
	}
	rules, err := verdict.Rules(checkCtx, pool)
	if err != nil {
		return err
	}
	invariants = append(invariants, rules...)
	res := result{o: o, replicas: h.Cluster.Replicas, fig: fig, summary: summary, invariants: invariants, k6Err: k6Err, stopped: stopped}
	text := res.String()
	h.Printf("\n%s", text)
	if err := os.WriteFile(filepath.Join(h.Out, "opening.md"), []byte(text), 0o644); err != nil {
		return err
	}
	h.Printf("written to %s; logs in %s\n", filepath.Join(h.Out, "opening.md"), dir)
	switch {
	case res.failed():
		return env.ErrFailed
	case stopped:
		return env.ErrStopped
	}
	return nil
}

// createProduct creates the product through the balancer, as an admin.
func createProduct(ctx context.Context, c *cluster.Cluster, o Options, opens time.Time) (int64, error) {
	var p struct {
		ID           int64      `json:"id"`
		SaleStartsAt *time.Time `json:"sale_starts_at"`
	}
	body := map[string]any{"sku": "OPENING-" + rand.Text()[:8], "name": "the opening", "stock": o.Stock,
		"sale_starts_at": opens.UTC().Format(time.RFC3339Nano), "max_per_customer": o.Limit}
	if o.Line > 0 {
		body["line"] = map[string]any{"admit": o.Line, "admission_for": 60}
	}
	err := c.CreateProductWith(ctx, body, &p)
	if err != nil {
		return 0, err
	}
	if p.SaleStartsAt == nil || !p.SaleStartsAt.Equal(opens) {
		return 0, fmt.Errorf("create the product: it answered sale_starts_at %v, not %v: does the service know the sale rules?", p.SaleStartsAt, opens)
	}
	return p.ID, nil
}

// figures are what Postgres says of the opening, on its own clock.
type figures struct {
	opens      time.Time
	firstSale  time.Duration // from the opening to the first confirmed order's created_at; <0: none
	perSecond  [5]int64      // confirmed orders whose created_at falls in each of the first five seconds
	perTenth   [10]int64     // and in each tenth of the first second
	sold       int64
	stock      int64
	soldOutAt  time.Duration // from the opening to the last unit's order; 0: not sold out
	customers  int64         // customers who bought
	atTheLimit int64         // customers holding exactly the limit
}

// measure reads the figures from the tables.
func measure(ctx context.Context, pool *pgxpool.Pool, product int64) (figures, error) {
	var f figures
	var first, last *time.Time
	err := pool.QueryRow(ctx, `
		SELECT p.sale_starts_at, p.initial_stock,
		       (SELECT min(o.created_at) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = p.id),
		       (SELECT max(o.created_at) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = p.id),
		       COALESCE((SELECT sum(i.quantity) FROM order_items i WHERE i.product_id = p.id), 0)::bigint,
		       (SELECT count(DISTINCT o.customer_id) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = p.id),
		       (SELECT count(*) FROM (SELECT o.customer_id FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = p.id
		                               GROUP BY o.customer_id HAVING sum(i.quantity) = p.max_per_customer) l)
		  FROM products p WHERE p.id = $1`, product).Scan(&f.opens, &f.stock, &first, &last, &f.sold, &f.customers, &f.atTheLimit)
	if err != nil {
		return f, fmt.Errorf("read the product: %w", err)
	}
	f.firstSale = -1
	if first != nil {
		f.firstSale = first.Sub(f.opens)
	}
	if last != nil && f.sold >= f.stock {
		f.soldOutAt = last.Sub(f.opens)
	}
	rows, _ := pool.Query(ctx, `
		SELECT floor(10 * extract(epoch FROM o.created_at - $2::timestamptz))::int AS tenth, count(*)
		  FROM orders o JOIN order_items i ON i.order_id = o.id
		 WHERE i.product_id = $1 AND o.created_at >= $2 AND o.created_at < $2::timestamptz + interval '5 seconds'
		 GROUP BY tenth`, product, f.opens)
	var tenth int
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&tenth, &n}, func() error {
		if tenth >= 0 && tenth < 10*len(f.perSecond) {
			f.perSecond[tenth/10] += n
		}
		if tenth >= 0 && tenth < len(f.perTenth) {
			f.perTenth[tenth] = n
		}
		return nil
	})
	if err != nil {
		return f, fmt.Errorf("count orders by tenth of a second: %w", err)
	}
	return f, nil
}

// k6Summary is the part of k6's end-of-test summary the report reads.
type k6Summary struct{ report.K6Metrics }

// phaseSeconds is the length of the refusal and healthz phases in opening.js.
const phaseSeconds = 2.0

// result is one opening, for the report.
type result struct {
	o          Options
	replicas   int
	fig        figures
	summary    k6Summary
	invariants []verdict.Invariant
	k6Err      error
	stopped    bool
}

func (r result) failed() bool {
	if len(r.summary.FailedThresholds()) > 0 || r.k6Err != nil && !r.stopped {
		return true
	}
	for _, inv := range r.invariants {
		if !inv.OK {
			return true
		}
	}
	return false
}

// String is the report: the figures, the invariants and the verdict, as Markdown.
func (r result) String() string {
	var b strings.Builder
	s, f := r.summary, r.fig
	refusals, healthz := s.Value("refusal_answers", "count")/phaseSeconds, s.Value("healthz_answers", "count")/phaseSeconds
	if r.o.Skew != 0 {
		fmt.Fprintf(&b, "Replica r1's clock ran %v off (STOCKSVC_CLOCK_SKEW): Postgres's clock decides.\n\n", r.o.Skew)
	}
	fmt.Fprintf(&b, "The opening: %d replicas behind HAProxy; %d units, at most %d a customer; %d customers (every %d-th sends %d orders at once), %d buying at once from 1.5 s before the opening to %v after it; %d closed-loop clients in the refusal and healthz phases (%.0f s each).\n\n",
		r.replicas, r.o.Stock, r.o.Limit, r.o.Customers, r.o.Greedy, r.o.Limit+2, r.o.CrowdVUs, r.o.Crowd, r.o.Closed, phaseSeconds)
	refused := "sale-not-open"
	if r.o.Line > 0 {
		fmt.Fprintf(&b, "Through a line admitting %d buyers at once: %.0f joins, %.0f admissions.\n\n", r.o.Line,
			s.Value("line_joins", "count"), s.Value("line_admissions", "count"))
		refused = "not-admitted (no pass)"
	}
	b.WriteString("| figure | value |\n| --- | ---: |\n")
	ratio := "-"
	if healthz > 0 {
		ratio = fmt.Sprintf("%.2f×", refusals/healthz)
	}
	fmt.Fprintf(&b, "| %s refusals before the opening, closed loop | %.0f/s (p50 %.1f ms, p99 %.1f ms) |\n", refused, refusals,
		s.Value("latency_refusal", "med"), s.Value("latency_refusal", "p(99)"))
	fmt.Fprintf(&b, "| GET /healthz through the same balancer, same clients | %.0f/s (p50 %.1f ms, p99 %.1f ms) |\n", healthz,
		s.Value("latency_healthz", "med"), s.Value("latency_healthz", "p(99)"))
	fmt.Fprintf(&b, "| refusal rate / healthz rate | %s |\n", ratio)
	first := "no order confirmed"
	if f.firstSale >= 0 {
		first = f.firstSale.Round(100 * time.Microsecond).String()
	}
	fmt.Fprintf(&b, "| opening → first confirmed order (Postgres's clock) | %s |\n", first)
	var series []string
	for _, n := range f.perSecond {
		series = append(series, strconv.FormatInt(n, 10))
	}
	fmt.Fprintf(&b, "| confirmed orders in seconds 1–5 after the opening | %s |\n", strings.Join(series, ", "))
	series = series[:0]
	for _, n := range f.perTenth {
		series = append(series, strconv.FormatInt(n, 10))
	}
	fmt.Fprintf(&b, "| confirmed orders in each 100 ms of the first second | %s |\n", strings.Join(series, ", "))
	sold := fmt.Sprintf("not sold out (%d of %d)", f.sold, f.stock)
	if f.soldOutAt > 0 {
		sold = "+" + f.soldOutAt.Round(time.Millisecond).String()
	}
	fmt.Fprintf(&b, "| sold out (last unit's order after the opening) | %s |\n", sold)
	fmt.Fprintf(&b, "| customers who bought; of them at the limit | %d; %d |\n", f.customers, f.atTheLimit)
	fmt.Fprintf(&b, "| answers: sale-not-open (sent > 100 ms after the opening), customer-limit, sold-out, 429 | %.0f (%.0f), %.0f, %.0f, %.0f |\n",
		s.Value("not_open", "count"), s.Value("late_not_open", "count"), s.Value("limit_refusals", "count"), s.Value("sold_out", "count"), s.Value("busy", "count"))
	fmt.Fprintf(&b, "| k6: 201s before the opening, customers over the limit, units confirmed | %.0f, %.0f, %.0f |\n",
		s.Value("early_confirmations", "count"), s.Value("over_limit", "count"), s.Value("confirmed_units", "count"))
	b.WriteString("\nInvariants, in Postgres:\n\n")
	for _, inv := range r.invariants {
		mark := "ok"
		if !inv.OK {
			mark = "FAIL"
		}
		fmt.Fprintf(&b, "- %s %s: %s\n", mark, inv.Name, inv.Detail)
	}
	thresholds := s.FailedThresholds()
	switch {
	case len(thresholds) > 0:
		fmt.Fprintf(&b, "\nk6 thresholds FAILED: %s\n", strings.Join(thresholds, "; "))
	case r.k6Err != nil && !r.stopped:
		fmt.Fprintf(&b, "\nk6 exited with %v\n", r.k6Err)
	default:
		b.WriteString("\nk6 thresholds passed (checks, early 201s, customers over the limit, units confirmed ≤ stock, audit)\n")
	}
	verdict := "PASS"
	switch {
	case r.failed():
		verdict = "FAIL"
	case r.stopped:
		verdict = "STOPPED early, no violation in what ran"
	}
	fmt.Fprintf(&b, "\nverdict: %s\n", verdict)
	return b.String()
}
