// Package lockprom reports what a lock.Client does as Prometheus metrics. It registers with the
// registerer it is given; nothing goes to a global registry.
package lockprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/lock"
)

// Observer is a lock.Observer that counts into Prometheus metrics named <namespace>_lock_*.
// Lock names are not used as labels: there may be one per product.
type Observer struct {
	acquisitions   *prometheus.CounterVec
	wait           prometheus.Histogram
	contended      prometheus.Counter
	notObtained    prometheus.Counter
	losses         prometheus.Counter
	refreshFailure prometheus.Counter
}

var _ lock.Observer = (*Observer)(nil)

// New creates the metrics and registers them with reg.
func New(reg prometheus.Registerer, namespace string) *Observer {
	o := &Observer{
		acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: namespace, Name: "lock_acquisitions_total",
			Help: "Locks obtained, by how: at the first try, or after finding the lock held (contended).",
		}, []string{"how"}),
		wait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: namespace, Name: "lock_wait_seconds",
			Help:    "Time from asking for a lock to holding it (or giving up).",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		contended: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "lock_contended_total",
			Help: "Lock requests that found the lock held by someone else at least once.",
		}),
		notObtained: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "lock_not_obtained_total",
			Help: "Lock requests that gave up without the lock (wait budget spent).",
		}),
		losses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "lock_losses_total",
			Help: "Holders that found their lock gone: taken, expired or deleted.",
		}),
		refreshFailure: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: namespace, Name: "lock_refresh_failures_total",
			Help: "Lease refreshes that could not reach Redis.",
		}),
	}
	for _, how := range []string{"first_try", "contended"} {
		o.acquisitions.WithLabelValues(how)
	}
	reg.MustRegister(o.acquisitions, o.wait, o.contended, o.notObtained, o.losses, o.refreshFailure)
	return o
}

// Obtained implements lock.Observer.
func (o *Observer) Obtained(_ string, waited time.Duration, contended bool) {
	how := "first_try"
	if contended {
		how = "contended"
		o.contended.Inc()
	}
	o.acquisitions.WithLabelValues(how).Inc()
	o.wait.Observe(waited.Seconds())
}

// NotObtained implements lock.Observer.
func (o *Observer) NotObtained(_ string, waited time.Duration) {
	o.notObtained.Inc()
	o.contended.Inc()
	o.wait.Observe(waited.Seconds())
}

// Lost implements lock.Observer.
func (o *Observer) Lost(string) { o.losses.Inc() }

// RefreshFailed implements lock.Observer.
func (o *Observer) RefreshFailed(string, error) { o.refreshFailure.Inc() }
