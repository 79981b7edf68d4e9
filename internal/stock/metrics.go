package stock

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what the purchase path does, for Prometheus. A nil *Metrics counts nothing.
type Metrics struct {
	catches   *prometheus.CounterVec
	outcomes  *prometheus.CounterVec
	conflicts prometheus.Counter
	units     prometheus.Counter
}

// NewMetrics creates the purchase metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		catches: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_defense_catches_total",
			Help: "Writes refused by a defense layer after the layers before it let them through.",
		}, []string{"layer"}),
		outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_orders_total",
			Help: "Order attempts by outcome.",
		}, []string{"outcome"}),
		conflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_version_retries_total",
			Help: "Purchases retried after a version conflict.",
		}),
		units: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_units_sold_total",
			Help: "Units sold in confirmed orders.",
		}),
	}
	// Create every series up front so dashboards show zeros rather than gaps.
	for _, l := range []Layer{LayerVersion, LayerGuard, LayerFence, LayerCheck} {
		m.catches.WithLabelValues(string(l))
	}
	for _, o := range allOutcomes {
		m.outcomes.WithLabelValues(o)
	}
	reg.MustRegister(m.catches, m.outcomes, m.conflicts, m.units)
	return m
}

const (
	outcomeConfirmed   = "confirmed"
	outcomeReplayed    = "replayed"
	outcomeSoldOut     = "sold_out"
	outcomeBusy        = "busy"
	outcomeRejected    = "rejected"
	outcomeCancelled   = "cancelled"
	outcomeUnavailable = "unavailable"
	outcomeError       = "error"
)

var allOutcomes = []string{outcomeConfirmed, outcomeReplayed, outcomeSoldOut, outcomeBusy, outcomeRejected, outcomeCancelled, outcomeUnavailable, outcomeError}

func (m *Metrics) caught(l Layer) {
	if m != nil {
		m.catches.WithLabelValues(string(l)).Inc()
	}
}

func (m *Metrics) outcome(o string) {
	if m != nil {
		m.outcomes.WithLabelValues(o).Inc()
	}
}

func (m *Metrics) conflict() {
	if m != nil {
		m.conflicts.Inc()
	}
}

func (m *Metrics) sold(units int64) {
	if m != nil {
		m.units.Add(float64(units))
	}
}
