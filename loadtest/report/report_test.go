package report

import (
	"math"
	"testing"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	values := make([]float64, 100)
	for i := range values {
		values[i] = float64(100 - i)
	}
	if got := Percentile(values, 99); got != 99 {
		t.Errorf("p99 of 1..100 = %v, want 99", got)
	}
	if got := Percentile(values, 50); got != 50 {
		t.Errorf("p50 of 1..100 = %v, want 50", got)
	}
	if got := Percentile(nil, 99); !math.IsNaN(got) {
		t.Errorf("p99 of nothing = %v, want NaN", got)
	}
}
