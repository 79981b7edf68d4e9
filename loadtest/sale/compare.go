package sale

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/traffic"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// Comparison is one row of the Comparison table.
type Comparison struct {
	label         string
	title         string
	PurchasesPerS float64
	sellOut       time.Duration // zero: did not sell out
	sold, stock   int64
	refusedShare  float64 // 429s among the answers given while stock remained
	P99Confirmed  float64 // ms
	p99All        float64 // ms
	oversold      int64
	requests      int
	note          string
}

// compare runs the same rush against three configurations of the service, then the bare
// pgbench anchor, and prints the table with ratios against the default path.
func (h *harness) compare(ctx context.Context, o Options) error {
	// The rows after the first are the service before issue #8: one order per batch, and
	// orders queued for as long as the lock wait (there was no admission).
	old := h.Cluster.LockWait
	configs := []struct {
		title string
		spec  saleSpec
	}{
		{"(a) stocksvc default: lock + version + guard, orders decided in batches per product and replica (group commit)",
			saleSpec{label: "a-batched", defense: env.DefaultDefense, lockRetry: "wait"}},
		{"(a₁) the same, one order per batch (STOCKSVC_MAX_BATCH=1) queued up to the lock wait: the previous default",
			saleSpec{label: "a1-one-by-one", defense: env.DefaultDefense, lockRetry: "wait", maxBatch: 1, queueWait: old}},
		{"(a′) one order per batch, the lock polled with exponential backoff (1–50 ms, full jitter)",
			saleSpec{label: "a2-polling", defense: env.DefaultDefense, lockRetry: "exponential", maxBatch: 1, queueWait: old}},
		{"(b) one order per batch, the seeds' naive retry: fixed 100 ms sleep, at most 3 retries",
			saleSpec{label: "b-seed-naive", defense: env.DefaultDefense, lockRetry: "fixed:100ms", lockMaxRetries: 3, maxBatch: 1, queueWait: old}},
		{"(c) one order per batch, the database guard alone, no Redis lock",
			saleSpec{label: "c-guard-only", defense: "guard", lockRetry: "wait", maxBatch: 1, queueWait: old}},
	}
	var rows []Comparison
	var pageRuns []report.Run
	for _, c := range configs {
		c.spec.scenarios = "rush"
		run, err := h.runSale(ctx, c.spec, o)
		if err != nil {
			return err
		}
		row, err := measureRush(ctx, run)
		if err == nil {
			// The report page's section for it, judged by the ledgers (a comparison fails on
			// nothing, but a configuration that oversold shows it).
			var r report.Run
			if r, err = h.comparePageRun(ctx, run, o, c.title); err == nil {
				pageRuns = append(pageRuns, r)
			}
		}
		h.closeRun(run)
		if err != nil {
			return err
		}
		row.label, row.title = c.spec.label, c.title
		rows = append(rows, row)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	anchor, err := h.pgbenchAnchor(ctx, o.PGBenchClients, o.Stock)
	if err != nil {
		return err
	}
	rows = append(rows, anchor)

	table := comparisonTable(rows, h.Cluster.Replicas, o)
	h.Printf("\n%s\n", table)
	path := filepath.Join(h.Out, "compare.md")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		return err
	}
	h.Printf("written to %s\n", path)
	page := report.Page{Title: "stocksvc: the same rush against five configurations", Command: "go run -C loadtest . " + strings.Join(h.Args, " "), Runs: pageRuns}
	for _, r := range rows {
		sell := fmt.Sprintf("not sold out (%d/%d)", r.sold, r.stock)
		if r.sellOut > 0 {
			sell = "sold out in " + r.sellOut.Round(time.Millisecond).String()
		}
		value := fmt.Sprintf("%.0f confirmed/s while selling, %s, p99 confirmed %.1f ms", r.PurchasesPerS, sell, r.P99Confirmed)
		if r.label == anchor.label {
			value = fmt.Sprintf("%.0f tx/s of the bare UPDATE, no service (p99 %.1f ms)", r.PurchasesPerS, r.P99Confirmed)
		}
		page.Summary = append(page.Summary, report.Field{Name: r.label, Value: value})
	}
	path = filepath.Join(h.Out, "report.html")
	if err := report.Write(path, page); err != nil {
		return err
	}
	h.Printf("report page   %s\n", path)
	return nil
}

// comparePageRun is one configuration of -compare as the report page shows it.
func (h *harness) comparePageRun(ctx context.Context, run *saleRun, o Options, title string) (report.Run, error) {
	ledgers, _, err := verdict.Ledgers(ctx, run.pool)
	if err != nil {
		return report.Run{}, err
	}
	outcome := "PASS"
	for _, inv := range ledgers {
		if !inv.OK {
			outcome = "FAIL"
		}
	}
	log, err := readOrders(run)
	if err != nil {
		return report.Run{}, err
	}
	return h.pageRun(ctx, run, o, title, run.spec.label+"/", ledgers, outcome, log)
}

// orderSample is one order request k6 recorded.
type orderSample struct {
	end      time.Time
	duration float64 // ms
	status   int
	scenario string
}

