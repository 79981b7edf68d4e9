package benchmarks

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestSideBySideReport(t *testing.T) {
	t.Parallel()
	round := func(code uint16, n int, replicas time.Duration) phase {
		return phase{window: 10 * time.Second, counts: map[uint16]int{code: n},
			cpu: cpuUse{"replicas": replicas, "postgres": time.Second, "machine": 20 * time.Second}}
	}
	var s sideBySide
	// stocksvc 8,000, 9,000 and 10,000/s; the reference 10,000/s; healthz 20,000/s.
	for i := range 3 {
		s.service = append(s.service, round(http.StatusCreated, 80_000+10_000*i, 8*time.Second))
		s.reference = append(s.reference, round(http.StatusCreated, 100_000, 5*time.Second))
		s.healthz = append(s.healthz, round(http.StatusOK, 200_000, 4*time.Second))
	}
	s.streamOrders, s.unitsTaken, s.counted = 300_100, 300_100, 300_000
	got := s.report()
	for _, want := range []string{
		"| 1 | 8000 | 10000 | 20000 | 0.80× | 0.40× | 0.50× |",
		"| **median** | **9000** | **10000** | **20000** | **0.90×** | **0.45×** | **0.50×** |",
		// 24 s of replica CPU over 270,000 orders; 15 s over 300,000; 12 s over 600,000.
		"| replicas | 88.9 µs | 50.0 µs | 20.0 µs |",
		"| cores busy (machine) | 2.00 | 2.00 | 2.00 |",
		"300100 orders in its stream, its stock down by 300100 units; wrk counted 300000",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the report lacks %q:\n%s", want, got)
		}
	}
	if p := medianPhase(s.service); p.count(http.StatusCreated) != 90_000 {
		t.Errorf("medianPhase took the round of %d orders, want 90000", p.count(http.StatusCreated))
	}
}
