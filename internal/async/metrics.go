package async

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
)

// oldestLines is how many lines stocksvc_async_oldest_pending_seconds exports at most: the
// ones whose front has waited longest. The oldest line is always among them, which is what the
// alert on it needs, and the label's values stay bounded however many products are on sale.
const oldestLines = 10

// scrapeEvery is how often, at most, the gauges read from Postgres are computed, whatever the
// scrape rate: each computation is three indexed queries on the pool the purchases use, and a
// scrape flood must not become a query flood (issue #31: 1,454 scrapes a second took an
// order's latency from 3 ms to 10–33 ms). Prometheus scrapes every 10 s.
const scrapeEvery = time.Second

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

// newMetrics makes the queue's metrics. pending, holds and oldest query Postgres; their gauges
// are computed at most every scrapeEvery by now's clock.
func newMetrics(reg prometheus.Registerer, now func() time.Time, pending, holds func() (float64, error), oldest func() ([]stockpg.LineAge, error)) *metrics {
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
			newPostgresGauges(scrapeEvery, now, pending, holds, oldest))
	}
	return m
}

// postgresGauges exports the gauges read from Postgres — the pending orders and the open holds
// across every replica, and the age of the oldest pending order of the lines that have waited
// longest — computing them together at most once every `every`: a scrape within that time of
// the last computation is answered the same figures, and scrapes that arrive together wait for
// the one computing and share its result. A query that fails is -1 for a count, and no series
// for the ages.
type postgresGauges struct {
	pendingDesc, holdsDesc, oldestDesc *prometheus.Desc
	pending, holds                     func() (float64, error)
	oldest                             func() ([]stockpg.LineAge, error)
	every                              time.Duration
	now                                func() time.Time

	mu      sync.Mutex
	at      time.Time // when metrics were computed; zero before the first time
	metrics []prometheus.Metric
}

func newPostgresGauges(every time.Duration, now func() time.Time, pending, holds func() (float64, error), oldest func() ([]stockpg.LineAge, error)) *postgresGauges {
	return &postgresGauges{
		pendingDesc: prometheus.NewDesc("stocksvc_async_orders_pending",
			"Accepted orders not yet decided, across every replica (one indexed count at most once a second; -1 when Postgres did not answer within a second).", nil, nil),
		holdsDesc: prometheus.NewDesc("stocksvc_holds_open",
			"Orders held now (units taken, awaiting their customer's confirmation or their expiry), across every replica (one indexed count at most once a second; -1 when Postgres did not answer within a second).", nil, nil),
		oldestDesc: prometheus.NewDesc("stocksvc_async_oldest_pending_seconds",
			"How long the oldest pending order of a line has waited, across every replica, for the 10 lines that have waited longest (product_id is the product, or cart for the carts), read at most once a second; a line with nothing pending has no series. None at all when Postgres did not answer within a second.",
			[]string{"product_id"}, nil),
		pending: pending, holds: holds, oldest: oldest, every: every, now: now,
	}
}

func (g *postgresGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.pendingDesc
	ch <- g.holdsDesc
	ch <- g.oldestDesc
}

func (g *postgresGauges) Collect(ch chan<- prometheus.Metric) {
	g.mu.Lock()
	if g.at.IsZero() || g.now().Sub(g.at) >= g.every {
		g.metrics, g.at = g.read(), g.now()
	}
	metrics := g.metrics
	g.mu.Unlock()
	for _, m := range metrics {
		ch <- m
	}
}

// read queries Postgres for every gauge, once.
func (g *postgresGauges) read() []prometheus.Metric {
	var out []prometheus.Metric
	for _, count := range []struct {
		desc  *prometheus.Desc
		query func() (float64, error)
	}{{g.pendingDesc, g.pending}, {g.holdsDesc, g.holds}} {
		n, err := count.query()
		if err != nil {
			n = -1
		}
		out = append(out, prometheus.MustNewConstMetric(count.desc, prometheus.GaugeValue, n))
	}
	// No ages rather than a failed scrape: stocksvc_async_orders_pending says -1.
	if lines, err := g.oldest(); err == nil {
		for _, l := range lines {
			if m, err := prometheus.NewConstMetric(g.oldestDesc, prometheus.GaugeValue, l.Seconds, l.Line); err == nil {
				out = append(out, m)
			}
		}
	}
	return out
}

func (m *metrics) decided(d stockpg.Decided) {
	m.decisions.WithLabelValues(d.Status).Inc()
	m.waited.Observe(d.Waited.Seconds())
}

func (m *metrics) retried(reason string) { m.retries.WithLabelValues(reason).Inc() }
