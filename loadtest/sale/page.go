package sale

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// orderLog is every order k6 sent, from its request log, as the report counts them: the
// answers, timed from start, the first request's beginning.
type orderLog struct {
	answers []report.Answer
	start   time.Time
}

// readOrders reads the run's request log (requests.csv.gz). Every order of every scenario is
// in it, the exact race's included: the console's latency line and the page's latency table
// are both over these answers, computed by report.LatencyOf.
func readOrders(run *saleRun) (orderLog, error) {
	samples, err := readOrderSamples(filepath.Join(run.dir, "requests.csv.gz"))
	if err != nil {
		return orderLog{}, fmt.Errorf("k6's request log: %w", err)
	}
	var l orderLog
	for _, s := range samples {
		if b := s.begin(); l.start.IsZero() || b.Before(l.start) {
			l.start = b
		}
	}
	for _, s := range samples {
		l.answers = append(l.answers, report.Answer{At: s.end.Sub(l.start), Latency: time.Duration(s.duration * float64(time.Millisecond)),
			Class: report.ClassOf(s.status, "")})
	}
	return l, nil
}

// pageRun is a sale as its report page shows it (package report): the console's totals;
// every order k6 sent, from its request log; every product's stock over time and the moment
// the hot product sold out, from Postgres; and the replica killed, if one was. dir is the
// run's directory as the page links to it ("" when the page is in it).
func (h *harness) pageRun(ctx context.Context, run *saleRun, o Options, title, dir string, checks []verdict.Invariant, outcome string, log orderLog) (report.Run, error) {
	start := log.start
	r := report.Run{
		Title: title, Verdict: outcome, Checks: verdict.Checks(checks),
		About: fmt.Sprintf("k6 (%s) through HAProxy over %d replicas: arrivals ramping to %d orders/s and back over %v, on a hot product of %d units.",
			run.spec.scenarios, h.Cluster.Replicas, o.Rate, o.Duration, o.Stock),
		OutcomesOf: fmt.Sprintf("every order k6 sent (%s), by the answer it got", run.spec.scenarios),
		LatencyOf:  "the same orders, request to answer at k6",
		StockOf:    "Postgres: the initial stock less each order, at its transaction's start",
		Params:     h.saleParams(run.spec, o),
		Answers:    log.answers,
		Files: []report.Field{{Name: "k6 summary", Value: dir + "summary.txt"}, {Name: "every request", Value: dir + "requests.csv.gz"},
			{Name: "k6's log", Value: dir + "k6.log"}},
	}
	t, err := saleTiming(ctx, run)
	if err != nil {
		return report.Run{}, err
	}
	r.Totals = newSaleTotals(run, log, t).groups()
	setup := run.summary.SetupData
	if setup.Hot == 0 {
		return r, nil // k6 never set up its products
	}
	for _, p := range []struct {
		id   int64
		name string
	}{{setup.Hot, "hot product"}, {setup.Second, "cart product"}, {setup.Race, "race product"}} {
		if p.id == 0 {
			continue
		}
		stock, err := verdict.StockLine(ctx, run.pool, p.id, p.name, start)
		if err != nil {
			return report.Run{}, err
		}
		r.Stock = append(r.Stock, stock)
	}
	if t.soldOut && !t.lastSale.IsZero() {
		at := t.lastSale.Sub(start)
		r.SoldOut = &at
	}
	if run.killed >= 0 {
		r.Events = append(r.Events, report.Mark{At: run.killedAt.Sub(start), Label: "SIGKILL " + run.replicas[run.killed].name})
	}
	return r, nil
}

func (s orderSample) begin() time.Time {
	return s.end.Add(-time.Duration(s.duration * float64(time.Millisecond)))
}

func (h *harness) saleParams(spec saleSpec, o Options) []report.Field {
	fields := []report.Field{
		{Name: "replicas", Value: strconv.Itoa(h.Cluster.Replicas) + " behind HAProxy"},
		{Name: "defense", Value: spec.defense},
		{Name: "lock retry", Value: spec.lockRetry},
		{Name: "scenarios", Value: spec.scenarios},
		{Name: "peak rate", Value: fmt.Sprintf("%d orders/s", o.Rate)},
		{Name: "duration", Value: o.Duration.String()},
		{Name: "hot stock", Value: fmt.Sprintf("%d units", o.Stock)},
	}
	if spec.maxBatch > 0 {
		fields = append(fields, report.Field{Name: "max batch", Value: strconv.Itoa(spec.maxBatch)})
	}
	if spec.queueWait > 0 {
		fields = append(fields, report.Field{Name: "queue wait", Value: spec.queueWait.String()})
	}
	if o.KillAfter > 0 {
		fields = append(fields, report.Field{Name: "kill after", Value: o.KillAfter.String()})
	}
	if h.Cluster.Redlock > 0 {
		fields = append(fields, report.Field{Name: "Redlock", Value: strconv.Itoa(h.Cluster.Redlock) + " redis-servers"})
	}
	return fields
}

// verdictOf names a mode's returned error as the summary's verdict line does.
func verdictOf(err error) string {
	switch {
	case err == nil:
		return "PASS"
	case errors.Is(err, env.ErrStopped):
		return "STOPPED"
	}
	return "FAIL"
}
