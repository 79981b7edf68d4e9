package async

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestPostgresGaugesOncePerSecond scrapes the queue's metrics many times within a second, in
// turn and at once, and counts the queries behind the three gauges read from Postgres
// (pending orders, open holds, the oldest pending per line): one set of queries, whose figures
// every scrape of that second shows; a second later, one more set, with new figures.
func TestPostgresGaugesOncePerSecond(t *testing.T) {
	t.Parallel()
	var pendingQueries, holdQueries, oldestQueries atomic.Int64
	var figure atomic.Int64 // what the queries answer
	figure.Store(7)
	var mu sync.Mutex
	clock := time.Unix(1_000_000, 0)
	now := func() time.Time {
		mu.Lock()
		defer mu.Unlock()
		return clock
	}
	advance := func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		clock = clock.Add(d)
	}
	reg := prometheus.NewRegistry()
	newMetrics(reg, now,
		func() (float64, error) { pendingQueries.Add(1); return float64(figure.Load()), nil },
		func() (float64, error) { holdQueries.Add(1); return float64(figure.Load()), nil },
		func() ([]stockpg.LineAge, error) {
			oldestQueries.Add(1)
			return []stockpg.LineAge{{Line: "42", Seconds: float64(figure.Load())}}, nil
		})

	scrapes := func(n int) {
		t.Helper()
		for range n {
			if _, err := reg.Gather(); err != nil {
				t.Fatalf("gather: %v", err)
			}
		}
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for range n {
			wg.Go(func() {
				if _, err := reg.Gather(); err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatalf("gather: %v", err)
		}
	}
	want := func(queries, value int64) {
		t.Helper()
		for name, n := range map[string]int64{"pending": pendingQueries.Load(), "holds": holdQueries.Load(), "oldest": oldestQueries.Load()} {
			if n != queries {
				t.Errorf("%s queried %d times, want %d", name, n, queries)
			}
		}
		for _, name := range []string{"stocksvc_async_orders_pending", "stocksvc_holds_open"} {
			if got := testenv.Gauge(t, reg, name); got != float64(value) {
				t.Errorf("%s = %v, want %d", name, got, value)
			}
		}
		if got := testenv.Metric(t, reg, "stocksvc_async_oldest_pending_seconds", "product_id", "42"); got != float64(value) {
			t.Errorf("oldest pending = %v, want %d", got, value)
		}
	}

	scrapes(50)
	want(1, 7)
	figure.Store(9)
	advance(999 * time.Millisecond)
	scrapes(50)
	want(1, 7) // the same second: the figures of its one set of queries
	advance(time.Millisecond)
	scrapes(50)
	want(2, 9)
}
