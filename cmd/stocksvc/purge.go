package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// purgeInterval is how often a replica purges the idempotency records past their retention,
// after a first purge as it starts. Every replica purges; two at once skip each other's rows.
const purgeInterval = time.Hour

// keyPurger forgets idempotency records past their retention (STOCKSVC_IDEMPOTENCY_TTL): once
// as the replica starts, so that a replica restarted more often than purgeInterval still
// purges, and then every purgeInterval. It exports when it last succeeded, so that a purge
// that keeps failing is seen (deploy/alerts.yml) rather than found when the table is huge.
type keyPurger struct {
	purge     purgeFunc
	retention time.Duration
	interval  time.Duration
	now       func() time.Time
	log       *slog.Logger

	lastSuccess prometheus.Gauge
	deleted     prometheus.Counter
}

// newKeyPurger returns a purger that calls purge (purgeBoth) with retention, its metrics
// registered on reg.
func newKeyPurger(purge purgeFunc, retention time.Duration, reg prometheus.Registerer, log *slog.Logger) *keyPurger {
	p := &keyPurger{
		purge: purge, retention: retention, interval: purgeInterval, now: time.Now, log: log,
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "stocksvc_idempotency_purge_last_success_timestamp_seconds",
			Help: "When this replica last purged the idempotency records past their retention to the end (Unix time; 0 before its first success).",
		}),
		deleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "stocksvc_idempotency_keys_purged_total",
			Help: "Idempotency records this replica deleted past their retention.",
		}),
	}
	reg.MustRegister(p.lastSuccess, p.deleted)
	return p
}

// purgeFunc purges the idempotency records past retention and says how many it deleted.
type purgeFunc = func(ctx context.Context, retention time.Duration) (int64, error)

// purgeBoth purges the purchase path's records (stock.Service.PurgeIdempotencyKeys), then those
// of orders accepted for later (async.Queue.PurgeRecords), which only their store knows to keep
// while the order is pending; in that order, so that the second walks past fewer live rows.
func purgeBoth(purchases, accepted purgeFunc) purgeFunc {
	return func(ctx context.Context, retention time.Duration) (int64, error) {
		n, err := purchases(ctx, retention)
		if err != nil {
			return n, err
		}
		m, err := accepted(ctx, retention)
		return n + m, err
	}
}

// run purges at once and then every interval, until ctx ends.
func (p *keyPurger) run(ctx context.Context) {
	ticker := time.NewTicker(p.interval)
	defer ticker.Stop()
	for {
		p.once(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// once purges, counts what it deleted (a failed purge may have deleted some batches first)
// and, on success, records when.
func (p *keyPurger) once(ctx context.Context) {
	start := p.now()
	n, err := p.purge(ctx, p.retention)
	p.deleted.Add(float64(n))
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopping: the next replica's purge, or this one's next start, carries on.
	case err != nil:
		p.log.WarnContext(ctx, "purging idempotency keys failed", slog.Int64("deleted", n), slog.Any("error", err))
	default:
		end := p.now()
		p.lastSuccess.Set(float64(end.UnixMilli()) / 1e3)
		p.log.InfoContext(ctx, "purged idempotency keys", slog.Int64("deleted", n), slog.String("took", end.Sub(start).String()))
	}
}
