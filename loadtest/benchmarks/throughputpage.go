package benchmarks

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// The throughput benchmark's report page. wrk, which carries its load, times no request the
// harness can see, so the page's plots come from the replicas' own counters, sampled every
// sampleEvery through the whole benchmark: answers to POST /v1/orders by status
// (stocksvc_http_requests_total) and their latency histogram
// (stocksvc_http_request_duration_seconds), summed over the replicas.

const sampleEvery = 500 * time.Millisecond

// orderCounters is one sample: cumulative answers by status and the latency histogram's
// cumulative counts by bound (seconds; the last +Inf), summed over the replicas.
type orderCounters struct {
	at     time.Duration
	codes  map[int]float64
	bounds []float64
	counts []float64
}

// counterSampler samples the replicas' order counters until stopped.
type counterSampler struct {
	start   time.Time
	mu      sync.Mutex
	samples []orderCounters
	stop    context.CancelFunc
	done    chan struct{}
}

func sampleCounters(ctx context.Context, c *cluster.Cluster) *counterSampler {
	ctx, stop := context.WithCancel(ctx)
	s := &counterSampler{start: time.Now(), stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(sampleEvery)
		defer tick.Stop()
		for {
			if sample, err := scrapeOrderCounters(ctx, c); err == nil {
				sample.at = time.Since(s.start)
				s.mu.Lock()
				s.samples = append(s.samples, sample)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// since is the sampler's clock: the report's zero.
func (s *counterSampler) since(t time.Time) time.Duration { return t.Sub(s.start) }

// finish stops sampling and returns the samples.
func (s *counterSampler) finish() []orderCounters {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func scrapeOrderCounters(ctx context.Context, c *cluster.Cluster) (orderCounters, error) {
	out := orderCounters{codes: map[int]float64{}}
	for _, port := range c.ReplicaPorts() {
		families, err := cluster.ScrapeFamilies(ctx, port, c.Token)
		if err != nil {
			return orderCounters{}, err
		}
		isOrders := func(m *dto.Metric) bool {
			return cluster.Label(m, "route") == "/v1/orders" && cluster.Label(m, "method") == http.MethodPost
		}
		for _, m := range families["stocksvc_http_requests_total"].GetMetric() {
			if code, err := strconv.Atoi(cluster.Label(m, "code")); err == nil && isOrders(m) {
				out.codes[code] += m.GetCounter().GetValue()
			}
		}
		for _, m := range families["stocksvc_http_request_duration_seconds"].GetMetric() {
			if !isOrders(m) {
				continue
			}
			h := m.GetHistogram()
			var bounds, counts []float64
			for _, b := range h.GetBucket() {
				bounds, counts = append(bounds, b.GetUpperBound()), append(counts, float64(b.GetCumulativeCount()))
			}
			if len(bounds) == 0 || !math.IsInf(bounds[len(bounds)-1], 1) {
				bounds, counts = append(bounds, math.Inf(1)), append(counts, float64(h.GetSampleCount()))
			}
			if out.bounds == nil {
				out.bounds, out.counts = bounds, make([]float64, len(bounds))
			}
			if len(bounds) == len(out.counts) {
				for i, n := range counts {
					out.counts[i] += n
				}
			}
		}
	}
	return out, nil
}

// counterSeries turns the samples into the page's series: one bucket per interval between two
// samples, its answers by class per second and its latency quantiles, estimated from the
// histogram's growth in the interval.
func counterSeries(samples []orderCounters) report.Series {
	s := report.Series{Step: sampleEvery, Rates: map[report.Class][]float64{}}
	n := max(0, len(samples)-1)
	for _, c := range report.Classes {
		s.Rates[c] = make([]float64, n)
	}
	for i := 1; i < len(samples); i++ {
		prev, cur := samples[i-1], samples[i]
		secs := (cur.at - prev.at).Seconds()
		s.Start = append(s.Start, prev.at)
		for code, v := range cur.codes {
			// A counter never goes down while its replica lives; max() guards a restart.
			s.Rates[report.ClassOf(code, "")][i-1] += max(0, v-prev.codes[code]) / secs
		}
		var grown []float64
		if len(cur.counts) == len(prev.counts) && len(cur.counts) > 0 {
			for k := range cur.counts {
				grown = append(grown, max(0, cur.counts[k]-prev.counts[k]))
			}
		}
		q := func(p float64) float64 {
			if grown == nil {
				return math.NaN()
			}
			return 1000 * report.HistogramQuantile(p, cur.bounds, grown)
		}
		s.P50, s.P95, s.P99 = append(s.P50, q(0.5)), append(s.P95, q(0.95)), append(s.P99, q(0.99))
	}
	for _, c := range report.Classes {
		if !slices.ContainsFunc(s.Rates[c], func(v float64) bool { return v > 0 }) {
			delete(s.Rates, c)
		}
	}
	return s
}

// throughputPageRun is the benchmark as its report page shows it.
func throughputPageRun(replicas int, o ThroughputOptions, samples []orderCounters, loads []report.Window, checks []report.Check,
	anchors []float64) report.Run {
	s := counterSeries(samples)
	outcome := "PASS"
	for _, c := range checks {
		if !c.OK {
			outcome = "FAIL"
		}
	}
	r := report.Run{
		Title: "throughput", Verdict: outcome, Sampled: &s, Phases: loads, Checks: checks,
		About: fmt.Sprintf("One hot product that never sells out, %d replicas behind HAProxy: a warm-up, a closed loop of %d wrk connections, then paced loads at 80%% and twice its rate (wrk and a vegeta probe).",
			replicas, o.Clients),
		OutcomesOf: fmt.Sprintf("POST /v1/orders as the replicas answered them, from their counters every %v", sampleEvery),
		LatencyOf:  "POST /v1/orders inside the replicas, from their latency histogram (quantiles interpolated within its buckets)",
		Params: []report.Field{
			{Name: "replicas", Value: strconv.Itoa(replicas) + " behind HAProxy, GOMAXPROCS=1 each"},
			{Name: "closed loop", Value: fmt.Sprintf("%d wrk connections for %v", o.Clients, o.Duration)},
			{Name: "pgbench clients", Value: strconv.Itoa(o.PGBenchClients)},
		},
		Notes: []string{fmt.Sprintf("The product's stock (%d units) never runs out: this benchmark measures the rate, so there is no stock to plot.", throughputStock)},
	}
	for i, a := range anchors {
		r.Figures = append(r.Figures, report.Field{Name: []string{"pgbench before", "pgbench after"}[min(i, 1)], Value: fmt.Sprintf("%.0f tx/s", a)})
	}
	return r
}
