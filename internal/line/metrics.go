package line

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the lines do, for Prometheus. A nil *Metrics counts nothing.
//
// Per-product series are kept only for the lines a replica serves while their sale has not
// ended, and deleted when it forgets them: their number is bounded by the sales running.
type Metrics struct {
	tickets    *prometheus.GaugeVec
	admittable *prometheus.GaugeVec
	drawn      *prometheus.GaugeVec
	joins      *prometheus.CounterVec
	admissions *prometheus.CounterVec
	refusals   *prometheus.CounterVec
	longPolls  prometheus.Gauge
	advances   *prometheus.HistogramVec
	listens    prometheus.Counter
}

// NewMetrics creates the line metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		tickets: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stocksvc_line_tickets",
			Help: "Tickets of a product's line by status (waiting: queued for the draw or waiting; admitted: admissions running; used, expired, left), as this replica's view of the line has them.",
		}, []string{"product", "status"}),
		admittable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stocksvc_line_admittable",
			Help: "Tickets of a product's line that the admission rule would admit now and that are still waiting, as this replica sees the line and the product: above 0 for long, the line is stuck.",
		}, []string{"product"}),
		drawn: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "stocksvc_line_drawn_tickets",
			Help: "Tickets placed by the draw of a product's line at its opening (0 before the draw).",
		}, []string{"product"}),
		joins: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_line_joins_total",
			Help: "Tickets made by joins on this replica, by product.",
		}, []string{"product"}),
		admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_line_admissions_total",
			Help: "Admissions made by this replica's advances, by product.",
		}, []string{"product"}),
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_line_refusals_total",
			Help: "Orders for a lined product refused by the line, by reason: missing (no pass), invalid (not a pass of this service, of the product, or of the customer), left, expired, used.",
		}, []string{"reason"}),
		longPolls: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stocksvc_line_long_polls",
			Help: "Long-polls of ticket statuses, and orders waiting in line for their admission (Prefer: wait), open on this replica.",
		}),
		advances: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stocksvc_line_advance_duration_seconds",
			Help:    "Time of one advance of a line (one transaction under the line's lock), by result: changed, unchanged, busy (another advance held the line) or failed.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}, []string{"result"}),
		listens: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_line_listen_failures_total",
			Help: "Times this replica's connection listening for line changes failed and was opened again (changes are polled meanwhile).",
		}),
	}
	reg.MustRegister(m.tickets, m.admittable, m.drawn, m.joins, m.admissions, m.refusals, m.longPolls, m.advances, m.listens)
	return m
}

// Refusal reasons, as stocksvc_line_refusals_total names them.
const (
	refusedMissing = "missing"
	refusedInvalid = "invalid"
	refusedLeft    = "left"
	refusedExpired = "expired"
	refusedUsed    = "used"
)

func product(id int64) string { return strconv.FormatInt(id, 10) }

func (m *Metrics) joined(id int64) {
	if m != nil {
		m.joins.WithLabelValues(product(id)).Inc()
	}
}

func (m *Metrics) admitted(id, n int64) {
	if m != nil && n > 0 {
		m.admissions.WithLabelValues(product(id)).Add(float64(n))
	}
}

func (m *Metrics) refused(reason string) {
	if m != nil {
		m.refusals.WithLabelValues(reason).Inc()
	}
}

func (m *Metrics) polling(d float64) {
	if m != nil {
		m.longPolls.Add(d)
	}
}

func (m *Metrics) advanced(took time.Duration, a Advanced, err error) {
	if m == nil {
		return
	}
	result := "unchanged"
	switch {
	case errors.Is(err, ErrBusy):
		result = "busy"
	case err != nil:
		result = "failed"
	case a.Changed:
		result = "changed"
	}
	m.advances.WithLabelValues(result).Observe(took.Seconds())
}

func (m *Metrics) listenFailed() {
	if m != nil {
		m.listens.Inc()
	}
}

// line sets a line's gauges.
func (m *Metrics) line(id int64, waiting int64, counts map[TicketStatus]int64, admittable, drawn int64) {
	if m == nil {
		return
	}
	p := product(id)
	m.tickets.WithLabelValues(p, string(TicketWaiting)).Set(float64(waiting))
	for _, s := range []TicketStatus{TicketAdmitted, TicketUsed, TicketExpired, TicketLeft} {
		m.tickets.WithLabelValues(p, string(s)).Set(float64(counts[s]))
	}
	m.admittable.WithLabelValues(p).Set(float64(admittable))
	m.drawn.WithLabelValues(p).Set(float64(drawn))
}

// forget deletes a line's series.
func (m *Metrics) forget(id int64) {
	if m == nil {
		return
	}
	p := prometheus.Labels{"product": product(id)}
	m.tickets.DeletePartialMatch(p)
	m.admittable.Delete(p)
	m.drawn.Delete(p)
	m.joins.Delete(p)
	m.admissions.Delete(p)
}
