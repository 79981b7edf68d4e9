package benchmarks

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// The replicas' order counters, which the throughput benchmark's page (report.ThroughputRun)
// plots: wrk, which carries its load, times no request the harness can see. They are sampled
// every sampleEvery through the whole benchmark: answers to POST /v1/orders by status
// (stocksvc_http_requests_total) and their latency histogram
// (stocksvc_http_request_duration_seconds), summed over the replicas.

const sampleEvery = 500 * time.Millisecond

// counterSampler samples the replicas' order counters until stopped.
type counterSampler struct {
	start   time.Time
	mu      sync.Mutex
	samples []report.CounterSample
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
				sample.At = time.Since(s.start)
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
func (s *counterSampler) finish() []report.CounterSample {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func scrapeOrderCounters(ctx context.Context, c *cluster.Cluster) (report.CounterSample, error) {
	out := report.CounterSample{Codes: map[int]float64{}}
	for _, port := range c.ReplicaPorts() {
		families, err := cluster.ScrapeFamilies(ctx, port, c.Token)
		if err != nil {
			return report.CounterSample{}, err
		}
		isOrders := func(m *dto.Metric) bool {
			return cluster.Label(m, "route") == "/v1/orders" && cluster.Label(m, "method") == http.MethodPost
		}
		for _, m := range families["stocksvc_http_requests_total"].GetMetric() {
			if code, err := strconv.Atoi(cluster.Label(m, "code")); err == nil && isOrders(m) {
				out.Codes[code] += m.GetCounter().GetValue()
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
			if out.Bounds == nil {
				out.Bounds, out.Counts = bounds, make([]float64, len(bounds))
			}
			if len(bounds) == len(out.Counts) {
				for i, n := range counts {
					out.Counts[i] += n
				}
			}
		}
	}
	return out, nil
}
