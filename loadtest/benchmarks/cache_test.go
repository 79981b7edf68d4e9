package benchmarks

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

const replicaMetricsText = `# TYPE stocksvc_view_reads_total counter
stocksvc_view_reads_total{from="process"} 900
stocksvc_view_reads_total{from="redis"} 90
stocksvc_view_reads_total{from="postgres"} 10
# TYPE stocksvc_view_postgres_queries_total counter
stocksvc_view_postgres_queries_total{purpose="rebuild"} 10
stocksvc_view_postgres_queries_total{purpose="fallback"} 2
# TYPE stocksvc_view_keysets_loaded_total counter
stocksvc_view_keysets_loaded_total 3
# TYPE stocksvc_view_rebuilds_total counter
stocksvc_view_rebuilds_total 10
# TYPE stocksvc_view_rebuild_waits_total counter
stocksvc_view_rebuild_waits_total 4
# TYPE stocksvc_view_rebuild_giveups_total counter
stocksvc_view_rebuild_giveups_total 1
# TYPE stocksvc_view_fallback_refused_total counter
stocksvc_view_fallback_refused_total 7
# TYPE stocksvc_view_updates_failed_total counter
stocksvc_view_updates_failed_total 0
# TYPE stocksvc_orders_refused_from_view_total counter
stocksvc_orders_refused_from_view_total 500
# TYPE stocksvc_orders_total counter
stocksvc_orders_total{outcome="confirmed"} 70
stocksvc_orders_total{outcome="sold_out"} 500
`

func parseViews(t *testing.T, text string) viewStats {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return viewStatsFrom(families)
}

func TestViewStatsFrom(t *testing.T) {
	t.Parallel()
	got := parseViews(t, replicaMetricsText)
	want := viewStats{
		reads:     map[string]float64{"process": 900, "redis": 90, "postgres": 10},
		pgQueries: 12, // every series, whatever its labels
		queriesBy: map[string]float64{"rebuild": 10, "fallback": 2},
		keySets:   3, rebuilds: 10, waits: 4, giveups: 1, unavailable: 7, refused: 500,
		outcomes: map[string]float64{"confirmed": 70, "sold_out": 500},
		present:  map[string]bool{},
	}
	for _, name := range viewMetrics {
		want.present[name] = true
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(viewStats{})); diff != "" {
		t.Errorf("viewStatsFrom (-want +got):\n%s", diff)
	}
}

func TestViewStatsArithmetic(t *testing.T) {
	t.Parallel()
	a := parseViews(t, replicaMetricsText)
	sum := a.plus(a)
	if sum.queries() != 30 || sum.queriesBy["fallback"] != 4 || sum.reads["redis"] != 180 || sum.outcomes["sold_out"] != 1000 || !sum.has(viewMetrics...) {
		t.Errorf("a + a = %+v", sum)
	}
	if d := sum.minus(a); d.queries() != 15 || d.refused != 500 || d.reads["process"] != 900 || !d.has(metricViewQueries) {
		t.Errorf("(a + a) - a = %+v", d)
	}
	// A replica without the view cache makes the sum's view figures absent, not short.
	old := parseViews(t, "# TYPE stocksvc_orders_total counter\nstocksvc_orders_total{outcome=\"confirmed\"} 5\n")
	if mixed := a.plus(old); mixed.has(metricViewQueries) || mixed.outcomes["confirmed"] != 75 {
		t.Errorf("with a replica without the cache = %+v", mixed)
	}
	if got := missingMetrics(old); len(got) != len(viewMetrics) {
		t.Errorf("missingMetrics(no view metrics) = %v", got)
	}
}

func TestViewKey(t *testing.T) {
	t.Parallel()
	if got, want := viewKey("stocksvc-load:AB12:", 42), "stocksvc-load:AB12:view:product:{42}"; got != want {
		t.Errorf("viewKey = %q, want %q", got, want)
	}
}

