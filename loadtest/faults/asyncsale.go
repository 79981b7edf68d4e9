package faults

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/model"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/traffic"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// The asynchronous sale (-async): every order is sent with Prefer: respond-async through the
// balancer, one replica is SIGKILLed mid-sale and restarted, and when the load ends the run
// waits for every accepted order to be decided. Then it judges:
//
//   - every 202 ended confirmed or rejected; none is left pending;
//   - each key named one order, and every order in line was one the clients sent;
//   - each confirmed order was bought once (one orders row, its items), each rejected one never;
//   - the decisions are exactly first-fit in arrival order (the line's seq) over the stock;
//   - the stock adds up (audit), and the API tells every order as the tables do.
//
// It reports the time from acceptance to decision (Postgres's clock) as p50/p99/max.

// asyncOrder is one order the clients sent.
type asyncOrder struct {
	key      string
	qty      int64
	id       string // the order's id, from the first 202
	status   string // "accepted" (202), "confirmed" (201), "refused" (409), "failed: ..." (never answered)
	attempts int
	answered time.Duration   // from the first attempt to the answer that ended it
	ids      map[string]bool // every id a 202 for this key named
	sent     time.Duration   // when it was first sent, on the run's clock (d.rec)
}

// slowDecision is one of the orders that waited longest for their decision.
type slowDecision struct {
	id     string
	after  time.Duration // accepted this long after the run's first order
	waited time.Duration
}

// asyncFigures is what the run measured.
type asyncFigures struct {
	sent, accepted, refusedAtOnce, failed, retried int
	confirmed, rejected, pending                   int
	p50, p99, max                                  time.Duration
	killedAt                                       time.Duration
	pausedAt                                       time.Duration
	paused                                         string        // the replica paused while it drained the line
	settled                                        time.Duration // from the end of the load until no order was pending
	acceptP50, acceptP99                           time.Duration // POST → 202, at the client
	// The baseline (-async-baseline): the same load sent without the preference, on another
	// product with the same stock, before the asynchronous one.
	baseline                bool
	syncSent, syncConfirmed int
	syncP50, syncP99        time.Duration // POST → 201, at the client
	syncAllP50, syncAllP99  time.Duration // POST → any final answer
	syncRetried             int
	slowest                 []slowDecision // the three longest waits for a decision
}

