package benchmarks

import (
	"context"
	"fmt"

	dto "github.com/prometheus/client_model/go"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
)

// viewStats is what the replicas count about product views and the answers given from them
// (issue #9), summed over replicas. present lists the view metrics the replicas export at all:
// a build without the view cache exports none, and its figures are then not zeros but absent.
type viewStats struct {
	reads     map[string]float64 // stocksvc_view_reads_total by where the view came from
	pgQueries float64            // stocksvc_view_postgres_queries_total, every purpose
	// queriesBy is stocksvc_view_postgres_queries_total by purpose (rebuild, fallback).
	queriesBy map[string]float64
	// keySets counts the sold-out path's own queries: loads of a sold-out product's confirmed
	// idempotency keys (stocksvc_view_keysets_loaded_total), one per replica and sell-out.
	keySets  float64
	rebuilds float64 // stocksvc_view_rebuilds_total
	waits    float64 // stocksvc_view_rebuild_waits_total
	giveups  float64 // stocksvc_view_rebuild_giveups_total
	// unavailable counts reads answered 503 because Redis could not serve them and the
	// replica's fallback reads of Postgres were all taken (stocksvc_view_fallback_refused_total).
	unavailable float64
	lostUpdates float64            // stocksvc_view_updates_failed_total
	refused     float64            // stocksvc_orders_refused_from_view_total
	outcomes    map[string]float64 // stocksvc_orders_total by outcome
	present     map[string]bool
}

// queries is every Postgres query the view's read path and the sold-out path made: rebuilds,
// fallback reads and key-set loads.
func (a viewStats) queries() float64 { return a.pgQueries + a.keySets }

// The view metrics by name, as internal/view and internal/stock register them.
const (
	metricViewReads       = "stocksvc_view_reads_total"
	metricViewQueries     = "stocksvc_view_postgres_queries_total"
	metricKeySetLoads     = "stocksvc_view_keysets_loaded_total"
	metricViewRebuilds    = "stocksvc_view_rebuilds_total"
	metricViewWaits       = "stocksvc_view_rebuild_waits_total"
	metricViewGiveups     = "stocksvc_view_rebuild_giveups_total"
	metricViewUnavailable = "stocksvc_view_fallback_refused_total"
	metricViewLostUpdates = "stocksvc_view_updates_failed_total"
	metricRefusedByView   = "stocksvc_orders_refused_from_view_total"
)

var viewMetrics = []string{metricViewReads, metricViewQueries, metricKeySetLoads, metricViewRebuilds, metricViewWaits,
	metricViewGiveups, metricViewUnavailable, metricViewLostUpdates, metricRefusedByView}

// queryMetrics are the counters that queries() adds up.
var queryMetrics = []string{metricViewQueries, metricKeySetLoads}

// viewStatsFrom reads viewStats from one replica's metric families. A counter's series are
// summed whatever their labels, so that a label added later (a reason, a product) still
// counts every query once.
func viewStatsFrom(families map[string]*dto.MetricFamily) viewStats {
	s := viewStats{
		reads:       cluster.ByLabel(families[metricViewReads], "from"),
		pgQueries:   counterSum(families[metricViewQueries]),
		queriesBy:   cluster.ByLabel(families[metricViewQueries], "purpose"),
		keySets:     counterSum(families[metricKeySetLoads]),
		rebuilds:    counterSum(families[metricViewRebuilds]),
		waits:       counterSum(families[metricViewWaits]),
		giveups:     counterSum(families[metricViewGiveups]),
		unavailable: counterSum(families[metricViewUnavailable]),
		lostUpdates: counterSum(families[metricViewLostUpdates]),
		refused:     counterSum(families[metricRefusedByView]),
		outcomes:    cluster.ByLabel(families["stocksvc_orders_total"], "outcome"),
		present:     map[string]bool{},
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
		reads:       add(a.reads, b.reads),
		pgQueries:   a.pgQueries + sign*b.pgQueries,
		queriesBy:   add(a.queriesBy, b.queriesBy),
		keySets:     a.keySets + sign*b.keySets,
		rebuilds:    a.rebuilds + sign*b.rebuilds,
		waits:       a.waits + sign*b.waits,
		giveups:     a.giveups + sign*b.giveups,
		unavailable: a.unavailable + sign*b.unavailable,
		lostUpdates: a.lostUpdates + sign*b.lostUpdates,
		refused:     a.refused + sign*b.refused,
		outcomes:    add(a.outcomes, b.outcomes),
		present:     a.present,
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

// scrapeViews sums viewStats over c's replicas.
func scrapeViews(ctx context.Context, c *cluster.Cluster) (viewStats, error) {
	var sum viewStats
	for i, port := range c.ReplicaPorts() {
		families, err := cluster.ScrapeFamilies(ctx, port, c.Token)
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
