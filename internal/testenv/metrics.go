package testenv

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The tests' one way to read what a registry exports: the sample of a metric by its labels, or
// every sample of a metric by one label.

// Metric reads the sample of metric name from g whose labels include labels (name, value
// pairs; none for an unlabelled metric): a counter's, gauge's or untyped value. It fails the
// test when there is no such sample.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	v, ok := sample(t, g, name, labels)
	if !ok {
		t.Fatalf("metric %s%v not found", name, labels)
	}
	return v
}

// MetricOr is Metric with missing for a sample that is not there (a labelled counter nobody has
// counted yet has none).
func MetricOr(t testing.TB, g prometheus.Gatherer, name string, missing float64, labels ...string) float64 {
	t.Helper()
	if v, ok := sample(t, g, name, labels); ok {
		return v
	}
	return missing
}

// Gauge reads the unlabelled gauge name from g, failing the test if it is not there.
func Gauge(t testing.TB, g prometheus.Gatherer, name string) float64 {
	t.Helper()
	return Metric(t, g, name)
}

// Samples returns every sample of metric name by the value of its label label, failing the test
// when a sample has other labels.
func Samples(t testing.TB, g prometheus.Gatherer, name, label string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, m := range family(t, g, name).GetMetric() {
		if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != label {
			t.Fatalf("%s: labels %v, want %s only", name, m.GetLabel(), label)
		}
		out[m.GetLabel()[0].GetValue()] = value(m)
	}
	return out
}

func sample(t testing.TB, g prometheus.Gatherer, name string, labels []string) (float64, bool) {
	t.Helper()
	if len(labels)%2 != 0 {
		t.Fatalf("metric %s: labels %v are not name, value pairs", name, labels)
	}
metrics:
	for _, m := range family(t, g, name).GetMetric() {
		for i := 0; i < len(labels); i += 2 {
			if !hasLabel(m, labels[i], labels[i+1]) {
				continue metrics
			}
		}
		return value(m), true
	}
	return 0, false
}

// family returns metric name's family from g, or an empty one.
func family(t testing.TB, g prometheus.Gatherer, name string) *dto.MetricFamily {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f
		}
	}
	return &dto.MetricFamily{}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue() == value
		}
	}
	return false
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}
