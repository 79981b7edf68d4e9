package lock

import (
	"math/rand/v2"
	"time"
)

// RetryStrategy decides how long Obtain waits before trying again after a failed attempt.
//
// Backoff receives the number of attempts that failed so far (1 after the first) and returns the
// pause before the next one, or a negative duration to give up. Strategies are stateless and
// safe for concurrent use, so one value can serve every call. Whatever a strategy answers, Obtain
// never waits past its context's deadline: when the next pause would end after it, Obtain gives
// up at once with ErrNotObtained instead of sleeping in vain.
type RetryStrategy interface {
	Backoff(failedAttempts int) time.Duration
}

type retryFunc func(int) time.Duration

func (f retryFunc) Backoff(failedAttempts int) time.Duration { return f(failedAttempts) }

// NoRetry makes a single attempt.
func NoRetry() RetryStrategy {
	return retryFunc(func(int) time.Duration { return -1 })
}

// Fixed waits the same pause between attempts, without jitter. It exists to reproduce the
// common "sleep 100 ms and try again" policy; prefer a jittered strategy, because contenders
// that sleep in lockstep also wake in lockstep.
func Fixed(pause time.Duration) RetryStrategy {
	return retryFunc(func(int) time.Duration { return pause })
}

// Linear waits a random pause between zero and step×attempts (full jitter), never above max.
func Linear(step, max time.Duration) RetryStrategy {
	return retryFunc(func(failed int) time.Duration {
		return fullJitter(min(step*time.Duration(failed), max))
	})
}

// Exponential waits a random pause between zero and base×2^(attempts−1) (full jitter), never
// above max. Full jitter spreads contenders out, which keeps a hot key from being hammered by a
// herd that all wake at the same instant.
func Exponential(base, max time.Duration) RetryStrategy {
	return retryFunc(func(failed int) time.Duration {
		ceiling := max
		// base<<shift < max, tested without computing base<<shift: the shift can overflow and
		// wrap to a positive value below max.
		if shift := failed - 1; shift < 63 && base > 0 && base <= (max-1)>>shift {
			ceiling = base << shift
		}
		return fullJitter(ceiling)
	})
}

// Limit stops s after retries retries (retries+1 attempts in all).
func Limit(s RetryStrategy, retries int) RetryStrategy {
	return retryFunc(func(failed int) time.Duration {
		if failed > retries {
			return -1
		}
		return s.Backoff(failed)
	})
}

// fullJitter returns a uniformly random duration in [0, ceiling].
func fullJitter(ceiling time.Duration) time.Duration {
	if ceiling <= 0 {
		return 0
	}
	return time.Duration(rand.Int64N(int64(ceiling) + 1))
}