func (h *harness) asyncSale(ctx context.Context, o AsyncOptions) error {
	sc := scenario{name: "async-sale", about: "every order Prefer: respond-async; SIGKILL a replica mid-sale, restart it"}
	plan := drillPlan{lockTTL: 2 * time.Second}
	d := &drillEnv{h: h, plan: plan, sc: sc, rng: traffic.NewRand(o.Seed, 0), rec: model.NewRecorder(),
		dir: filepath.Join(h.Out, "async-sale")}
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	defer d.teardown()
	if err := d.setup(ctx); err != nil {
		return err
	}
	front := fmt.Sprintf("http://127.0.0.1:%d", d.c.Front)
	d.client = client.New([]string{front}, d.c.Token, "async", 10*time.Second, d.rec, client.RetryPolicy{})
	defer d.client.Close()
	product, err := d.client.CreateProduct(ctx, "ASYNC-"+rand.Text()[:6], int64(o.Stock))
	if err != nil {
		return err
	}
	h.Printf("[async-sale] %d replicas behind HAProxy, product %d with %d units; %d orders/s of 1–2 units for %v, every one Prefer: respond-async\n",
		h.Cluster.Replicas, product, o.Stock, o.Rate, o.Duration)

	httpc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}
	defer httpc.CloseIdleConnections()
	var fig asyncFigures
	fig.killedAt, fig.pausedAt = -1, -1
	if o.Baseline {
		other, err := d.client.CreateProduct(ctx, "SYNC-"+rand.Text()[:6], int64(o.Stock))
		if err != nil {
			return err
		}
		h.Printf("[async-sale] baseline first: the same load without the preference, on product %d\n", other)
		sync, retried := h.openLoop(ctx, o, d, httpc, front, other, false, nil)
		fig.baseline, fig.syncSent, fig.syncRetried = true, len(sync), retried
		var ok, all []time.Duration
		for _, o := range sync {
			all = append(all, o.answered)
			if o.status == "confirmed" {
				ok = append(ok, o.answered)
				fig.syncConfirmed++
			}
		}
		fig.syncP50, fig.syncP99 = percentiles(ok)
		fig.syncAllP50, fig.syncAllP99 = percentiles(all)
	}
	pool, err := pgxpool.New(ctx, d.c.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	orders, retried := h.openLoop(ctx, o, d, httpc, front, product, true, func(loadCtx context.Context, start time.Time, wg *sync.WaitGroup) {
		if o.PauseAfter > 0 {
			wg.Go(func() {
				if clock.Sleep(loadCtx, o.PauseAfter) != nil {
					return
				}
				fig.pausedAt = time.Since(start)
				name, err := pauseLineHolder(context.WithoutCancel(ctx), d, pool, product, o.PauseFor)
				if err != nil {
					d.fail("pause the line's holder: %v", err)
				}
				fig.paused = name
			})
		}
		if o.KillAfter <= 0 {
			return
		}
		wg.Go(func() {
			if clock.Sleep(loadCtx, o.KillAfter) != nil {
				return
			}
			r := d.c.Replicas[d.victim]
			fig.killedAt = time.Since(start)
			d.event("SIGKILL %s", r.Name)
			killed := d.rec.Now()
			// The fault lasts until the replica is ready again (or its restart failed).
			defer d.faultWindow(killed)
			r.Proc.Signal(syscall.SIGKILL)
			<-r.Proc.Done()
			if clock.Sleep(ctx, time.Second) != nil {
				return
			}
			if err := d.c.StartReplica(r); err != nil {
				d.fail("restart %s: %v", r.Name, err)
				return
			}
			if err := d.c.WaitReplica(ctx, r); err != nil {
				d.fail("%s not ready again: %v", r.Name, err)
				return
			}
			d.event("%s ready again", r.Name)
		})
	})
	loadEnd := time.Now()
	var accepts []time.Duration
	for _, o := range orders {
		if o.status == "accepted" {
			accepts = append(accepts, o.answered)
		}
	}
	fig.acceptP50, fig.acceptP99 = percentiles(accepts)

	// Wait for the lines to empty: a decision is the service's to make, the run only watches.
	deadline := time.Now().Add(60 * time.Second)
	for {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM async_orders WHERE status = 'pending'`).Scan(&fig.pending); err != nil {
			return err
		}
		if fig.pending == 0 || time.Now().After(deadline) {
			break
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	fig.settled = time.Since(loadEnd)
	fig.sent, fig.retried = len(orders), retried
	for _, o := range orders {
		switch o.status {
		case "accepted":
			fig.accepted++
		case "refused":
			fig.refusedAtOnce++
		default:
			fig.failed++
		}
	}
	tokenOf := func(o *asyncOrder) string {
		t, _ := d.identity.Token(customerOf(o)) // minted when it was sent
		return t
	}
	checks, err := asyncChecks(ctx, pool, httpc, front, product, int64(o.Stock), orders, &fig, tokenOf)
	if err != nil {
		return err
	}
	d.mu.Lock()
	for _, f := range d.failed {
		checks = append(checks, verdict.Invariant{Name: "harness", OK: false, Detail: f})
	}
	d.mu.Unlock()
	err = h.asyncReport(d.dir, o, fig, checks)
	pageCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if perr := d.writeAsyncPage(pageCtx, pool, product, o, fig, orders, checks, err); perr != nil {
		h.Printf("warning: no report page: %v\n", perr)
	} else {
		h.Printf("report page         %s\n", filepath.Join(d.dir, pageName))
	}
	return err
}

// openLoop sends orders of 1–2 units of product at the run's rate for its duration (open loop:
// arrivals do not wait for answers), with the preference when async, each under a key of its
// own, and returns them once every one is answered; fault, when set, starts beside the load.
func (h *harness) openLoop(ctx context.Context, o AsyncOptions, d *drillEnv, httpc *http.Client, front string, product int64, async bool,
	fault func(loadCtx context.Context, start time.Time, wg *sync.WaitGroup)) ([]*asyncOrder, int) {
	var (
		mu      sync.Mutex
		orders  []*asyncOrder
		wg      sync.WaitGroup
		retried atomic.Int64
	)
	start := time.Now()
	loadCtx, stopLoad := context.WithTimeout(ctx, o.Duration)
	defer stopLoad()
	if fault != nil {
		fault(loadCtx, start, &wg)
	}
	tick := time.NewTicker(time.Second / time.Duration(o.Rate))
	defer tick.Stop()
	n := 0
	for {
		select {
		case <-loadCtx.Done():
			wg.Wait()
			return orders, int(retried.Load())
		case <-tick.C:
		}
		n++
		o := &asyncOrder{key: fmt.Sprintf("%s-%d-%d", d.c.Prefix, product, n), qty: int64(1 + d.rng.IntN(2)), ids: map[string]bool{}, sent: d.rec.Now()}
		mu.Lock()
		orders = append(orders, o)
		mu.Unlock()
		wg.Go(func() {
			// The customer's token, as the replicas verify every order's (minted once).
			token, err := d.identity.Token(customerOf(o))
			if err != nil {
				token = "" // answered 401, never 202 or 409: the run counts it unanswered
			}
			if sendOrder(context.WithoutCancel(ctx), httpc, front, product, async, token, o) {
				retried.Add(1)
			}
		})
	}
}

// customerOf is the customer who sends o: one customer per order.
func customerOf(o *asyncOrder) string { return "c-" + o.key }

// percentiles returns the median and the 99th percentile of ds (sorted in place).
func percentiles(ds []time.Duration) (p50, p99 time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	slices.Sort(ds)
	return ds[len(ds)/2], ds[min(len(ds)-1, len(ds)*99/100)]
}

// sendOrder sends one order until it is answered 202 or 409, retrying what may be retried
// (429, 503, the balancer's 502/503, a lost connection) with the same key; it reports whether
// it had to retry.
func sendOrder(ctx context.Context, c *http.Client, front string, product int64, async bool, token string, o *asyncOrder) bool {
	body := fmt.Sprintf(`{"customer_id":%q,"items":[{"product_id":%d,"quantity":%d}]}`, customerOf(o), product, o.qty)
	began := time.Now()
	deadline := began.Add(30 * time.Second)
	defer func() { o.answered = time.Since(began) }()
	for time.Now().Before(deadline) {
		o.attempts++
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, front+"/v1/orders", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if async {
			req.Header.Set("Prefer", "respond-async")
		}
		req.Header.Set("Idempotency-Key", o.key)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		req.GetBody = nil // no hidden resends: every attempt is one the run counts
		res, err := c.Do(req)
		pause := 200 * time.Millisecond
		if err == nil {
			var got struct {
				ID string `json:"id"`
			}
			_ = json.NewDecoder(res.Body).Decode(&got)
			res.Body.Close()
			switch res.StatusCode {
			case http.StatusCreated:
				o.id, o.status = got.ID, "confirmed"
				return o.attempts > 1
			case http.StatusAccepted:
				o.ids[got.ID] = true
				if o.id == "" {
					o.id = got.ID
				}
				o.status = "accepted"
				return o.attempts > 1
			case http.StatusConflict:
				o.status = "refused"
				return o.attempts > 1
			case http.StatusTooManyRequests, http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
				if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
					pause = min(time.Duration(s)*time.Second, time.Second)
				}
			default:
				o.status = fmt.Sprintf("failed: %d", res.StatusCode)
				return o.attempts > 1
			}
		}
		if clock.Sleep(ctx, pause) != nil {
			break
		}
	}
	if o.status == "" {
		o.status = "failed: no answer"
	}
	return true
}

// asyncChecks judges the run from the tables and the API.
func asyncChecks(ctx context.Context, pool *pgxpool.Pool, c *http.Client, front string, product, stock int64, orders []*asyncOrder, fig *asyncFigures,
	tokenOf func(*asyncOrder) string) ([]verdict.Invariant, error) {
	var checks []verdict.Invariant
	add := func(name string, ok bool, format string, args ...any) {
		checks = append(checks, verdict.Invariant{Name: name, OK: ok, Detail: fmt.Sprintf(format, args...)})
	}
	add("every accepted order decided", fig.pending == 0, "%d pending %v after the load", fig.pending, fig.settled.Round(time.Millisecond))
	add("every order answered", fig.failed == 0, "%d of %d orders never answered 202 or 409", fig.failed, fig.sent)

	byKey := map[string]*asyncOrder{}
	oneID := 0
	for _, o := range orders {
		byKey[o.key] = o
		if len(o.ids) > 1 {
			oneID++
		}
	}
	add("one order per key", oneID == 0, "%d keys were answered with more than one order", oneID)

	// The line in arrival order, with each order's key and whether an order row bought it.
	rows, err := pool.Query(ctx, `
		SELECT a.id::text, k.key, a.quantities[1], a.status, a.reason, a.available,
		       (SELECT count(*) FROM orders o WHERE o.id = a.id),
		       (SELECT coalesce(sum(i.quantity), 0) FROM order_items i WHERE i.order_id = a.id),
		       extract(epoch FROM a.decided_at - a.accepted_at)::float8,
		       extract(epoch FROM a.accepted_at - min(a.accepted_at) OVER ())::float8
		  FROM async_orders a LEFT JOIN idempotency_keys k ON k.async_order_id = a.id
		 WHERE a.product_id = $1 ORDER BY a.seq`, product)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	left := stock
	var waits []time.Duration
	var unknownKey, notFirstFit, twice, wrongRow []string
	lineIDs := map[string]string{}
	for rows.Next() {
		var (
			id, status       string
			key, reason      *string
			qty              int64
			available        *int64
			orderRows, items int64
			waited           *float64
			acceptedAfter    float64
		)
		if err := rows.Scan(&id, &key, &qty, &status, &reason, &available, &orderRows, &items, &waited, &acceptedAfter); err != nil {
			return nil, err
		}
		if key == nil || byKey[*key] == nil {
			unknownKey = append(unknownKey, id)
		} else {
			lineIDs[*key] = id
		}
		want := "rejected"
		if qty <= left {
			want = "confirmed"
			left -= qty
		}
		if status != want {
			notFirstFit = append(notFirstFit, fmt.Sprintf("%s is %s, want %s (%d asked, %d left)", id, status, want, qty, left))
		}
		switch {
		case orderRows > 1:
			twice = append(twice, id)
		case status == "confirmed" && (orderRows != 1 || items != qty):
			wrongRow = append(wrongRow, fmt.Sprintf("%s confirmed with %d order rows of %d units", id, orderRows, items))
		case status == "rejected" && orderRows != 0:
			wrongRow = append(wrongRow, fmt.Sprintf("%s rejected but bought", id))
		case status == "rejected" && (reason == nil || *reason != "sold-out" || available == nil || *available >= qty):
			wrongRow = append(wrongRow, fmt.Sprintf("%s rejected without a true sold-out reason", id))
		}
		switch status {
		case "confirmed":
			fig.confirmed++
		case "rejected":
			fig.rejected++
		}
		if waited != nil {
			w := time.Duration(*waited * float64(time.Second))
			waits = append(waits, w)
			fig.slowest = append(fig.slowest, slowDecision{id: id, after: time.Duration(acceptedAfter * float64(time.Second)), waited: w})
			slices.SortFunc(fig.slowest, func(a, b slowDecision) int { return int(b.waited - a.waited) })
			fig.slowest = fig.slowest[:min(len(fig.slowest), 3)]
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	missing := 0
	for _, o := range orders {
		if o.status == "accepted" && lineIDs[o.key] != o.id {
			missing++
		}
	}
	add("every order in line was sent", len(unknownKey) == 0, "%d orders in line with no client key: %v", len(unknownKey), first(unknownKey))
	add("every 202 is in line", missing == 0, "%d accepted orders not found in line under their key", missing)
	add("decided first-fit in arrival order", len(notFirstFit) == 0, "%d decisions differ from first-fit over the line: %v", len(notFirstFit), first(notFirstFit))
	add("no order bought twice", len(twice) == 0, "%d orders with more than one order row: %v", len(twice), first(twice))
	add("orders match decisions", len(wrongRow) == 0, "%d: %v", len(wrongRow), first(wrongRow))

	var a struct{ stock, received, sold int64 }
	err = pool.QueryRow(ctx, `
		SELECT p.stock, p.initial_stock + coalesce((SELECT sum(quantity) FROM restocks WHERE product_id = p.id), 0),
		       coalesce((SELECT sum(i.quantity) FROM order_items i WHERE i.product_id = p.id), 0)
		  FROM products p WHERE p.id = $1`, product).Scan(&a.stock, &a.received, &a.sold)
	if err != nil {
		return nil, err
	}
	add("stock adds up", a.stock >= 0 && a.received == a.stock+a.sold && a.sold == stock-left,
		"received %d = stock %d + sold %d; first-fit over the line sells %d", a.received, a.stock, a.sold, stock-left)

	// The API tells each order as the tables do (a sample of up to 200, spread over the line).
	disagree := 0
	step := max(1, len(orders)/200)
	for i := 0; i < len(orders); i += step {
		o := orders[i]
		if o.status != "accepted" {
			continue
		}
		var got struct {
			Status string `json:"status"`
		}
		// Read as its customer: another customer is told it does not exist.
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, front+"/v1/orders/"+o.id, nil)
		if err != nil {
			disagree++
			continue
		}
		req.Header.Set("Authorization", "Bearer "+tokenOf(o))
		res, err := c.Do(req)
		if err != nil {
			disagree++
			continue
		}
		_ = json.NewDecoder(res.Body).Decode(&got)
		res.Body.Close()
		var status string
		if err := pool.QueryRow(ctx, `SELECT status FROM async_orders WHERE id = $1`, o.id).Scan(&status); err != nil || status != got.Status {
			disagree++
		}
	}
	add("the API tells the tables' decisions", disagree == 0, "%d sampled orders read differently through GET /v1/orders/{id}", disagree)

	fig.p50, fig.p99 = percentiles(waits)
	if len(waits) > 0 {
		fig.max = waits[len(waits)-1]
	}
	return checks, nil
}

func first(s []string) []string { return s[:min(len(s), 3)] }

func (h *harness) asyncReport(dir string, o AsyncOptions, fig asyncFigures, checks []verdict.Invariant) error {
	h.Printf("\n== asynchronous sale\n")
	h.Printf("orders sent         %d (%d retried with the same key after a 429/5xx or a lost connection)\n", fig.sent, fig.retried)
	h.Printf("answered            %d accepted (202), %d refused at once (409 sold out), %d never answered\n", fig.accepted, fig.refusedAtOnce, fig.failed)
	h.Printf("decided             %d confirmed, %d rejected, %d pending; the last decided %v after the load ended\n",
		fig.confirmed, fig.rejected, fig.pending, fig.settled.Round(time.Millisecond))
	if fig.killedAt >= 0 {
		h.Printf("fault               SIGKILL of one replica %v into the load, restarted a second later\n", fig.killedAt.Round(time.Millisecond))
	}
	if fig.paused != "" {
		h.Printf("fault               SIGSTOP of %s, which drained the line, %v into the load, for %v\n", fig.paused, fig.pausedAt.Round(time.Millisecond), o.PauseFor)
	}
	h.Printf("POST → 202          p50 %v, p99 %v (client)\n", fig.acceptP50.Round(100*time.Microsecond), fig.acceptP99.Round(100*time.Microsecond))
	h.Printf("202 → decision      p50 %v, p99 %v, max %v (Postgres clock, accepted_at → decided_at)\n",
		fig.p50.Round(time.Millisecond), fig.p99.Round(time.Millisecond), fig.max.Round(time.Millisecond))
	for _, sd := range fig.slowest {
		h.Printf("  slowest           %s accepted %v after the first order, decided %v later\n", sd.id, sd.after.Round(time.Millisecond), sd.waited.Round(time.Millisecond))
	}
	if fig.baseline {
		h.Printf("baseline (no Prefer) %d orders, %d confirmed, %d retried; POST → 201 p50 %v, p99 %v; POST → any answer p50 %v, p99 %v\n",
			fig.syncSent, fig.syncConfirmed, fig.syncRetried, fig.syncP50.Round(100*time.Microsecond), fig.syncP99.Round(100*time.Microsecond),
			fig.syncAllP50.Round(100*time.Microsecond), fig.syncAllP99.Round(100*time.Microsecond))
		if fig.syncP99 > 0 {
			h.Printf("ratios               202 p99 / 201 p99 = %.2f×; (202 + decision) p99 / 201 p99 = %.2f×\n",
				float64(fig.acceptP99)/float64(fig.syncP99), float64(fig.acceptP99+fig.p99)/float64(fig.syncP99))
		}
	}
	failed := 0
	for _, c := range checks {
		mark := "ok  "
		if !c.OK {
			mark = "FAIL"
			failed++
		}
		h.Printf("  %s %-38s %s\n", mark, c.Name, c.Detail)
	}
	if failed > 0 {
		h.Printf("verdict: FAIL (%d checks; logs in %s)\n", failed, dir)
		return env.ErrFailed
	}
	h.Printf("verdict: PASS\n")
	return nil
}

// writeAsyncPage writes the sale's page (report.AsyncPage) to its directory, with the
// decisions and the product's stock read from Postgres.
func (d *drillEnv) writeAsyncPage(ctx context.Context, pool *pgxpool.Pool, product int64, o AsyncOptions, fig asyncFigures, orders []*asyncOrder,
	checks []verdict.Invariant, result error) error {
	outcome := "PASS"
	if errors.Is(result, env.ErrFailed) {
		outcome = "FAIL"
	}
	page := report.AsyncSale{
		Replicas: d.h.Cluster.Replicas, Rate: o.Rate, Stock: o.Stock, Duration: o.Duration, Seed: o.Seed,
		KillAfter: o.KillAfter, PauseAfter: o.PauseAfter, PauseFor: o.PauseFor, Verdict: outcome, Checks: verdict.Checks(checks),
		Sent: fig.sent, Retried: fig.retried, Accepted: fig.accepted, RefusedAtOnce: fig.refusedAtOnce, Failed: fig.failed,
		Confirmed: fig.confirmed, Rejected: fig.rejected, Pending: fig.pending,
		AcceptP50: fig.acceptP50, AcceptP99: fig.acceptP99, P50: fig.p50, P99: fig.p99, Max: fig.max,
	}
	for _, ord := range orders {
		page.Orders = append(page.Orders, report.AsyncOrder{Status: ord.status, Sent: ord.sent, Answered: ord.answered})
	}
	rows, _ := pool.Query(ctx, `SELECT decided_at, status FROM async_orders WHERE product_id = $1 AND decided_at IS NOT NULL`, product)
	var decided time.Time
	var status string
	_, err := pgx.ForEachRow(rows, []any{&decided, &status}, func() error {
		page.Decisions = append(page.Decisions, report.AsyncDecision{At: max(0, decided.Sub(d.rec.Start)), Status: status})
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the decisions: %w", err)
	}
	if page.Product, err = verdict.StockLine(ctx, pool, product, "product", d.rec.Start); err != nil {
		return err
	}
	d.mu.Lock()
	for _, w := range d.faults {
		page.Faults = append(page.Faults, report.Window{Start: w.start, End: w.end})
	}
	for _, e := range d.events {
		page.Events = append(page.Events, report.Mark{At: e.at, Label: e.what})
	}
	d.mu.Unlock()
	command := "go run -C loadtest . " + strings.Join(d.h.Args, " ")
	return report.Write(filepath.Join(d.dir, pageName), report.AsyncPage(command, page))
}
