package stock

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics counts what the purchase path does, for Prometheus. A nil *Metrics counts nothing.
type Metrics struct {
	catches   *prometheus.CounterVec
	outcomes  *prometheus.CounterVec
	conflicts prometheus.Counter
	units     *prometheus.CounterVec
	stockLeft *stockGauge

	batchOrders   prometheus.Histogram
	batchDuration prometheus.Histogram
	ordersPerLock prometheus.Histogram
	shedOrders    prometheus.Counter
	queued        prometheus.Gauge

	refusedByView prometheus.Counter
	refusedByRule *prometheus.CounterVec
	keySetLoads   prometheus.Counter

	holdOutcomes   *prometheus.CounterVec
	holdLag        prometheus.Histogram
	holdSchedFails prometheus.Counter
}

// batchSizeBuckets fit batches of one order up to the default cap of 256.
var batchSizeBuckets = []float64{1, 2, 4, 8, 16, 32, 64, 128, 256}

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
			Help: "Batches decided again after the version check refused their write.",
		}),
		units: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_units_total",
			Help: "Units by what they became: confirmed (sold: in orders final at once, and in holds confirmed; the audit's sold), held (taken in orders written held), cancelled and expired (holds' units back in stock). Units held now, the audit's held, are held - cancelled - expired - the confirmed units of holds.",
		}, []string{"status"}),
		stockLeft: newStockGauge(),
		batchOrders: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stocksvc_batch_orders",
			Help:    "Orders decided together in one batch (one read, at most one write).",
			Buckets: batchSizeBuckets,
		}),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stocksvc_batch_duration_seconds",
			Help:    "Time to decide one batch: lock wait, read, write, release.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5},
		}),
		ordersPerLock: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stocksvc_orders_per_lock",
			Help:    "Orders decided under one acquisition of a product's lock.",
			Buckets: batchSizeBuckets,
		}),
		queued: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stocksvc_orders_queued",
			Help: "Orders waiting in this replica's product queues for their batch to begin.",
		}),
		shedOrders: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_orders_shed_total",
			Help: "Orders refused at once (429 busy) because their product's queue would not reach them within the lock wait.",
		}),
		refusedByView: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_orders_refused_from_view_total",
			Help: "Orders answered sold-out from the product's view, with no Postgres query and no lock.",
		}),
		refusedByRule: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_orders_refused_fast_total",
			Help: "Orders refused by a sale rule before they were queued, with no Postgres query and no lock: from the product's view (the window) or from what this replica knows a customer has bought (the limit).",
		}, []string{"rule"}),
		holdOutcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_holds_total",
			Help: "Holds by what became of them: held (taken, awaiting payment), confirmed, cancelled, expired (units back).",
		}, []string{"outcome"}),
		holdLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stocksvc_hold_expiry_lag_seconds",
			Help:    "From a hold's expires_at to its units back in stock, on Postgres's clock.",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2, 5, 10, 30, 60, 300},
		}),
		holdSchedFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_hold_schedules_failed_total",
			Help: "Batches whose holds' expiry jobs could not be scheduled; the sweep ends those holds instead, later.",
		}),
		keySetLoads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_view_keysets_loaded_total",
			Help: "Postgres queries loading the idempotency keys with a stored outcome for a sold-out product (one per replica and sell-out), so that other keyed orders can be refused from the view.",
		}),
	}
	// Create every series up front so dashboards show zeros rather than gaps.
	for _, l := range []Layer{LayerVersion, LayerGuard, LayerFence, LayerCheck, LayerWindow, LayerLimit, LayerHoldLimit} {
		m.catches.WithLabelValues(string(l))
	}
	for _, o := range []string{outcomeSaleNotOpen, outcomeSaleEnded, outcomeCustomerLimit} {
		m.refusedByRule.WithLabelValues(o)
	}
	for _, o := range allOutcomes {
		m.outcomes.WithLabelValues(o)
	}
	for _, o := range []string{outcomeHeld, OrderStatusConfirmed, OrderStatusCancelled, OrderStatusExpired} {
		m.holdOutcomes.WithLabelValues(o)
		m.units.WithLabelValues(o)
	}
	reg.MustRegister(m.holdOutcomes, m.holdLag, m.holdSchedFails, m.stockLeft)
	reg.MustRegister(m.catches, m.outcomes, m.conflicts, m.units, m.batchOrders, m.batchDuration, m.ordersPerLock, m.shedOrders, m.queued, m.refusedByView, m.refusedByRule, m.keySetLoads)
	return m
}

