package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/model"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// A drill's report page (package report), beside its history: every order attempt the
// clients made, by its answer, the hot product's stock from Postgres, the fault's windows
// shaded and its events marked; the verdict of Postgres and of the linearizability check beside them.

const pageName = "report.html"

// writePage writes the run's page to its directory.
func (d *drillEnv) writePage(ctx context.Context, pool *pgxpool.Pool, ops []*model.Op, out drillOutcome) error {
	r, err := d.pageRun(ctx, pool, ops, out)
	if err != nil {
		return err
	}
	page := report.Page{Title: "stocksvc fault drill: " + d.sc.name, Command: "go run -C loadtest . " + strings.Join(d.h.Args, " "), Runs: []report.Run{r}}
	return report.Write(filepath.Join(d.dir, pageName), page)
}

func (d *drillEnv) pageRun(ctx context.Context, pool *pgxpool.Pool, ops []*model.Op, out drillOutcome) (report.Run, error) {
	a := out.avail
	r := report.Run{
		Title:      fmt.Sprintf("%s, run %d", d.sc.name, out.run),
		About:      d.sc.about + ".",
		Verdict:    out.verdict(),
		OutcomesOf: "every order attempt of the drill's clients (all products), by its answer",
		LatencyOf:  "the same attempts, request to answer at the client (a retry is an attempt of its own)",
		StockOf:    "Postgres: the hot product's initial stock, less each order at its transaction's start, plus each restock",
		Checks:     verdict.Checks(append(append([]verdict.Invariant{}, out.invariants...), out.reconcile...)),
		Params:     d.pageParams(out),
		Figures: []report.Field{
			{Name: "operations", Value: fmt.Sprintf("%d (at most %d open at once)", out.ops, out.concurrent)},
			{Name: "orders", Value: fmt.Sprintf("confirmed %d, sold-out %d, refused %d, unknown %d", a.orders[model.Confirmed], a.orders[model.SoldOut],
				a.orders[model.Refused], a.orders[model.Unknown])},
			{Name: "outcomes unknown", Value: fmt.Sprintf("%d, of which %d found in the database", out.unknown, out.resolved)},
			{Name: "linearizable, " + out.writes.Name, Value: porcupineVerdict(out.writes)},
			{Name: "linearizable, " + out.reads.Name, Value: porcupineVerdict(out.reads)},
			{Name: "answered 429", Value: fmt.Sprintf("during %.1f s (100 ms slices)", a.busy.Seconds())},
			{Name: "answered 5xx or nothing", Value: fmt.Sprintf("during %.1f s (100 ms slices)", a.unavailable.Seconds())},
			{Name: "longest stall", Value: fmt.Sprintf("%.1f s from %.1f s", a.longestStall.Seconds(), a.stallAt.Seconds())},
			{Name: "layer catches", Value: fmt.Sprintf("fence %.0f, version %.0f, guard %.0f, check %.0f", out.catches["fence"], out.catches["version"],
				out.catches["guard"], out.catches["check"])},
		},
		Files: []report.Field{{Name: "history", Value: "history.txt"}, {Name: "for -recheck", Value: "history.json"}},
	}
	for _, f := range out.failed {
		r.Checks = append(r.Checks, report.Check{Name: "the scenario's own check", OK: false, Detail: f})
	}
	for _, why := range out.invalid {
		r.Notes = append(r.Notes, "INVALID: "+why)
	}
	r.Notes = append(r.Notes, out.notes...)
	for _, p := range ops {
		if p.In.Kind != model.KindOrder {
			continue
		}
		for _, at := range p.Attempts {
			r.Answers = append(r.Answers, report.Answer{At: at.End, Latency: at.End - at.Start, Class: report.ClassOf(at.Status, at.Code)})
		}
	}
	d.mu.Lock()
	for _, w := range d.faults {
		r.Faults = append(r.Faults, report.Window{Start: w.start, End: w.end, Label: d.sc.name})
	}
	for _, e := range d.events {
		r.Events = append(r.Events, report.Mark{At: e.at, Label: e.what})
	}
	d.mu.Unlock()
	hot, err := verdict.StockLine(ctx, pool, d.hot, "hot product", d.rec.Start)
	if err != nil {
		return report.Run{}, err
	}
	r.Stock = []report.Line{hot}
	return r, nil
}

func porcupineVerdict(c model.CheckResult) string {
	v := map[porcupine.CheckResult]string{porcupine.Ok: "linearizable", porcupine.Illegal: "NOT LINEARIZABLE",
		porcupine.Unknown: "undecided (the checker timed out)"}[c.Result]
	return fmt.Sprintf("%s: %d operations in %d partitions, checked in %v (%d configurations)", v, c.Ops, c.Partitions,
		c.Elapsed.Round(time.Millisecond), c.Explored)
}

func (d *drillEnv) pageParams(out drillOutcome) []report.Field {
	fields := []report.Field{
		{Name: "scenario", Value: d.sc.name},
		{Name: "run, seed", Value: fmt.Sprintf("%d, %d", out.run, out.seed)},
		{Name: "replicas", Value: strconv.Itoa(d.h.Cluster.Replicas) + " behind HAProxy"},
		{Name: "victim", Value: d.c.Replicas[d.victim].Name},
		{Name: "rate", Value: fmt.Sprintf("%.0f operations/s", d.plan.rate)},
		{Name: "defense", Value: d.h.Cluster.Defense},
		{Name: "lock TTL, lock wait", Value: fmt.Sprintf("%v, %v", d.plan.lockTTL, d.lockWait())},
		{Name: "client timeout", Value: d.plan.clientTimeout.String()},
		{Name: "hot product", Value: fmt.Sprintf("%d units, restocked 10 every 4 s", d.hotStock())},
	}
	if d.sc.buyers > 0 {
		fields = append(fields, report.Field{Name: "closed-loop buyers", Value: strconv.Itoa(d.sc.buyers)})
	}
	return fields
}
