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
