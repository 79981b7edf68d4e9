package traffic

import (
	"testing"
	"time"
)

// TestRandIsTheSeeds: two Rands of one seed make the same choices (what -seed relies on), and
// Between stays within its bounds.
func TestRandIsTheSeeds(t *testing.T) {
	t.Parallel()
	a, b := NewRand(3, 0), NewRand(3, 0)
	for i := range 100 {
		if x, y := a.IntN(1000), b.IntN(1000); x != y {
			t.Fatalf("draw %d: %d and %d from the same seed", i, x, y)
		}
		d := a.Between(10*time.Millisecond, 20*time.Millisecond)
		if d < 10*time.Millisecond || d >= 20*time.Millisecond || b.Between(10*time.Millisecond, 20*time.Millisecond) != d {
			t.Fatalf("Between = %v: want the same in [10ms, 20ms) from both", d)
		}
	}
	if got := a.Between(time.Second, time.Second); got != time.Second {
		t.Errorf("Between(1s, 1s) = %v, want 1s", got)
	}
}
