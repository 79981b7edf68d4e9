package main

import (
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// dashboards is where the Compose monitoring profile's Grafana finds its dashboards.
const dashboards = "../../deploy/grafana/dashboards"

// TestDashboardMetrics holds every query of deploy/grafana's dashboards to the metrics the
// service really registers: the registry is the one wire builds for /metrics, over real
// Postgres and Redis, and its names include the metrics that have no sample yet. A metric
// renamed or dropped in the code, or misspelt in a panel, fails here instead of leaving an
// operator an empty panel in the middle of a sale.
func TestDashboardMetrics(t *testing.T) {
	t.Parallel()
	registered := registeredMetrics(t)

	files, err := filepath.Glob(filepath.Join(dashboards, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no dashboards in %s (%v)", dashboards, err)
	}
	used := map[string]bool{}
	for _, file := range files {
		for _, q := range dashboardQueries(t, file) {
			names := metricName.FindAllString(q.expr, -1)
			if len(names) == 0 {
				t.Errorf("%s: panel %q: query %q names no metric of the service", filepath.Base(file), q.panel, q.expr)
			}
			for _, name := range names {
				used[name] = true
				if !registered(name) {
					t.Errorf("%s: panel %q: %s is not a metric the service registers (query %q)", filepath.Base(file), q.panel, name, q.expr)
				}
			}
		}
	}
	// What the dashboard is for (docs/operations.md): each of these has a panel.
	for _, want := range []string{"stocksvc_orders_total", "stocksvc_defense_catches_total", "stocksvc_orders_refused_fast_total",
		"stocksvc_batch_orders_bucket", "stocksvc_lock_wait_seconds_bucket", "stocksvc_view_reads_total",
		"stocksvc_async_orders_pending", "stocksvc_async_oldest_pending_seconds", "stocksvc_line_tickets", "stocksvc_line_admittable",
		// The sale's progress, lock health, the database and Redis (issue #34, item 3).
		"stocksvc_units_total", "stocksvc_product_stock", "stocksvc_lock_losses_total", "stocksvc_lock_refresh_failures_total",
		"stocksvc_lock_not_obtained_total", "stocksvc_db_pool_connections", "stocksvc_db_standbys", "stocksvc_redis_pool_connections",
		"stocksvc_http_requests_total", "stocksvc_holds_total"} {
		if !used[want] {
			t.Errorf("no dashboard query uses %s", want)
		}
	}
}

// metricName finds the metric names in a PromQL query: the service's (stocksvc_), and the
// Go and process collectors' it also registers.
var metricName = regexp.MustCompile(`\b(?:stocksvc|go|process)_[a-zA-Z0-9_:]+`)

// query is one target of a dashboard panel.
type query struct {
	panel, expr string
}

// dashboardQueries reads a Grafana dashboard's panels (rows' nested panels included) and
// returns their queries; a panel without one fails the test.
func dashboardQueries(t *testing.T, file string) []query {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	type panel struct {
		Type    string  `json:"type"`
		Title   string  `json:"title"`
		Panels  []panel `json:"panels"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	}
	var dash struct {
		UID    string  `json:"uid"`
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if dash.UID == "" {
		t.Errorf("%s: no uid (links to it would change at every provisioning)", file)
	}
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", filepath.Base(file), p.Title)
			}
			for _, tg := range p.Targets {
				if strings.TrimSpace(tg.Expr) == "" {
					t.Errorf("%s: panel %q has an empty query", filepath.Base(file), p.Title)
				}
				out = append(out, query{panel: p.Title, expr: tg.Expr})
			}
		}
	}
	walk(dash.Panels)
	return out
}

// registeredMetrics wires the service as serve does, over this test's Postgres and Redis, and
// returns whether a name is one its /metrics can expose: a registered metric, or a histogram's
// or summary's _bucket, _sum or _count series.
func registeredMetrics(t *testing.T) func(string) bool {
	t.Helper()
	env := serveEnv(t, testenv.KeyPrefix(t), map[string]string{"STOCKSVC_ASYNC_WORKERS": "0"})
	cfg, _, err := loadConfig(nil, envOf(env), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(t.Context(), cfg.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	rdb, _ := testenv.Redis(t)
	log := slog.New(slog.DiscardHandler)
	a, err := wire(t.Context(), cfg, dependencies{pool: pool, rdb: rdb}, stockhttp.CustomerAuth{}, newRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		a.svc.Close()
		_ = a.locks.Close()
	})
	names := a.metrics.metricNames()
	if !slices.Contains(names, "stocksvc_orders_total") || !slices.Contains(names, "stocksvc_async_oldest_pending_seconds") {
		t.Fatalf("the registry's names lack the service's own: %v", names)
	}
	return func(name string) bool {
		if slices.Contains(names, name) {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(names, base) {
				return true
			}
		}
		return false
	}
}