func TestMedian(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   []float64
		want float64
	}{
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	}
	for _, tt := range tests {
		if got := median(tt.in); got != tt.want {
			t.Errorf("median(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
	if got := median(nil); !math.IsNaN(got) {
		t.Errorf("median(nil) = %v, want NaN", got)
	}
}

func TestVerdict(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ratio float64
		want  string
	}{
		{0.7, "met"},
		{1.3, "met"},
		{0.69, "**missed**"},
		{math.NaN(), "not measured"},
		{math.Inf(1), "not measured"},
	}
	for _, tt := range tests {
		if got := targetVerdict(tt.ratio, 0.7); got != tt.want {
			t.Errorf("verdict(%v, 0.7) = %q, want %q", tt.ratio, got, tt.want)
		}
	}
}

// fakeRound is a round of d seconds with n answers of status and the given view counters.
func fakeRound(kind string, status, n int, view viewStats) cacheRound {
	return cacheRound{kind: kind, view: view, cpu: cpuUse{"replicas": time.Second},
		wrk: wrkSummary{requests: n, window: 10 * time.Second, p50: 1, p99: 2, statuses: map[int]int{status: n}}}
}

func fakeRun(t *testing.T) (soldOutPhase, readsPhase, []stampedeRound) {
	views := parseViews(t, replicaMetricsText)
	zero := views.minus(views)
	refusals := zero
	refusals.refused, refusals.keySets = 80_000, 2
	// The replicas count more sold-out answers than wrk does: those in flight when it stopped.
	refusals.outcomes = map[string]float64{"sold_out": 96_000}
	so := soldOutPhase{product: 1, sold: soldOutStock, zeroIn: 3 * time.Millisecond}
	rd := readsPhase{product: 2, buyers: wrkSummary{requests: 3000, window: 60 * time.Second, statuses: map[int]int{201: 3000}}}
	for i := range 3 {
		// Refusals at 8,000, 9,000 and 10,000/s against healthz at 10,000/s: median ratio 0.9.
		refused, healthz := fakeRound(kindRefusals, 409, 80_000+10_000*i, refusals), fakeRound(kindHealthz, 200, 100_000, zero)
		refused.scans, healthz.scans = 3, 1 // a rebuild's scan may be reported a round late
		so.rounds = append(so.rounds, refused, healthz)
		// Reads at 6,000/s against 10,000/s: 0.6, missed.
		rd.rounds = append(rd.rounds, fakeRound(kindReads, 200, 60_000, zero), fakeRound(kindHealthz, 200, 100_000, zero))
	}
	var st []stampedeRound
	for _, q := range []float64{1, 1, 3} {
		v := zero
		v.pgQueries, v.queriesBy = q, map[string]float64{"rebuild": q}
		st = append(st, stampedeRound{deleted: true, view: v,
			readBurst: readBurst{statuses: map[int]int{200: 2}, latencies: []float64{10, 20}, took: 25 * time.Millisecond, misses: 1}})
	}
	return so, rd, st
}

func TestCacheReport(t *testing.T) {
	t.Parallel()
	so, rd, st := fakeRun(t)
	// -cache -duration 10s, the other flags at their defaults (main's TestParseOptionsCache).
	o := CacheOptions{Duration: 10 * time.Second, Clients: 128, Rounds: 3, StampedeRounds: 10, StampedeReaders: 500}
	report := cacheReport(3, o, so, rd, st)
	for _, want := range []string{
		"| sold-out refusals/s ÷ healthz/s | **0.90×** (9000 / 10000 per s; rounds 0.80–1.00×) | ≥ 0.7×: met |",
		"| sold-out answers given from the view (refused-from-view ÷ sold-out outcomes, the replicas' counters) | 83.3% (240000 of 288000) | all |",
		"| Postgres queries per 1,000 refusals (view and key-set counters) | 0.02 (6 in 270000) | 0 |",
		"| scans of the run's tables per 1,000 refusals, over all the phase's rounds (pg_stat_user_tables) | 0.04 (12 in 270000) | 0 |",
		"| 3 | sold-out orders | 10000 | 409 ×100000 | 1.0 / 2.0 ms | 2 = 0 + 0 + 2 | 80000 | 3 |",
		"| product reads/s ÷ healthz/s, during a sale | **0.60×** (6000 / 10000 per s; rounds 0.60–0.60×) | ≥ 0.7×: **missed** |",
		"| the buyers' confirmed orders/s meanwhile (32 connections) | 50 | |",
		"| stampede of 500 reads: Postgres queries per round, median (min–max of 3 rounds) | **1** (1–3) | 1 |",
		"| stampede: read latency p50 / p99, all rounds | 10.0 / 20.0 ms | |",
		"| 3 | yes | 3 = 3 + 0 + 0 | 0 | 0 | 0 | 0 / 0 / 0 | 200 ×2 | 1 | 10.0 / 20.0 ms | 25.0 ms |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
}

func TestCacheReportWithoutViewMetrics(t *testing.T) {
	t.Parallel()
	so, rd, st := fakeRun(t)
	for _, rounds := range [][]cacheRound{so.rounds, rd.rounds} {
		for i := range rounds {
			rounds[i].view = viewStats{}
		}
	}
	for i := range st {
		st[i].view = viewStats{}
	}
	report := cacheReport(3, CacheOptions{Clients: 128, Rounds: 3, StampedeReaders: 500}, so, rd, st)
	for _, want := range []string{
		"| sold-out answers given from the view (refused-from-view ÷ sold-out outcomes, the replicas' counters) | n/a | all |",
		"Postgres queries per round, median (min–max of 3 rounds) | n/a | 1 |",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("the report lacks %q:\n%s", want, report)
		}
	}
}

func TestCacheChecks(t *testing.T) {
	t.Parallel()
	so, rd, st := fakeRun(t)
	if failed := cacheChecks(so, rd, st); len(failed) != 0 {
		t.Errorf("cacheChecks of a clean run = %q", failed)
	}
	so.rounds[2].wrk.statuses = map[int]int{409: 89_999, 201: 1} // sold after selling out
	rd.rounds[1].wrk.failed = 4
	st[0].deleted = false
	st[1].statuses = map[int]int{200: 1, 0: 1}
	failed := cacheChecks(so, rd, st)
	for _, want := range []string{"round 2 of sold-out orders: 201 ×1, 409 ×89999", "round 1 of healthz", "stampede round 1: the view's key", "stampede round 2: no answer ×1"} {
		if !strings.Contains(strings.Join(failed, "\n"), want) {
			t.Errorf("cacheChecks = %q, want one saying %q", failed, want)
		}
	}
	so.rounds[0].wrk.notSoldOut = 1
	if got := cacheChecks(so, readsPhase{}, nil); len(got) != 2 {
		t.Errorf("with a 409 that is not sold-out, cacheChecks = %q, want 2 failures", got)
	}
}
