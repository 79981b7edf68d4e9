package cluster

import (
	"context"
	"fmt"
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// ReplicaMetrics is what the harness reads from a replica's /metrics.
type ReplicaMetrics struct {
	Orders   float64            // POST /v1/orders requests answered
	Catches  map[string]float64 // stocksvc_defense_catches_total by layer
	Outcomes map[string]float64 // stocksvc_orders_total by outcome
}

// ScrapeFamilies reads a replica's /metrics, on its only listener: with the admin token, which
// the service asks for there (token is the deployment's, Config.Token).
func ScrapeFamilies(ctx context.Context, port int, token string) (map[string]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/metrics", port), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of :%d: status %d", port, res.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		return nil, fmt.Errorf("parse metrics of :%d: %w", port, err)
	}
	return families, nil
}

// ScrapeReplica reads what the harness follows of a replica: orders answered, defense
// catches by layer, order outcomes.
func ScrapeReplica(ctx context.Context, port int, token string) (ReplicaMetrics, error) {
	families, err := ScrapeFamilies(ctx, port, token)
	if err != nil {
		return ReplicaMetrics{}, err
	}
	m := ReplicaMetrics{
		Catches:  ByLabel(families["stocksvc_defense_catches_total"], "layer"),
		Outcomes: ByLabel(families["stocksvc_orders_total"], "outcome"),
	}
	if f := families["stocksvc_http_requests_total"]; f != nil {
		for _, metric := range f.GetMetric() {
			if Label(metric, "route") == "/v1/orders" && Label(metric, "method") == http.MethodPost {
				m.Orders += metric.GetCounter().GetValue()
			}
		}
	}
	return m, nil
}

// ByLabel sums a counter family by the value of one label.
func ByLabel(f *dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	if f == nil {
		return out
	}
	for _, metric := range f.GetMetric() {
		out[Label(metric, name)] += metric.GetCounter().GetValue()
	}
	return out
}

// Label is the value of a metric's label, or "".
func Label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
