// Package ratelimit limits how often a key (a customer, a client address) may do something,
// in this process's memory: a token bucket of golang.org/x/time/rate per key, for the most
// recently used keys only, so that its memory is bounded whatever the keys an attacker makes
// up. It is what each replica uses to protect itself, at the cost of a map lookup;
// ratelimitredis holds the limits that must hold across replicas, in Redis.
package ratelimit

import (
	"fmt"
	"math"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/time/rate"
)

// Limit is how many events a key may have: Events every Per on average, and up to Burst at
// once. A Limit with no Events limits nothing.
type Limit struct {
	Events int
	Per    time.Duration
	Burst  int
}

// Off reports whether l limits nothing.
func (l Limit) Off() bool { return l.Events <= 0 || l.Per <= 0 }

// String says l as "5/1s, burst 20".
func (l Limit) String() string {
	if l.Off() {
		return "off"
	}
	return fmt.Sprintf("%d/%v, burst %d", l.Events, l.Per, l.Burst)
}

// Interval is the time one event takes to earn back.
func (l Limit) Interval() time.Duration { return l.Per / time.Duration(l.Events) }

// Keyed limits the events of each key to a Limit, in memory. Only the maxKeys most recently
// used keys are kept: a key forgotten starts again with a full burst, which is harmless for a
// key idle for longer than its burst takes to earn back. It is safe for concurrent use.
type Keyed struct {
	limit Limit
	now   func() time.Time
	keys  *lru.Cache[string, *rate.Limiter]
}

// NewKeyed returns a Keyed limiting each key to limit, keeping at most maxKeys keys, on the
// clock now (nil: time.Now). It panics on a limit that is off or a maxKeys below 1: a
// mistake of the caller.
func NewKeyed(limit Limit, maxKeys int, now func() time.Time) *Keyed {
	if limit.Off() || limit.Burst < 1 {
		panic(fmt.Sprintf("ratelimit: limit %v cannot limit anything", limit))
	}
	keys, err := lru.New[string, *rate.Limiter](maxKeys)
	if err != nil {
		panic(fmt.Sprintf("ratelimit: %v", err))
	}
	if now == nil {
		now = time.Now
	}
	return &Keyed{limit: limit, now: now, keys: keys}
}

// Limit returns the limit each key is held to.
func (k *Keyed) Limit() Limit { return k.limit }

// Take counts one event of key and returns 0; or, when key has no event left now, counts
// nothing and returns how long until it has one.
func (k *Keyed) Take(key string) time.Duration {
	lim, ok := k.keys.Get(key)
	if !ok {
		fresh := rate.NewLimiter(rate.Every(k.limit.Interval()), k.limit.Burst)
		if prev, found, _ := k.keys.PeekOrAdd(key, fresh); found {
			lim = prev
		} else {
			lim = fresh
		}
	}
	now := k.now()
	if lim.AllowN(now, 1) {
		return 0
	}
	return k.wait(lim.TokensAt(now))
}

// Blocked returns how long until key has an event left: 0 when it has one now. It counts
// nothing, and remembers no key it did not know.
func (k *Keyed) Blocked(key string) time.Duration {
	lim, ok := k.keys.Peek(key)
	if !ok {
		return 0
	}
	return k.wait(lim.TokensAt(k.now()))
}

// Len returns how many keys are remembered.
func (k *Keyed) Len() int { return k.keys.Len() }

// wait is how long a bucket holding tokens takes to hold one.
func (k *Keyed) wait(tokens float64) time.Duration {
	if tokens >= 1 {
		return 0
	}
	return time.Duration(math.Ceil((1 - tokens) * float64(k.limit.Interval())))
}
