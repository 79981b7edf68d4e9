package async

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
)

// oldestLines is how many lines stocksvc_async_oldest_pending_seconds exports at most: the
// ones whose front has waited longest. The oldest line is always among them, which is what the
// alert on it needs, and the label's values stay bounded however many products are on sale.
const oldestLines = 10

// metrics counts what the queue does. Without a registerer the collectors exist but are not
// exported, so the code never checks for nil.
type metrics struct {
	accepted      prometheus.Counter
	acceptRefused prometheus.Counter
	acceptWaiting prometheus.Gauge
	decisions     *prometheus.CounterVec
	failed        prometheus.Counter
	waited        prometheus.Histogram
	retries       *prometheus.CounterVec
	swept         prometheus.Counter
	orphansEnded  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, pending, holds func() (float64, error), oldest func() ([]stockpg.LineAge, error)) *metrics {
	m := &metrics{
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_async_orders_accepted_total",
			Help: "Orders accepted for later (202) by this replica.",
		}),
		acceptRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_async_accepts_refused_total",
			Help: "Orders sent with Prefer: respond-async refused at once (429 busy) because too many already waited on this replica to be accepted.",
		}),
		acceptWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stocksvc_async_accept_waiting",
			Help: "Orders waiting on this replica for a group to accept them.",
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_async_orders_decided_total",
			Help: "Accepted orders decided by this replica's workers, by status.",
		}, []string{"status"}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_async_orders_failed_total",
			Help: "Accepted orders rejected (reason internal) by this replica's workers because deciding them failed with an unexpected error as many times as allowed.",
		}),
		waited: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "stocksvc_async_order_wait_seconds",
			Help:    "Time from an order's acceptance to its decision, on Postgres's clock.",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_async_retries_total",
			Help: "Rounds that left orders pending, to be tried again: busy (the lock could not be had in time; the job is snoozed), error (a dependency failed; the job is retried) or unexpected (an error nobody expected; counted against the order, which is rejected after too many).",
		}, []string{"reason"}),
		swept: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_async_sweep_jobs_total",
			Help: "Jobs the sweep inserted for orders that waited without one.",
		}),
		orphansEnded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_holds_expired_without_leader_total",
			Help: "Holds a replica's own sweep ended, more than 3 s past their time: neither their job nor the River leader's sweep had (a leader that died is replaced only when its lease lapses).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.accepted, m.acceptRefused, m.acceptWaiting, m.decisions, m.failed, m.waited, m.retries, m.swept, m.orphansEnded,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "stocksvc_async_orders_pending",
				Help: "Accepted orders not yet decided, across every replica (one indexed count per scrape; -1 when Postgres did not answer within a second).",
			}, func() float64 {
				n, err := pending()
				if err != nil {
					return -1
				}
				return n
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "stocksvc_holds_open",
				Help: "Orders held now (units taken, awaiting their customer's confirmation or their expiry), across every replica (one indexed count per scrape; -1 when Postgres did not answer within a second).",
			}, func() float64 {
				n, err := holds()
				if err != nil {
					return -1
				}
				return n
			}),
			&oldestCollector{query: oldest, desc: prometheus.NewDesc("stocksvc_async_oldest_pending_seconds",
				"How long the oldest pending order of a line has waited, across every replica, for the 10 lines that have waited longest (product_id is the product, or cart for the carts); a line with nothing pending has no series. None at all when Postgres did not answer within a second.",
				[]string{"product_id"}, nil)})
	}
	return m
}

// oldestCollector exports the age of each line's oldest pending order, read at each scrape:
// only lines that have pending orders then are exported, so a line that empties leaves no
// series behind.
type oldestCollector struct {
	desc  *prometheus.Desc
	query func() ([]stockpg.LineAge, error)
}

func (c *oldestCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *oldestCollector) Collect(ch chan<- prometheus.Metric) {
	lines, err := c.query()
	if err != nil {
		// Nothing rather than a failed scrape: stocksvc_async_orders_pending says -1.
		return
	}
	for _, l := range lines {
		if m, err := prometheus.NewConstMetric(c.desc, prometheus.GaugeValue, l.Seconds, l.Line); err == nil {
			ch <- m
		}
	}
}

func (m *metrics) decided(d stockpg.Decided) {
	m.decisions.WithLabelValues(d.Status).Inc()
	m.waited.Observe(d.Waited.Seconds())
}

func (m *metrics) retried(reason string) { m.retries.WithLabelValues(reason).Inc() }
