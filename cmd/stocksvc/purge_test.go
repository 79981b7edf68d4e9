package main

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestKeyPurgerRunsAtStartAndExportsSuccess: the purge runs as soon as the purger starts, not an
// interval later; a success sets the last-success gauge to when it ended and counts what it
// deleted; a failure counts what it deleted before failing, is logged, and leaves the gauge.
func TestKeyPurgerRunsAtStartAndExportsSuccess(t *testing.T) {
	t.Parallel()
	type result struct {
		n   int64
		err error
	}
	results := make(chan result)
	retentions := make(chan time.Duration, 2)
	purge := func(ctx context.Context, retention time.Duration) (int64, error) {
		retentions <- retention
		select {
		case r := <-results:
			return r.n, r.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	reg := prometheus.NewRegistry()
	logs := newLogSink()
	p := newKeyPurger(purge, 48*time.Hour, reg, slog.New(slog.NewJSONHandler(logs, nil)))
	p.interval = time.Hour // the first purge must not wait for it
	clock := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p.now = func() time.Time { return clock }

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	select {
	case got := <-retentions:
		if got != 48*time.Hour {
			t.Errorf("purge called with retention %v, want 48h", got)
		}
	case <-time.After(startTimeout):
		t.Fatalf("no purge within %v of the start (the interval is an hour)", startTimeout)
	}
	if got := testenv.Gauge(t, reg, "stocksvc_idempotency_purge_last_success_timestamp_seconds"); got != 0 {
		t.Errorf("last success before any = %v, want 0", got)
	}
	results <- result{n: 7}
	if _, err := logs.wait(t.Context(), nil, "purged idempotency keys"); err != nil {
		t.Fatal(err)
	}
	if got, want := testenv.Gauge(t, reg, "stocksvc_idempotency_purge_last_success_timestamp_seconds"), float64(clock.Unix()); got != want {
		t.Errorf("last success = %v, want %v", got, want)
	}
	if got := testenv.Metric(t, reg, "stocksvc_idempotency_keys_purged_total"); got != 7 {
		t.Errorf("purged total = %v, want 7", got)
	}

	// A failed purge, called directly (the next tick is an hour away).
	clock = clock.Add(time.Hour)
	go func() { results <- result{n: 3, err: errors.New("postgres went away")} }()
	p.once(t.Context())
	<-retentions
	if rec, ok := logs.find("purging idempotency keys failed"); !ok || rec["level"] != "WARN" {
		t.Errorf("failure logged as %v (found %v), want a WARN line", rec, ok)
	}
	if got, want := testenv.Gauge(t, reg, "stocksvc_idempotency_purge_last_success_timestamp_seconds"), float64(clock.Add(-time.Hour).Unix()); got != want {
		t.Errorf("last success after a failure = %v, want the earlier success %v", got, want)
	}
	if got := testenv.Metric(t, reg, "stocksvc_idempotency_keys_purged_total"); got != 10 {
		t.Errorf("purged total = %v, want 10 (7, then 3 before the failure)", got)
	}
}
