package opening

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/loadtest/report"
)

// -opening-fair's report page: one run per round, on the round's own time axis (from its
// product's creation): every order's answer by outcome and latency, the product's stock, and,
// with the line, the line itself from Postgres — its length and the admissions running, the
// admissions a second — and when each group's buyers heard their outcome, with the opening
// and the sold-out moment marked.

// roundTables is what a round's page reads of Postgres: its orders of the product, and, with
// the line, its tickets.
type roundTables struct {
	initial int64
	sales   []sale
	tickets []ticketRow
}

type sale struct {
	at    time.Time
	units int64
}

// ticketRow is a ticket's times: joined, admitted (zero: never) and ended (zero: open).
type ticketRow struct {
	joined, admitted, ended time.Time
}

// readTables reads product's orders and, when lined, its tickets.
func readTables(ctx context.Context, pool *pgxpool.Pool, product int64, lined bool) (roundTables, error) {
	var t roundTables
	if err := pool.QueryRow(ctx, `SELECT initial_stock FROM products WHERE id = $1`, product).Scan(&t.initial); err != nil {
		return t, fmt.Errorf("read the product: %w", err)
	}
	rows, _ := pool.Query(ctx, `
		SELECT o.created_at, i.quantity FROM orders o JOIN order_items i ON i.order_id = o.id
		 WHERE i.product_id = $1 AND o.status IN ('confirmed', 'held') ORDER BY o.created_at`, product)
	var s sale
	if _, err := pgx.ForEachRow(rows, []any{&s.at, &s.units}, func() error { t.sales = append(t.sales, s); return nil }); err != nil {
		return t, fmt.Errorf("read the sales: %w", err)
	}
	if !lined {
		return t, nil
	}
	rows, _ = pool.Query(ctx, `
		SELECT joined_at, coalesce(admitted_at, 'epoch'), coalesce(ended_at, 'epoch')
		  FROM line_tickets WHERE product_id = $1`, product)
	var tk ticketRow
	epoch := time.Unix(0, 0)
	_, err := pgx.ForEachRow(rows, []any{&tk.joined, &tk.admitted, &tk.ended}, func() error {
		row := tk
		if row.admitted.Equal(epoch) {
			row.admitted = time.Time{}
		}
		if row.ended.Equal(epoch) {
			row.ended = time.Time{}
		}
		t.tickets = append(t.tickets, row)
		return nil
	})
	if err != nil {
		return t, fmt.Errorf("read the tickets: %w", err)
	}
	return t, nil
}

// pageStep is the spacing of the page's line and stock series.
const pageStep = 20 * time.Millisecond

// fairPage is the page of rounds, run by command.
func fairPage(command string, rounds []roundResult) report.Page {
	p := report.Page{Title: "stocksvc: a fair opening", Command: command}
	for _, r := range rounds {
		p.Runs = append(p.Runs, roundRun(r))
	}
	return p
}

// roundRun is one round as its page shows it.
func roundRun(r roundResult) report.Run {
	with := "without the line"
	if r.lined {
		with = "with the line"
	}
	verdict := "PASS"
	var checks []report.Check
	for _, inv := range r.invariants {
		checks = append(checks, report.Check{Name: inv.Name, OK: inv.OK, Detail: inv.Detail})
		if !inv.OK {
			verdict = "FAIL"
		}
	}
	opening := r.opens.Sub(r.origin)
	end := opening
	for _, a := range r.orders {
		end = max(end, a.At)
	}
	for _, ds := range r.heard {
		for _, d := range ds {
			end = max(end, d)
		}
	}
	run := report.Run{
		Title:   fmt.Sprintf("%s, seed %d, %s", r.mix, r.seed, with),
		About:   "polite buyers (arrive once before the opening; with the line: join, wait in line, order when admitted) against scripts (hammer every route from 2 s before the opening)",
		Verdict: verdict,
		Params: []report.Field{{Name: "mix", Value: r.mix.String()}, {Name: "seed", Value: fmt.Sprint(r.seed)},
			{Name: "line", Value: with}},
		Figures: []report.Field{
			{Name: "polite wins / buyers", Value: fmt.Sprintf("%d / %d", r.politeWins, r.mix.Polite)},
			{Name: "scripts wins / buyers", Value: fmt.Sprintf("%d / %d", r.scriptWins, r.mix.Scripts)},
			{Name: "ratio (polite ÷ scripts)", Value: fmt.Sprintf("%.2f", r.ratio())},
			{Name: "opening → first order", Value: fmtFirst(r.firstSale)},
			{Name: "opening → sold out", Value: fmtFirst(r.soldOut)},
			{Name: "script requests", Value: fmt.Sprint(r.scriptRequests)},
		},
		Checks:     checks,
		Answers:    r.orders,
		LatencyOf:  "each order's round trip, at the buyer",
		OutcomesOf: "orders (POST /v1/orders) of both groups",
		Stock:      []report.Line{stockLine(r, end)},
		StockOf:    "Postgres: the initial stock less the units of each order, at its created_at",
		Events:     []report.Mark{{At: opening, Label: "opening"}},
		End:        end,
	}
	if r.soldOut > 0 {
		at := opening + r.soldOut
		run.SoldOut = &at
	}
	if r.lined {
		run.Panels = linePanels(r, end)
	}
	run.Panels = append(run.Panels, heardPanel(r, end))
	return run
}