// measureRush computes the comparison figures of a rush-only sale from k6's request log and
// the database.
func measureRush(ctx context.Context, run *saleRun) (Comparison, error) {
	samples, err := readOrderSamples(filepath.Join(run.dir, "requests.csv.gz"))
	if err != nil {
		return Comparison{}, err
	}
	if len(samples) == 0 {
		return Comparison{}, errors.New("k6 recorded no order requests")
	}
	var row Comparison
	hot := run.summary.SetupData.Hot
	var last *time.Time
	err = run.pool.QueryRow(ctx, `
		SELECT p.stock, p.initial_stock,
		       COALESCE((SELECT sum(i.quantity) FROM order_items i WHERE i.product_id = p.id), 0),
		       (SELECT max(o.created_at) FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = p.id)
		  FROM products p WHERE p.id = $1`, hot).Scan(&row.stock, new(int64), &row.sold, &last)
	if err != nil {
		return Comparison{}, fmt.Errorf("read the hot product: %w", err)
	}
	var received int64
	if err := run.pool.QueryRow(ctx, `SELECT initial_stock FROM products WHERE id = $1`, hot).Scan(&received); err != nil {
		return Comparison{}, err
	}
	row.oversold = max(0, row.sold-received)
	row.stock = received

	start := samples[0].end.Add(-time.Duration(samples[0].duration * float64(time.Millisecond)))
	end := samples[len(samples)-1].end
	for _, s := range samples {
		if b := s.end.Add(-time.Duration(s.duration * float64(time.Millisecond))); b.Before(start) {
			start = b
		}
	}
	soldOut := row.sold >= received && last != nil
	window := end
	if soldOut {
		window = *last
		row.sellOut = last.Sub(start)
	}
	var confirmed []float64
	var all []float64
	before, refused := 0, 0
	for _, s := range samples {
		all = append(all, s.duration)
		if s.status == 201 {
			confirmed = append(confirmed, s.duration)
		}
		if !s.end.After(window) {
			before++
			if s.status == 429 {
				refused++
			}
		}
	}
	row.requests = len(samples)
	orders := len(confirmed)
	if secs := window.Sub(start).Seconds(); secs > 0 {
		row.PurchasesPerS = float64(orders) / secs
	}
	if before > 0 {
		row.refusedShare = float64(refused) / float64(before)
	}
	row.P99Confirmed, row.p99All = report.Percentile(confirmed, 99), report.Percentile(all, 99)
	return row, nil
}

// readOrderSamples reads the order requests from k6's CSV output (timestamps in ms).
func readOrderSamples(path string) ([]orderSample, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	r := csv.NewReader(bufio.NewReader(gz))
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	col := map[string]int{}
	for i, h := range header {
		col[h] = i
	}
	for _, need := range []string{"metric_name", "timestamp", "metric_value", "status", "name"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("%s: no %s column", path, need)
		}
	}
	var out []orderSample
	for {
		rec, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if rec[col["metric_name"]] != "http_req_duration" || rec[col["name"]] != "POST /v1/orders" {
			continue
		}
		ms, _ := strconv.ParseInt(rec[col["timestamp"]], 10, 64)
		d, _ := strconv.ParseFloat(rec[col["metric_value"]], 64)
		status, _ := strconv.Atoi(rec[col["status"]])
		s := orderSample{end: time.UnixMilli(ms), duration: d, status: status}
		if i, ok := col["scenario"]; ok {
			s.scenario = rec[i]
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b orderSample) int { return a.end.Compare(b.end) })
	return out, nil
}

// pgbenchAnchor is the compare table's row for the physical floor (package traffic's
// pgbench), with the time to sell stock units computed from its rate.
func (h *harness) pgbenchAnchor(ctx context.Context, clients, stock int) (Comparison, error) {
	a, err := traffic.PGBench(ctx, h.Harness, h.Cluster.DatabaseURL, clients)
	if err != nil {
		return Comparison{}, err
	}
	return Comparison{
		label:         "d-pgbench",
		title:         fmt.Sprintf("(d) physical anchor: pgbench, %d clients, bare UPDATE ... WHERE stock > 0", clients),
		PurchasesPerS: a.TPS,
		stock:         int64(stock),
		sold:          int64(stock),
		P99Confirmed:  a.P99,
		p99All:        a.P99,
		requests:      len(a.Latencies),
		note:          "time to sell out computed as stock / tps",
		sellOut:       a.SellOut(stock),
	}, nil
}

// comparisonTable formats the rows as Markdown, with ratios against the first row.
func comparisonTable(rows []Comparison, replicas int, o Options) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Same machine, one run: %d replicas behind HAProxy, k6 rush ramping to %d orders/s over %v, %d units of one product, 1..3 units per order.\n\n",
		replicas, o.Rate, o.Duration, o.Stock)
	b.WriteString("| configuration | confirmed purchases/s | time to sell out | buyers refused while stock remained | p99 confirmed | p99 all answers | oversold units |\n")
	b.WriteString("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	base := rows[0]
	for _, r := range rows {
		sell := "not sold out"
		if r.sellOut > 0 {
			sell = r.sellOut.Round(time.Millisecond).String()
		} else {
			sell = fmt.Sprintf("not sold out (%d/%d)", r.sold, r.stock)
		}
		ratio := ""
		if r.label != base.label && base.PurchasesPerS > 0 {
			ratio = fmt.Sprintf(" (%.2f×)", r.PurchasesPerS/base.PurchasesPerS)
		}
		fmt.Fprintf(&b, "| %s | %.0f%s | %s | %.1f%% | %.1f ms | %.1f ms | %d |\n",
			r.title, r.PurchasesPerS, ratio, sell, 100*r.refusedShare, r.P99Confirmed, r.p99All, r.oversold)
	}
	for _, r := range rows {
		if r.note != "" {
			fmt.Fprintf(&b, "\n%s: %s.", r.label, r.note)
		}
	}
	b.WriteString("\n")
	return b.String()
}
