package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// replicaMetrics is what the harness reads from a replica's /metrics.
type replicaMetrics struct {
	orders   float64            // POST /v1/orders requests answered
	catches  map[string]float64 // stocksvc_defense_catches_total by layer
	outcomes map[string]float64 // stocksvc_orders_total by outcome
}

// scrapeFamilies reads a replica's /metrics.
func scrapeFamilies(ctx context.Context, port int) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics of :%d: %w", port, err)
	}
	return families, nil
}

func scrapeReplica(ctx context.Context, port int) (replicaMetrics, error) {
	families, err := scrapeFamilies(ctx, port)
	if err != nil {
		return replicaMetrics{}, err
	}
	m := replicaMetrics{
		catches:  byLabel(families["stocksvc_defense_catches_total"], "layer"),
		outcomes: byLabel(families["stocksvc_orders_total"], "outcome"),
	}
	if f := families["stocksvc_http_requests_total"]; f != nil {
		for _, metric := range f.GetMetric() {
			if label(metric, "route") == "/v1/orders" && label(metric, "method") == http.MethodPost {
				m.orders += metric.GetCounter().GetValue()
			}
		}
	}
	return m, nil
}

func byLabel(f *dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	if f == nil {
		return out
	}
	for _, metric := range f.GetMetric() {
		out[label(metric, name)] += metric.GetCounter().GetValue()
	}
	return out
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// viewStats is what the replicas count about product views and the answers given from them
// (issue #9), summed over replicas. present lists the view metrics the replicas export at all:
// a build without the view cache exports none, and its figures are then not zeros but absent.
type viewStats struct {
	reads     map[string]float64 // stocksvc_view_reads_total by where the view came from
	pgQueries float64            // stocksvc_view_postgres_queries_total
	rebuilds  float64            // stocksvc_view_rebuilds_total
	waits     float64            // stocksvc_view_rebuild_waits_total
	giveups   float64            // stocksvc_view_rebuild_giveups_total
	refused   float64            // stocksvc_orders_refused_from_view_total
	outcomes  map[string]float64 // stocksvc_orders_total by outcome
	present   map[string]bool
}

// The view metrics by name.
const (
	metricViewReads     = "stocksvc_view_reads_total"
	metricViewQueries   = "stocksvc_view_postgres_queries_total"
	metricViewRebuilds  = "stocksvc_view_rebuilds_total"
	metricViewWaits     = "stocksvc_view_rebuild_waits_total"
	metricViewGiveups   = "stocksvc_view_rebuild_giveups_total"
	metricRefusedByView = "stocksvc_orders_refused_from_view_total"
)

var viewMetrics = []string{metricViewReads, metricViewQueries, metricViewRebuilds, metricViewWaits, metricViewGiveups, metricRefusedByView}

// viewStatsFrom reads viewStats from one replica's metric families. A counter's series are
// summed whatever their labels, so that a label added later (a reason, a product) still
// counts every query once.
func viewStatsFrom(families map[string]*dto.MetricFamily) viewStats {
	s := viewStats{
		reads:     byLabel(families[metricViewReads], "from"),
		pgQueries: counterSum(families[metricViewQueries]),
		rebuilds:  counterSum(families[metricViewRebuilds]),
		waits:     counterSum(families[metricViewWaits]),
		giveups:   counterSum(families[metricViewGiveups]),
		refused:   counterSum(families[metricRefusedByView]),
		outcomes:  byLabel(families["stocksvc_orders_total"], "outcome"),
		present:   map[string]bool{},
	}
	for _, name := range viewMetrics {
		if families[name] != nil {
			s.present[name] = true
		}
	}
	return s
}

func counterSum(f *dto.MetricFamily) float64 {
	var sum float64
	for _, m := range f.GetMetric() {
		sum += m.GetCounter().GetValue()
	}
	return sum
}

// plus adds b to a; a metric is present in the sum only if both export it, so that one
// replica without the cache makes the figure absent rather than short.
func (a viewStats) plus(b viewStats) viewStats {
	out := a.combine(b, 1)
	out.present = map[string]bool{}
	for name := range a.present {
		if b.present[name] {
			out.present[name] = true
		}
	}
	return out
}

// minus is what was counted between sample b and sample a.
func (a viewStats) minus(b viewStats) viewStats { return a.combine(b, -1) }

func (a viewStats) combine(b viewStats, sign float64) viewStats {
	add := func(x, y map[string]float64) map[string]float64 {
		out := map[string]float64{}
		for k, v := range x {
			out[k] += v
		}
		for k, v := range y {
			out[k] += sign * v
		}
		return out
	}
	return viewStats{
		reads:     add(a.reads, b.reads),
		pgQueries: a.pgQueries + sign*b.pgQueries,
		rebuilds:  a.rebuilds + sign*b.rebuilds,
		waits:     a.waits + sign*b.waits,
		giveups:   a.giveups + sign*b.giveups,
		refused:   a.refused + sign*b.refused,
		outcomes:  add(a.outcomes, b.outcomes),
		present:   a.present,
	}
}

// has says whether the replicas export every one of the metrics named.
func (a viewStats) has(names ...string) bool {
	for _, n := range names {
		if !a.present[n] {
			return false
		}
	}
	return true
}

// scrapeViews sums viewStats over the replicas listening on ports.
func scrapeViews(ctx context.Context, ports []int) (viewStats, error) {
	var sum viewStats
	for i, port := range ports {
		families, err := scrapeFamilies(ctx, port)
		if err != nil {
			return viewStats{}, fmt.Errorf("scrape :%d: %w", port, err)
		}
		s := viewStatsFrom(families)
		if i == 0 {
			sum = s
			continue
		}
		sum = sum.plus(s)
	}
	return sum, nil
}