func fmtFirst(d time.Duration) string {
	if d <= 0 {
		return "–"
	}
	return d.Round(time.Millisecond).String()
}

// stockLine is the product's stock over the round, from its sales.
func stockLine(r roundResult, end time.Duration) report.Line {
	l := report.Line{Name: "stock"}
	left := r.tables.initial
	i := 0
	for at := time.Duration(0); at <= end; at += pageStep {
		for i < len(r.tables.sales) && r.tables.sales[i].at.Sub(r.origin) <= at {
			left -= r.tables.sales[i].units
			i++
		}
		l.Points = append(l.Points, report.Point{At: at, Value: float64(left)})
	}
	return l
}

// linePanels are the line's length and admissions running, and the admissions a second, as
// Postgres recorded them: an admission runs from admitted_at until ended_at (used, expired or
// left; a use is recorded by the line's next advance, so a used admission may show as running
// a little longer than it did).
func linePanels(r roundResult, end time.Duration) []report.Panel {
	waiting := report.Line{Name: "in line (joined, not admitted, not left)"}
	running := report.Line{Name: "admissions running"}
	perSecond := report.Line{Name: "admissions a second"}
	const bucket = 100 * time.Millisecond
	for at := time.Duration(0); at <= end; at += pageStep {
		t := r.origin.Add(at)
		var w, a float64
		for _, tk := range r.tables.tickets {
			open := tk.ended.IsZero() || tk.ended.After(t)
			switch {
			case !open || tk.joined.After(t):
			case !tk.admitted.IsZero() && !tk.admitted.After(t):
				a++
			default:
				w++
			}
		}
		waiting.Points = append(waiting.Points, report.Point{At: at, Value: w})
		running.Points = append(running.Points, report.Point{At: at, Value: a})
	}
	for at := time.Duration(0); at <= end; at += bucket {
		from, to := r.origin.Add(at), r.origin.Add(at+bucket)
		var n float64
		for _, tk := range r.tables.tickets {
			if !tk.admitted.IsZero() && !tk.admitted.Before(from) && tk.admitted.Before(to) {
				n++
			}
		}
		perSecond.Points = append(perSecond.Points, report.Point{At: at, Value: n / bucket.Seconds()})
	}
	return []report.Panel{
		{Title: "The line", Of: "Postgres's line_tickets, every 20 ms", Unit: "tickets", Lines: []report.Line{waiting, running}},
		{Title: "Admissions", Of: "Postgres's line_tickets.admitted_at, in tenths of a second", Unit: "admissions/s", Lines: []report.Line{perSecond}},
	}
}

// heardPanel is, for each group, how many of its buyers had heard their outcome (won, or
// heard the units were gone) by each moment: how long each group waited.
func heardPanel(r roundResult, end time.Duration) report.Panel {
	names := map[string]string{"p": "polite buyers", "s": "scripts"}
	var lines []report.Line
	for _, kind := range []string{"p", "s"} {
		l := report.Line{Name: names[kind] + " who know their outcome"}
		for at := time.Duration(0); at <= end; at += pageStep {
			var n float64
			for _, d := range r.heard[kind] {
				if d <= at {
					n++
				}
			}
			l.Points = append(l.Points, report.Point{At: at, Value: n})
		}
		lines = append(lines, l)
	}
	return report.Panel{Title: "Who knows their outcome", Of: "the buyers: the answer that told each it won, or that the units were gone", Unit: "buyers", Lines: lines}
}
