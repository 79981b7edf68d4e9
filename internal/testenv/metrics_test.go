package testenv_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMetricReaders(t *testing.T) {
	reg := prometheus.NewRegistry()
	orders := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "orders_total"}, []string{"outcome", "from"})
	queued := prometheus.NewGauge(prometheus.GaugeOpts{Name: "queued"})
	reg.MustRegister(orders, queued)
	orders.WithLabelValues("confirmed", "memory").Add(3)
	orders.WithLabelValues("busy", "redis").Add(2)
	queued.Set(7)

	if got := testenv.Metric(t, reg, "orders_total", "outcome", "busy"); got != 2 {
		t.Errorf("orders{outcome=busy} = %v, want 2", got)
	}
	if got := testenv.Metric(t, reg, "orders_total", "outcome", "confirmed", "from", "memory"); got != 3 {
		t.Errorf("orders{confirmed, memory} = %v, want 3", got)
	}
	if got := testenv.MetricOr(t, reg, "orders_total", -1, "outcome", "confirmed", "from", "redis"); got != -1 {
		t.Errorf("orders{confirmed, redis} = %v, want the missing value -1: both labels must match", got)
	}
	if got := testenv.MetricOr(t, reg, "no_such_metric", 0); got != 0 {
		t.Errorf("a metric nobody exports = %v, want 0", got)
	}
	if got := testenv.Gauge(t, reg, "queued"); got != 7 {
		t.Errorf("queued = %v, want 7", got)
	}
	samples := testenv.Samples(t, reg, "queued_by_line", "line")
	if len(samples) != 0 {
		t.Errorf("samples of a metric nobody exports = %v, want none", samples)
	}
}
