package report

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"
)

// The throughput benchmark's page (-throughput). wrk, which carries its load, times no request
// the harness can see, so the page's plots come from the replicas' own counters, sampled all
// through the benchmark: answers to POST /v1/orders by status and their latency histogram,
// summed over the replicas.

// CounterSample is one sample of the replicas' order counters: cumulative answers by status
// and the latency histogram's cumulative counts by bound (seconds; the last +Inf), summed
// over the replicas, At since the benchmark's start.
type CounterSample struct {
	At     time.Duration
	Codes  map[int]float64
	Bounds []float64
	Counts []float64
}

// CounterSeries turns samples taken every step into the page's series: one bucket per interval
// between two samples, its answers by class per second and its latency quantiles, estimated
// from the histogram's growth in the interval.
func CounterSeries(samples []CounterSample, step time.Duration) Series {
	s := Series{Step: step, Rates: map[Class][]float64{}}
	n := max(0, len(samples)-1)
	for _, c := range Classes {
		s.Rates[c] = make([]float64, n)
	}
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		secs := (cur.At - prev.At).Seconds()
		s.Start = append(s.Start, prev.At)
		for code, v := range cur.Codes {
			// A counter never goes down while its replica lives; max() guards a restart.
			s.Rates[ClassOf(code, "")][i-1] += max(0, v-prev.Codes[code]) / secs
		}
		var grown []float64
		if len(cur.Counts) == len(prev.Counts) && len(cur.Counts) > 0 {
			for k := range cur.Counts {
				grown = append(grown, max(0, cur.Counts[k]-prev.Counts[k]))
			}
		}
		q := func(p float64) float64 {
			if grown == nil {
				return math.NaN()
			}
			return 1000 * HistogramQuantile(p, cur.Bounds, grown)
		}
		s.P50, s.P95, s.P99 = append(s.P50, q(0.5)), append(s.P95, q(0.95)), append(s.P99, q(0.99))
	}
	for _, c := range Classes {
		if !slices.ContainsFunc(s.Rates[c], func(v float64) bool { return v > 0 }) {
			delete(s.Rates, c)
		}
	}
	return s
}

// Throughput is what the throughput benchmark's page shows.
type Throughput struct {
	Replicas       int
	Clients        int           // the closed loop's wrk connections
	Duration       time.Duration // the closed loop's
	PGBenchClients int
	Stock          int64 // the hot product's, which never runs out
	Samples        []CounterSample
	SampleEvery    time.Duration
	Loads          []Window  // the phases of load
	Checks         []Check   // the ledgers'
	Anchors        []float64 // pgbench's tx/s, before and after
}

// ThroughputRun is the benchmark as its report page shows it.
func ThroughputRun(t Throughput) Run {
	s := CounterSeries(t.Samples, t.SampleEvery)
	outcome := "PASS"
	for _, c := range t.Checks {
		if !c.OK {
			outcome = "FAIL"
		}
	}
	r := Run{
		Title: "throughput", Verdict: outcome, Sampled: &s, Phases: t.Loads, Checks: t.Checks,
		About: fmt.Sprintf("One hot product that never sells out, %d replicas behind HAProxy: a warm-up, a closed loop of %d wrk connections, then paced loads at 80%% and twice its rate (wrk and a vegeta probe).",
			t.Replicas, t.Clients),
		OutcomesOf: fmt.Sprintf("POST /v1/orders as the replicas answered them, from their counters every %v", t.SampleEvery),
		LatencyOf:  "POST /v1/orders inside the replicas, from their latency histogram (quantiles interpolated within its buckets)",
		Params: []Field{
			{Name: "replicas", Value: strconv.Itoa(t.Replicas) + " behind HAProxy, GOMAXPROCS=1 each"},
			{Name: "closed loop", Value: fmt.Sprintf("%d wrk connections for %v", t.Clients, t.Duration)},
			{Name: "pgbench clients", Value: strconv.Itoa(t.PGBenchClients)},
		},
		Notes: []string{fmt.Sprintf("The product's stock (%d units) never runs out: this benchmark measures the rate, so there is no stock to plot.", t.Stock)},
	}
	for i, a := range t.Anchors {
		r.Figures = append(r.Figures, Field{Name: []string{"pgbench before", "pgbench after"}[min(i, 1)], Value: fmt.Sprintf("%.0f tx/s", a)})
	}
	return r
}
