package report

import (
	"math"
	"testing"
	"time"
)

// TestCounterSeries: the replicas' cumulative counters become answers per second by class and
// latency quantiles per interval, each interval from its own growth.
func TestCounterSeries(t *testing.T) {
	t.Parallel()
	bounds := []float64{0.001, 0.01, 0.1, math.Inf(1)}
	samples := []CounterSample{
		{At: 0, Codes: map[int]float64{201: 100}, Bounds: bounds, Counts: []float64{100, 100, 100, 100}},
		// 500 more 201s in half a second, all between 1 and 10 ms; 50 429s.
		{At: 500 * time.Millisecond, Codes: map[int]float64{201: 600, 429: 50}, Bounds: bounds, Counts: []float64{100, 650, 650, 650}},
		// 100 more 201s and a 503, all slow (10–100 ms).
		{At: time.Second, Codes: map[int]float64{201: 700, 429: 50, 503: 1}, Bounds: bounds, Counts: []float64{100, 650, 751, 751}},
	}
	s := CounterSeries(samples, 500*time.Millisecond)
	if len(s.Start) != 2 || s.Start[1] != 500*time.Millisecond {
		t.Fatalf("buckets start at %v, want 0 and 500ms", s.Start)
	}
	if s.Rates[Confirmed][0] != 1000 || s.Rates[Busy][0] != 100 || s.Rates[Confirmed][1] != 200 || s.Rates[Down][1] != 2 {
		t.Errorf("rates %v, want 1000 then 200 confirmed/s, 100 busy/s, then 2 unavailable/s", s.Rates)
	}
	if _, ok := s.Rates[SoldOut]; ok {
		t.Errorf("a class never answered has a series")
	}
	// The first interval's 550 observations all fall in (1, 10] ms: the median halfway.
	if got := s.P50[0]; math.Abs(got-5.5) > 1e-9 {
		t.Errorf("p50 of the first interval = %v ms, want 5.5", got)
	}
	if got := s.P99[1]; got <= 10 || got > 100 {
		t.Errorf("p99 of the second interval = %v ms, want within (10, 100]", got)
	}
}

// TestThroughputRun: a failed ledger check fails the page, and each pgbench run is a figure.
func TestThroughputRun(t *testing.T) {
	t.Parallel()
	in := Throughput{Replicas: 3, Clients: 64, Duration: 10 * time.Second, PGBenchClients: 8, Stock: 1000,
		SampleEvery: 500 * time.Millisecond, Checks: []Check{{Name: "ledger", OK: true}}, Anchors: []float64{900, 1100}}
	r := ThroughputRun(in)
	if r.Verdict != "PASS" || len(r.Figures) != 2 || r.Figures[1] != (Field{Name: "pgbench after", Value: "1100 tx/s"}) {
		t.Errorf("run = verdict %s, figures %v; want PASS and pgbench before/after", r.Verdict, r.Figures)
	}
	in.Checks = append(in.Checks, Check{Name: "stock", OK: false})
	if r := ThroughputRun(in); r.Verdict != "FAIL" {
		t.Errorf("a failed check: verdict %s, want FAIL", r.Verdict)
	}
}
