package view

import "github.com/prometheus/client_golang/prometheus"

// Metrics counts what the view cache does, for Prometheus. A nil *Metrics counts nothing.
type Metrics struct {
	reads       *prometheus.CounterVec
	queries     *prometheus.CounterVec
	rebuilds    prometheus.Counter
	waits       prometheus.Counter
	giveUps     prometheus.Counter
	refused     prometheus.Counter
	lostUpdates prometheus.Counter
	staleViews  prometheus.Counter
	notFounds   *prometheus.CounterVec
}

// NewMetrics creates the view metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		reads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_view_reads_total",
			Help: "Product reads answered, by where the view came from: process (a lease in this replica), redis, or postgres (a rebuild, or a read Redis could not serve).",
		}, []string{"from"}),
		queries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_view_postgres_queries_total",
			Help: "Postgres queries made for product views: rebuilds of a missing view, fallback reads when Redis could not serve one, and reads of the highest product id (what this replica knows of products that do not exist).",
		}, []string{"purpose"}),
		rebuilds: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_view_rebuilds_total",
			Help: "Views rebuilt from Postgres by the holder of a product's rebuild lock.",
		}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_view_rebuild_waits_total",
			Help: "Times a read found a product's rebuild lock held and waited to look at the view again.",
		}),
		giveUps: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_view_rebuild_giveups_total",
			Help: "Reads that found no view after every rebuild try and read Postgres themselves.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_view_fallback_refused_total",
			Help: "Reads answered unavailable because Redis could not serve them and the replica's fallback reads of Postgres were all in flight.",
		}),
		lostUpdates: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_view_updates_failed_total",
			Help: "View updates Redis did not take (unreachable): the purchase's mark makes every replica rebuild the view from Postgres one lease after the write began.",
		}),
		staleViews: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_view_stale_total",
			Help: "Views in Redis that may have missed an update (a replica died between its commit and the view's update, or Redis was unreachable then): older than a version this replica knows Postgres reached, or marked by a purchase that began over a lease ago and has not moved them; rebuilt instead of served.",
		}),
		notFounds: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_view_not_found_total",
			Help: "Orders refused (404, before any queue) and reads answered not found because the product does not exist, by what said so: memory (this replica's memory of missing products, with no Redis command and no query) or postgres (the view's read).",
		}, []string{"use", "from"}),
	}
	for _, from := range []string{FromProcess, FromRedis, FromPostgres} {
		m.reads.WithLabelValues(from)
	}
	for _, purpose := range []string{"rebuild", "fallback", "highest"} {
		m.queries.WithLabelValues(purpose)
	}
	for _, use := range []string{"order", "read"} {
		for _, from := range []string{"memory", FromPostgres} {
			m.notFounds.WithLabelValues(use, from)
		}
	}
	reg.MustRegister(m.reads, m.queries, m.rebuilds, m.waits, m.giveUps, m.refused, m.lostUpdates, m.staleViews, m.notFounds)
	return m
}

func (m *Metrics) read(from string) {
	if m != nil {
		m.reads.WithLabelValues(from).Inc()
	}
}

func (m *Metrics) postgresQuery(purpose string) {
	if m != nil {
		m.queries.WithLabelValues(purpose).Inc()
	}
}

func (m *Metrics) rebuilt() {
	if m != nil {
		m.rebuilds.Inc()
	}
}

func (m *Metrics) rebuildWait() {
	if m != nil {
		m.waits.Inc()
	}
}

func (m *Metrics) giveUp() {
	if m != nil {
		m.giveUps.Inc()
	}
}

func (m *Metrics) fallbackRefused() {
	if m != nil {
		m.refused.Inc()
	}
}

func (m *Metrics) staleView() {
	if m != nil {
		m.staleViews.Inc()
	}
}

func (m *Metrics) updateLost() {
	if m != nil {
		m.lostUpdates.Inc()
	}
}

// notFound counts an answer that product does not exist, for use ("order" or "read"), from
// "memory" or "postgres".
func (m *Metrics) notFound(use, from string) {
	if m != nil {
		m.notFounds.WithLabelValues(use, from).Inc()
	}
}
