package sale

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// pageRun is a sale as its report page shows it (package report): every order k6 sent for
// the hot product — the rush, the carts, the retries; the race's product is the exact race's,
// judged in the checks — from k6's request log, the hot product's stock over time and the
// moment it sold out from Postgres, and the replica killed, if one was. dir is the run's
// directory as the page links to it ("" when the page is in it).
func (h *harness) pageRun(ctx context.Context, run *saleRun, o Options, title, dir string, checks []verdict.Invariant, outcome string) (report.Run, error) {
	samples, err := readOrderSamples(filepath.Join(run.dir, "requests.csv.gz"))
	if err != nil {
		return report.Run{}, fmt.Errorf("k6's request log: %w", err)
	}
	var start time.Time
	for _, s := range samples {
		if b := s.begin(); start.IsZero() || b.Before(start) {
			start = b
		}
	}
	r := report.Run{
		Title: title, Verdict: outcome, Checks: verdict.Checks(checks),
		About: fmt.Sprintf("k6 (%s) through HAProxy over %d replicas: arrivals ramping to %d orders/s and back over %v, on a hot product of %d units.",
			run.spec.scenarios, h.Cluster.Replicas, o.Rate, o.Duration, o.Stock),
		OutcomesOf: fmt.Sprintf("every order for the hot product (%s), by the answer k6 got", hotScenarios(run.spec.scenarios)),
		LatencyOf:  "the same orders, request to answer at k6, every answer in the bucket",
		StockOf:    "Postgres: the initial stock less each order, at its transaction's start",
		Params:     h.saleParams(run.spec, o),
		Files: []report.Field{{Name: "k6 summary", Value: dir + "summary.txt"}, {Name: "every request", Value: dir + "requests.csv.gz"},
			{Name: "k6's log", Value: dir + "k6.log"}},
	}
	for _, s := range samples {
		if s.scenario == "race" {
			continue
		}
		r.Answers = append(r.Answers, report.Answer{At: s.end.Sub(start), Latency: time.Duration(s.duration * float64(time.Millisecond)),
			Class: report.ClassOf(s.status, "")})
	}
	hot := run.summary.SetupData.Hot
	if hot == 0 {
		return r, nil // k6 never set up its products
	}
	stock, err := verdict.StockLine(ctx, run.pool, hot, "hot product", start)
	if err != nil {
		return report.Run{}, err
	}
	r.Stock = []report.Line{stock}
	t, err := saleTiming(ctx, run)
	if err != nil {
		return report.Run{}, err
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

// hotScenarios lists the scenarios that order the hot product: all but the race.
func hotScenarios(scenarios string) string {
	var hot []string
	for _, sc := range strings.Split(scenarios, ",") {
		if sc = strings.TrimSpace(sc); sc != "" && sc != "race" {
			hot = append(hot, sc)
		}
	}
	return strings.Join(hot, ", ")
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
