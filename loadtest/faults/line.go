package faults

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// The line's drills (issue #33, item 4): a lined product opens during the drill's sale, with a
// crowd that joined before the opening, and the fault strikes as the draw has given everyone
// a place and the first admissions buy. The tickets are read from Postgres, where the line
// lives, once drawn and again once every buyer is done: nobody may lose or change places, the
// admissions must have gone in place order, and every buyer must learn an outcome. The buyers'
// orders are in the run's history like any other (the model, the SQL verdicts: nothing
// oversold, one order per operation, at most one unit per customer). Both run on a Postgres of
// their own: on a server shared with other work, the drill's own reads of the tickets (and the
// replicas' new connections) were refused "too many clients" in issue #31's runs.

var (
	killReplicaOpening = scenario{name: "kill-replica-opening",
		about:       fmt.Sprintf("a lined product (%d units, %d buyers who joined before the opening, %d admitted at once): kill-replica's fault (SIGKILL a replica mid-purchase, restart it) as the draw is made; no one loses their place", lineStock, lineBuyers, lineAdmit),
		ownPostgres: true, expected: 12 * time.Second, inject: func(ctx context.Context, d *drillEnv) error { return d.lineOpening(ctx, killReplica) }}
	pauseRedisOpening = scenario{name: "pause-redis-opening",
		about:    fmt.Sprintf("a lined product (%d units, %d buyers who joined before the opening, %d admitted at once): SIGSTOP Redis for twice the lock TTL as the draw is made, then SIGCONT", lineStock, lineBuyers, lineAdmit),
		ownRedis: true, ownPostgres: true, expected: 12 * time.Second, inject: func(ctx context.Context, d *drillEnv) error { return d.lineOpening(ctx, pauseRedisAtOpening) }}
)

// The opening's sizes: more buyers than units, so that the line ends sold out with buyers still
// in it (who must be told so); few admitted at once, and buyers who take up to lineCheckout to
// order once admitted, so that the selling lasts a few seconds after the draw and the fault
// strikes in the middle of it.
const (
	lineStock     = 30
	lineBuyers    = 60
	lineAdmit     = 6
	lineAdmission = 10 * time.Second // the shortest admission_for the API takes
	lineLead      = 3 * time.Second  // from the product's creation to its opening
	lineCheckout  = 800 * time.Millisecond
	// lineDeadline bounds a buyer's time in line after the opening: far above the selling
	// (lineStock / lineAdmit checkouts, and a fault), so that a buyer still waiting then was
	// left waiting for nothing.
	lineDeadline = 40 * time.Second
)

// ticket is a line_tickets row, as the checks read it.
type ticket struct {
	ID       int64
	Customer string
	Status   string
	Place    *int64
	Admitted bool // admitted_at is set: the ticket was admitted at some point
}

// lineTally is what the buyers of one opening went through.
type lineTally struct {
	bought, soldOut, expired, other atomic.Int64
	polls, pollFailures             atomic.Int64 // status requests, and those answered by no replica status
	mu                              sync.Mutex
	stuck                           []string // buyers with no outcome by lineDeadline
}

