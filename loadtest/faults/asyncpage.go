package faults

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// The asynchronous sale's report page: what the clients were answered (202 accepted, 409 sold
// out at once, never answered) when they were answered, and what the service decided for the
// accepted orders when Postgres says it decided (confirmed; rejected, which is a sold-out); the
// product's stock from Postgres; the kill or the pause shaded.

func (d *drillEnv) writeAsyncPage(ctx context.Context, pool *pgxpool.Pool, product int64, o AsyncOptions, fig asyncFigures, orders []*asyncOrder,
	checks []verdict.Invariant, result error) error {
	outcome := "PASS"
	if errors.Is(result, env.ErrFailed) {
		outcome = "FAIL"
	}
	r := report.Run{
		Title: "asynchronous sale", Verdict: outcome, Checks: verdict.Checks(checks),
		About: fmt.Sprintf("Every order Prefer: respond-async through HAProxy over %d replicas, %d orders/s of 1–2 units for %v on a product of %d units.",
			d.h.Cluster.Replicas, o.Rate, o.Duration, o.Stock),
		OutcomesOf: "the clients' answers (accepted: 202; sold-out: 409 at once; unavailable: never answered), " +
			"and the decisions in Postgres at their decided_at (confirmed; rejected, shown as sold-out)",
		LatencyOf: "POST to its final answer at the client (202, or 409), retries with the same key included",
		StockOf:   "Postgres: the initial stock less each confirmed order, at its transaction's start",
		Params: []report.Field{
			{Name: "replicas", Value: strconv.Itoa(d.h.Cluster.Replicas) + " behind HAProxy"},
			{Name: "rate", Value: fmt.Sprintf("%d orders/s", o.Rate)},
			{Name: "duration", Value: o.Duration.String()},
			{Name: "stock", Value: fmt.Sprintf("%d units", o.Stock)},
			{Name: "seed", Value: strconv.FormatUint(o.Seed, 10)},
		},
		Figures: []report.Field{
			{Name: "orders sent", Value: fmt.Sprintf("%d (%d retried with the same key)", fig.sent, fig.retried)},
			{Name: "answered", Value: fmt.Sprintf("%d accepted, %d refused at once, %d never answered", fig.accepted, fig.refusedAtOnce, fig.failed)},
			{Name: "decided", Value: fmt.Sprintf("%d confirmed, %d rejected, %d pending", fig.confirmed, fig.rejected, fig.pending)},
			{Name: "POST → 202", Value: fmt.Sprintf("p50 %v, p99 %v", fig.acceptP50.Round(100*time.Microsecond), fig.acceptP99.Round(100*time.Microsecond))},
			{Name: "202 → decision", Value: fmt.Sprintf("p50 %v, p99 %v, max %v", fig.p50.Round(time.Millisecond), fig.p99.Round(time.Millisecond), fig.max.Round(time.Millisecond))},
		},
	}
	if o.KillAfter > 0 {
		r.Params = append(r.Params, report.Field{Name: "kill after", Value: o.KillAfter.String()})
	}
	if o.PauseAfter > 0 {
		r.Params = append(r.Params, report.Field{Name: "pause after, for", Value: fmt.Sprintf("%v, %v", o.PauseAfter, o.PauseFor)})
	}
	for _, ord := range orders {
		class := report.Down
		switch {
		case ord.status == "accepted":
			class = report.Accepted
		case ord.status == "confirmed":
			class = report.Confirmed
		case ord.status == "refused":
			class = report.SoldOut
		case strings.HasPrefix(ord.status, "failed"):
			class = report.Down
		}
		r.Answers = append(r.Answers, report.Answer{At: ord.sent + ord.answered, Latency: ord.answered, Class: class})
	}
	rows, _ := pool.Query(ctx, `SELECT decided_at, status FROM async_orders WHERE product_id = $1 AND decided_at IS NOT NULL`, product)
	var decided time.Time
	var status string
	_, err := pgx.ForEachRow(rows, []any{&decided, &status}, func() error {
		class := report.SoldOut
		if status == "confirmed" {
			class = report.Confirmed
		}
		r.Answers = append(r.Answers, report.Answer{At: max(0, decided.Sub(d.rec.Start)), Latency: -1, Class: class})
		return nil
	})
	if err != nil {
		return fmt.Errorf("read the decisions: %w", err)
	}
	stock, err := verdict.StockLine(ctx, pool, product, "product", d.rec.Start)
	if err != nil {
		return err
	}
	r.Stock = []report.Line{stock}
	if n := len(stock.Points); n > 1 && stock.Points[n-1].Value == 0 {
		at := stock.Points[n-1].At
		r.SoldOut = &at
	}
	d.mu.Lock()
	for _, w := range d.faults {
		// Named by the event that began it ("SIGKILL r2", "SIGSTOP r1, which..."): its verb.
		label := "fault"
		for _, e := range d.events {
			if e.at <= w.start {
				label, _, _ = strings.Cut(e.what, " ")
			}
		}
		r.Faults = append(r.Faults, report.Window{Start: w.start, End: w.end, Label: label})
	}
	for _, e := range d.events {
		r.Events = append(r.Events, report.Mark{At: e.at, Label: e.what})
	}
	d.mu.Unlock()
	page := report.Page{Title: "stocksvc asynchronous sale", Command: "go run -C loadtest . " + strings.Join(d.h.Args, " "), Runs: []report.Run{r}}
	return report.Write(filepath.Join(d.dir, pageName), page)
}
