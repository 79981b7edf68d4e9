package traffic

import (
	"math/rand/v2"
	"sync"
	"time"
)

// Rand is a run's seeded randomness, shared by its goroutines.
type Rand struct {
	mu sync.Mutex
	r  *rand.Rand
}

// NewRand seeds a run's choices (victim, timings, quantities) with seed alone, so that -seed S
// -runs 1 makes the choices of the run that printed seed S.
func NewRand(seed uint64, stream uint64) *Rand {
	return &Rand{r: rand.New(rand.NewPCG(seed, stream))}
}

// IntN returns an int in [0, n).
func (l *Rand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

// Float returns a float64 in [0, 1).
func (l *Rand) Float() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

// Between returns a duration in [lo, hi).
func (l *Rand) Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return lo + time.Duration(l.r.Int64N(int64(hi-lo)))
}