// The outcomes of stocksvc_orders_total: what the API answered, a refusal named by its cause.
// None is named as an order's status is unless it is that status (confirmed, held): "rejected"
// (an asynchronous order's status) and "cancelled" (a hold's) were outcomes until issue #34.
const (
	outcomeConfirmed = "confirmed" // bought, final at once (201)
	outcomeReplayed  = "replayed"
	outcomeSoldOut   = "sold_out"
	outcomeBusy      = "busy"
	// A request refused for itself, before any stock was looked at.
	outcomeInvalid         = "invalid"           // 422 validation-failed
	outcomeProductNotFound = "product_not_found" // 404 product-not-found
	outcomeKeyReused       = "key_reused"        // 422 idempotency-key-reused
	// The client went away (its context was cancelled) before the answer.
	outcomeClientGone  = "client_gone"
	outcomeUnavailable = "unavailable"
	outcomeError       = "error"
	// The sale rules' refusals.
	outcomeSaleNotOpen   = "sale_not_open"
	outcomeSaleEnded     = "sale_ended"
	outcomeCustomerLimit = "customer_limit"
	outcomeHoldLimit     = "hold_limit"
)

var allOutcomes = []string{outcomeConfirmed, outcomeHeld, outcomeReplayed, outcomeSoldOut, outcomeBusy, outcomeInvalid,
	outcomeProductNotFound, outcomeKeyReused, outcomeClientGone, outcomeUnavailable, outcomeError, outcomeSaleNotOpen, outcomeSaleEnded, outcomeCustomerLimit, outcomeHoldLimit}

// ruleOutcome names the outcome of a refusal by a sale rule; "" for any other error.
func ruleOutcome(err error) string {
	switch {
	case errors.Is(err, ErrSaleNotOpen):
		return outcomeSaleNotOpen
	case errors.Is(err, ErrSaleEnded):
		return outcomeSaleEnded
	case errors.Is(err, ErrCustomerLimit):
		return outcomeCustomerLimit
	case errors.Is(err, ErrHoldLimit):
		return outcomeHoldLimit
	}
	return ""
}

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

// unitsBecame counts the units of items as having become status: confirmed, held, cancelled
// or expired.
func (m *Metrics) unitsBecame(status string, items []Item) {
	if m == nil {
		return
	}
	var n int64
	for _, it := range items {
		n += it.Quantity
	}
	m.units.WithLabelValues(status).Add(float64(n))
}

// unitsReleased counts n units of holds back in stock: cancelled, or with expire, expired.
func (m *Metrics) unitsReleased(n int64, expire bool) {
	if m == nil || n == 0 {
		return
	}
	status := OrderStatusCancelled
	if expire {
		status = OrderStatusExpired
	}
	m.units.WithLabelValues(status).Add(float64(n))
}

// batch records one batch of orders; locked says it was decided under the products' locks.
func (m *Metrics) batch(orders int, took time.Duration, locked bool) {
	if m != nil {
		m.batchOrders.Observe(float64(orders))
		m.batchDuration.Observe(took.Seconds())
		if locked {
			m.ordersPerLock.Observe(float64(orders))
		}
	}
}

func (m *Metrics) shed() {
	if m != nil {
		m.shedOrders.Inc()
	}
}

// queue records orders joining (n > 0) or leaving (n < 0) the product queues.
func (m *Metrics) queue(n int) {
	if m != nil {
		m.queued.Add(float64(n))
	}
}

func (m *Metrics) refusedFromView() {
	if m != nil {
		m.refusedByView.Inc()
	}
}

// outcomeHeld is the outcome of an order written held (201, status held), and the holds'
// outcome for a hold taken.
const outcomeHeld = "held"

func (m *Metrics) holds(outcome string, n int) {
	if m != nil {
		m.holdOutcomes.WithLabelValues(outcome).Add(float64(n))
	}
}

func (m *Metrics) expiryLag(d time.Duration) {
	if m != nil {
		m.holdLag.Observe(max(d, 0).Seconds())
	}
}

func (m *Metrics) holdScheduleFailed() {
	if m != nil {
		m.holdSchedFails.Inc()
	}
}

// refusedFast counts an order refused by a sale rule before it was queued.
func (m *Metrics) refusedFast(err error) {
	if m != nil {
		m.refusedByRule.WithLabelValues(ruleOutcome(err)).Inc()
	}
}

func (m *Metrics) keySetLoaded() {
	if m != nil {
		m.keySetLoads.Inc()
	}
}
