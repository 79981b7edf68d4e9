package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// Gauge reads the unlabelled gauge name from g, failing the test if it is not there.
func Gauge(t testing.TB, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("gauge %s not found", name)
	return 0
}