// lineOpening runs an opening of a lined product with fault struck once the line is drawn, and
// checks the tickets before and after.
func (d *drillEnv) lineOpening(ctx context.Context, fault func(ctx context.Context, d *drillEnv) error) error {
	opens := time.Now().Add(lineLead)
	id, err := d.client.CreateSale(ctx, "LINED-"+rand.Text()[:6], lineStock, client.SaleRules{Opens: opens, Limit: 1})
	if err != nil {
		return err
	}
	patch, _ := json.Marshal(map[string]any{"line": map[string]any{"admit": lineAdmit, "admission_for": int(lineAdmission / time.Second)}})
	if a := d.client.Request(ctx, http.MethodPatch, fmt.Sprintf("%s/v1/products/%d/sale", d.client.Base(), id), patch,
		map[string]string{"Authorization": "Bearer " + d.client.AdminToken(), "Content-Type": "application/json"}); a.Status != http.StatusOK {
		return fmt.Errorf("put product %d in a line: %d %s %v", id, a.Status, a.Body, a.Err)
	}
	pool, err := pgxpool.New(ctx, d.c.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", d.c.Database, err)
	}
	defer pool.Close()

	buyers := make([]*lineBuyer, lineBuyers)
	var joins sync.WaitGroup
	for i := range buyers {
		buyers[i] = &lineBuyer{d: d, product: id, customer: fmt.Sprintf("%s-line-%d", d.client.Tag(), i)}
		joins.Go(func() { buyers[i].join(ctx) })
	}
	joins.Wait()
	joined := 0
	for _, b := range buyers {
		if b.ticket != "" {
			joined++
		}
	}
	d.event("%d of %d buyers joined product %d's line; it opens in %v", joined, lineBuyers, id, time.Until(opens).Round(10*time.Millisecond))
	if joined < lineBuyers {
		d.fail("%d of %d joins before the opening had no ticket", lineBuyers-joined, lineBuyers)
	}

	tally := &lineTally{}
	var waiting sync.WaitGroup
	deadline := opens.Add(lineDeadline)
	for _, b := range buyers {
		if b.ticket != "" {
			waiting.Go(func() { b.wait(ctx, deadline, tally) })
		}
	}
	before, err := waitDrawn(ctx, pool, id, opens.Add(10*time.Second))
	if err != nil {
		return err
	}
	d.event("line drawn: %d tickets placed", len(before))
	faultStart := d.rec.Now()
	ferr := fault(ctx, d)
	d.faultWindow(faultStart)
	waiting.Wait()
	if ferr != nil {
		return ferr
	}
	after, err := readTickets(ctx, pool, id)
	if err != nil {
		return err
	}
	var sold int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(quantity), 0) FROM order_items WHERE product_id = $1`, id).Scan(&sold); err != nil {
		return fmt.Errorf("read product %d's units sold: %w", id, err)
	}
	for _, f := range judgeLine(before, after, joined, sold) {
		d.fail("%s", f)
	}
	tally.mu.Lock()
	if len(tally.stuck) > 0 {
		d.fail("%d buyers had no outcome %v after the opening (%s)", len(tally.stuck), lineDeadline, strings.Join(tally.stuck[:min(3, len(tally.stuck))], "; "))
	}
	tally.mu.Unlock()
	d.note("line: %d tickets, %d units: %d bought, %d told sold out, %d admissions expired, %d other ends; %d of %d status requests answered by no replica; %d units sold",
		joined, lineStock, tally.bought.Load(), tally.soldOut.Load(), tally.expired.Load(), tally.other.Load(),
		tally.pollFailures.Load(), tally.polls.Load(), sold)
	d.event("every buyer of the line is done: %d bought, %d told sold out", tally.bought.Load(), tally.soldOut.Load())
	return nil
}

// pauseRedisAtOpening stops the run's Redis for twice the lock TTL.
func pauseRedisAtOpening(ctx context.Context, d *drillEnv) error {
	pause := 2 * d.plan.lockTTL
	d.event("SIGSTOP redis for %v", pause)
	if err := d.c.Redis.Pause(); err != nil {
		return err
	}
	err := clock.Sleep(ctx, pause)
	if rerr := d.c.Redis.Resume(); rerr != nil && err == nil {
		err = rerr
	}
	d.event("SIGCONT redis")
	return err
}

// judgeLine checks the tickets after the opening against those read once the line was drawn:
// every ticket drawn keeps its place, the admissions went in place order (the places admitted
// are 1..k: nobody was passed over, since nobody leaves in the drill), every ticket that
// joined was drawn, and no more units were sold than the stock, nor more admissions used.
func judgeLine(before, after map[int64]ticket, joined int, sold int64) []string {
	var failed []string
	if len(before) != joined {
		failed = append(failed, fmt.Sprintf("%d tickets drawn, %d joined before the opening", len(before), joined))
	}
	var moved, lost []string
	for id, b := range before {
		a, ok := after[id]
		switch {
		case !ok:
			lost = append(lost, fmt.Sprintf("ticket %d (%s)", id, b.Customer))
		case b.Place == nil || a.Place == nil || *a.Place != *b.Place:
			moved = append(moved, fmt.Sprintf("ticket %d: place %s, then %s", id, placeString(b.Place), placeString(a.Place)))
		}
	}
	sort.Strings(moved)
	if len(lost) > 0 {
		failed = append(failed, fmt.Sprintf("%d tickets lost: %s", len(lost), strings.Join(lost[:min(3, len(lost))], ", ")))
	}
	if len(moved) > 0 {
		failed = append(failed, fmt.Sprintf("%d tickets changed places: %s", len(moved), strings.Join(moved[:min(3, len(moved))], "; ")))
	}
	var admitted []int64
	used := 0
	for _, t := range after {
		if t.Admitted && t.Place != nil {
			admitted = append(admitted, *t.Place)
		}
		if t.Status == "used" {
			used++
		}
	}
	sort.Slice(admitted, func(i, j int) bool { return admitted[i] < admitted[j] })
	for i, p := range admitted {
		if p != int64(i+1) {
			failed = append(failed, fmt.Sprintf("admissions out of place order: places %v admitted, place %d passed over", admitted, i+1))
			break
		}
	}
	if sold > lineStock || used > lineStock {
		failed = append(failed, fmt.Sprintf("oversold: %d units sold and %d admissions used of %d units", sold, used, lineStock))
	}
	return failed
}

func placeString(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// waitDrawn waits until product id's line is drawn (by Postgres's row), then reads its tickets.
func waitDrawn(ctx context.Context, pool *pgxpool.Pool, id int64, until time.Time) (map[int64]ticket, error) {
	for {
		var drawn bool
		if err := pool.QueryRow(ctx, `SELECT drawn_at IS NOT NULL FROM lines WHERE product_id = $1`, id).Scan(&drawn); err != nil {
			return nil, fmt.Errorf("read product %d's line: %w", id, err)
		}
		if drawn {
			return readTickets(ctx, pool, id)
		}
		if time.Now().After(until) {
			return nil, fmt.Errorf("product %d's line was not drawn by %v", id, until.Format(time.RFC3339Nano))
		}
		if err := clock.Sleep(ctx, 20*time.Millisecond); err != nil {
			return nil, err
		}
	}
}

// readTickets reads product id's tickets from Postgres, by id.
func readTickets(ctx context.Context, pool *pgxpool.Pool, id int64) (map[int64]ticket, error) {
	rows, _ := pool.Query(ctx, `SELECT id, customer_id, status, place, admitted_at IS NOT NULL FROM line_tickets WHERE product_id = $1`, id)
	out := map[int64]ticket{}
	var t ticket
	if _, err := pgx.ForEachRow(rows, []any{&t.ID, &t.Customer, &t.Status, &t.Place, &t.Admitted}, func() error {
		out[t.ID] = t
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read product %d's tickets: %w", id, err)
	}
	return out, nil
}

// lineBuyer is one buyer of the lined product: joins before the opening, waits with long-polls,
// orders with the pass once admitted (after a checkout of up to lineCheckout), and is done once
// the ticket says how it ended.
type lineBuyer struct {
	d        *drillEnv
	product  int64
	customer string
	ticket   string
}

// header is what each of the buyer's requests carries: the customer's token and the ticket.
func (b *lineBuyer) header() (map[string]string, error) {
	h := map[string]string{}
	if b.d.client.Bearer != nil {
		token, err := b.d.client.Bearer(b.customer)
		if err != nil {
			return nil, err
		}
		h["Authorization"] = "Bearer " + token
	}
	if b.ticket != "" {
		h["Line-Ticket"] = b.ticket
	}
	return h, nil
}

// join joins the line, trying again a few times on no answer or a 5xx.
func (b *lineBuyer) join(ctx context.Context) {
	h, err := b.header()
	if err != nil {
		return
	}
	url := fmt.Sprintf("%s/v1/products/%d/line", b.d.client.Base(), b.product)
	var body []byte
	if b.d.client.Bearer == nil {
		body, _ = json.Marshal(map[string]string{"customer_id": b.customer})
	}
	for range 5 {
		a := b.d.client.Request(ctx, http.MethodPost, url, body, h)
		if a.Status == http.StatusCreated || a.Status == http.StatusOK {
			var t struct {
				Ticket string `json:"ticket"`
			}
			if json.Unmarshal(a.Body, &t) == nil {
				b.ticket = t.Ticket
			}
			return
		}
		if a.Err == nil && a.Status < 500 {
			return
		}
		if clock.Sleep(ctx, 200*time.Millisecond) != nil {
			return
		}
	}
}

// wait follows the ticket until it ends, ordering when admitted.
func (b *lineBuyer) wait(ctx context.Context, deadline time.Time, tally *lineTally) {
	etag, ordered := "", ""
	for time.Now().Before(deadline) && ctx.Err() == nil {
		h, err := b.header()
		if err != nil {
			return
		}
		h["Prefer"] = "wait=2"
		if etag != "" {
			h["If-None-Match"] = etag
		}
		tally.polls.Add(1)
		a := b.d.client.Request(ctx, http.MethodGet, fmt.Sprintf("%s/v1/products/%d/line/ticket", b.d.client.Base(), b.product), nil, h)
		switch {
		case a.Status == http.StatusNotModified:
			continue
		case a.Status != http.StatusOK:
			tally.pollFailures.Add(1)
			if clock.Sleep(ctx, 100*time.Millisecond) != nil {
				return
			}
			continue
		}
		var st struct {
			Status string `json:"status"`
			Pass   string `json:"pass"`
		}
		if json.Unmarshal(a.Body, &st) != nil {
			tally.pollFailures.Add(1)
			continue
		}
		etag = a.ETag
		switch st.Status {
		case "admitted":
			if ordered == st.Pass {
				continue // ordered; waiting for the use to show
			}
			ordered = st.Pass
			if clock.Sleep(ctx, b.d.rng.Between(0, lineCheckout)) != nil {
				return
			}
			p := b.d.client.OrderWithPass(ctx, b.customer, b.product, 1, st.Pass)
			if p.Out.Outcome == model.Confirmed {
				tally.bought.Add(1)
				return
			}
		case "used":
			tally.bought.Add(1) // ordered, and the order's answer was lost: the line says it was used
			return
		case "sold_out":
			tally.soldOut.Add(1)
			return
		case "expired":
			tally.expired.Add(1)
			return
		case "left", "sale_ended":
			tally.other.Add(1)
			return
		}
	}
	tally.mu.Lock()
	tally.stuck = append(tally.stuck, b.customer)
	tally.mu.Unlock()
}
