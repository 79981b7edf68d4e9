package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// attempts are the failed-attempt counts the strategy tests ask about: the first few, and
// counts large enough to overflow a naive shift or product.
var attempts = []int{1, 2, 3, 4, 5, 8, 10, 16, 24, 25, 31, 32, 33, 63, 64, 65, 100, 1000}

func TestNoRetry(t *testing.T) {
	t.Parallel()
	for _, n := range attempts {
		if got := lock.NoRetry().Backoff(n); got >= 0 {
			t.Errorf("NoRetry().Backoff(%d) = %v, want negative (give up)", n, got)
		}
	}
}

func TestFixed(t *testing.T) {
	t.Parallel()
	for _, pause := range []time.Duration{0, time.Millisecond, 100 * time.Millisecond, time.Hour} {
		for _, n := range attempts {
			if got := lock.Fixed(pause).Backoff(n); got != pause {
				t.Errorf("Fixed(%v).Backoff(%d) = %v, want %v", pause, n, got, pause)
			}
		}
	}
}

func TestJitteredStrategies(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		strategy lock.RetryStrategy
		ceiling  func(failed int) time.Duration // the documented upper bound of a pause
	}{
		{
			name:     "Linear(10ms, 45ms)",
			strategy: lock.Linear(10*time.Millisecond, 45*time.Millisecond),
			ceiling:  linearCeiling(10*time.Millisecond, 45*time.Millisecond),
		},
		{
			name:     "Linear(1ms, 0)",
			strategy: lock.Linear(time.Millisecond, 0),
			ceiling:  linearCeiling(time.Millisecond, 0),
		},
		{
			name:     "Exponential(1ms, 100ms)",
			strategy: lock.Exponential(time.Millisecond, 100*time.Millisecond),
			ceiling:  exponentialCeiling(time.Millisecond, 100*time.Millisecond),
		},
		{
			name:     "Exponential(1ms, 1ms)",
			strategy: lock.Exponential(time.Millisecond, time.Millisecond),
			ceiling:  exponentialCeiling(time.Millisecond, time.Millisecond),
		},
		{
			// The ceiling keeps doubling past the 32nd attempt while below max.
			name:     "Exponential(1ns, 1h)",
			strategy: lock.Exponential(time.Nanosecond, time.Hour),
			ceiling:  exponentialCeiling(time.Nanosecond, time.Hour),
		},
		{
			// base<<(failed-1) overflows int64 from the 25th attempt on, wrapping to values
			// below max that are not the ceiling.
			name:     "Exponential(47279s, 24h)",
			strategy: lock.Exponential(47279*time.Second, 24*time.Hour),
			ceiling:  exponentialCeiling(47279*time.Second, 24*time.Hour),
		},
	}
	const samples = 200
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			for _, n := range attempts {
				ceiling := tt.ceiling(n)
				var highest time.Duration
				for range samples {
					got := tt.strategy.Backoff(n)
					if got < 0 || got > ceiling {
						t.Fatalf("Backoff(%d) = %v, want within [0, %v]", n, got, ceiling)
					}
					highest = max(highest, got)
				}
				// Uniform over [0, ceiling]: all samples in its lower half has odds of 2^-200.
				if ceiling > 0 && highest <= ceiling/2 {
					t.Errorf("Backoff(%d): highest of %d pauses %v, want some above half the ceiling %v", n, samples, highest, ceiling)
				}
			}
		})
	}
}

// linearCeiling is Linear's documented bound: step×failed, never above max.
func linearCeiling(step, max time.Duration) func(int) time.Duration {
	return func(failed int) time.Duration {
		if failed > int(max/step) {
			return max
		}
		return step * time.Duration(failed)
	}
}

// exponentialCeiling is Exponential's documented bound: base×2^(failed−1), never above max.
func exponentialCeiling(base, max time.Duration) func(int) time.Duration {
	return func(failed int) time.Duration {
		c := base
		for range failed - 1 {
			if c >= max {
				return max
			}
			c *= 2 // c < max, so no overflow
		}
		return min(c, max)
	}
}

func TestLimit(t *testing.T) {
	t.Parallel()
	const pause = 7 * time.Millisecond
	for _, retries := range []int{0, 1, 3} {
		t.Run(fmt.Sprintf("retries=%d", retries), func(t *testing.T) {
			t.Parallel()
			s := lock.Limit(lock.Fixed(pause), retries)
			for n := 1; n <= retries+3; n++ {
				got := s.Backoff(n)
				if n <= retries && got != pause {
					t.Errorf("Backoff(%d) = %v, want %v", n, got, pause)
				}
				if n > retries && got >= 0 {
					t.Errorf("Backoff(%d) = %v, want negative (give up after %d retries)", n, got, retries)
				}
			}
		})
	}
	// Limit keeps the inner strategy's decision to stop.
	if got := lock.Limit(lock.NoRetry(), 5).Backoff(1); got >= 0 {
		t.Errorf("Limit(NoRetry(), 5).Backoff(1) = %v, want negative", got)
	}
}

func TestObtainDoesNotSleepPastDeadline(t *testing.T) {
	t.Parallel()
	// A 1h pause can never end before these deadlines. Obtain must give up at once; had it
	// slept until the deadline, the 1m case would outlast the guard.
	for _, deadline := range []time.Duration{50 * time.Millisecond, time.Minute} {
		t.Run(deadline.String(), func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := lock.New(rdb)
			name := lockName(prefix, "deadline")
			obtain(t, c, name, longLease, nil)

			ctx, cancel := context.WithTimeout(t.Context(), deadline)
			defer cancel()
			done := make(chan error, 1)
			go func() {
				_, err := c.Obtain(ctx, name, longLease, &lock.Options{Retry: lock.Fixed(time.Hour)})
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				cancel()
				<-done
				t.Fatalf("Obtain with Fixed(1h) and a %v deadline still waiting after 5s", deadline)
			}
			if !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("Obtain = %v, want ErrNotObtained", err)
			}
		})
	}
}
