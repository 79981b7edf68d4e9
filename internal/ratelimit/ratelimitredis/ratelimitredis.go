// Package ratelimitredis holds a limit across replicas: a GCRA rate limit per key in Redis
// (github.com/go-redis/redis_rate), for what must not scale with the number of replicas — the
// wrong admin tokens one address may try. Each decision costs a round trip to Redis; the
// limits each replica can hold alone are ratelimit.Keyed's, in memory.
package ratelimitredis

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/ratelimit"
)

// Limiter limits the events of each key to a Limit in Redis, under a key prefix. It is safe
// for concurrent use.
type Limiter struct {
	rate   *redis_rate.Limiter
	limit  redis_rate.Limit
	prefix string
}

// New returns a Limiter holding each key to limit in rdb. Its Redis keys are
// "rate:" + prefix + key (redis_rate's own prefix first), each expiring once its key is back
// to a full burst. It panics on a limit that is off: a mistake of the caller.
func New(rdb redis.UniversalClient, prefix string, limit ratelimit.Limit) *Limiter {
	if limit.Off() || limit.Burst < 1 {
		panic(fmt.Sprintf("ratelimitredis: limit %v cannot limit anything", limit))
	}
	return &Limiter{
		rate:   redis_rate.NewLimiter(rdb),
		limit:  redis_rate.Limit{Rate: limit.Events, Period: limit.Per, Burst: limit.Burst},
		prefix: prefix,
	}
}

// ErrUnavailable is Redis not answering: nothing was decided.
var ErrUnavailable = errors.New("ratelimitredis: unavailable")

// Take counts one event of key and returns 0; or, when key has no event left now, counts
// nothing and returns how long until it has one. Errors: ErrUnavailable.
func (l *Limiter) Take(ctx context.Context, key string) (time.Duration, error) {
	res, err := l.rate.Allow(ctx, l.prefix+key, l.limit)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	return max(res.RetryAfter, time.Nanosecond), nil
}

// Blocked returns how long until key has an event left: 0 when it has one now. It counts
// nothing. Errors: ErrUnavailable.
func (l *Limiter) Blocked(ctx context.Context, key string) (time.Duration, error) {
	// AllowAtMost of no events is redis_rate's way to look without counting: it answers a
	// retry-after only when not even one event could happen now.
	res, err := l.rate.AllowAtMost(ctx, l.prefix+key, l.limit, 0)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if res.RetryAfter <= 0 {
		return 0, nil
	}
	return res.RetryAfter, nil
}
