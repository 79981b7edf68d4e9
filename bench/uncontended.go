package bench

import (
	"context"
	"fmt"
	mrand "math/rand/v2"
	"time"
)

// UncontendedResult is what one implementation did without contention.
type UncontendedResult struct {
	// Latencies are the times of each obtain-and-release pair.
	Latencies []time.Duration
	// Calls are the Redis commands run, by command (those run by scripts included), and
	// RoundTrips the requests sent, over a separate block of pairs (counted of them).
	Calls      map[string]CommandStat
	RoundTrips int64
	counted    int
	// sent are the commands the client sent itself (not those its scripts ran).
	sent map[string]bool
}

// ServerTimePerOp is the time Redis spent running the commands of one pair: the commands the
// client sent, a script's time including that of the commands it ran.
func (r UncontendedResult) ServerTimePerOp() time.Duration {
	return serverTime(r.Calls, r.sent) / time.Duration(max(r.counted, 1))
}

// Mean is the mean time of a pair.
func (r UncontendedResult) Mean() time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	var t time.Duration
	for _, d := range r.Latencies {
		t += d
	}
	return t / time.Duration(len(r.Latencies))
}

// Quantile returns the q-quantile of the pairs' times, nearest rank.
func (r UncontendedResult) Quantile(q float64) time.Duration { return quantile(r.Latencies, q) }

// CallsPerOp is the Redis commands run per pair.
func (r UncontendedResult) CallsPerOp() float64 {
	return float64(sum(r.Calls)) / float64(max(r.counted, 1))
}

// RoundTripsPerOp is the requests sent per pair.
func (r UncontendedResult) RoundTripsPerOp() float64 {
	return float64(r.RoundTrips) / float64(max(r.counted, 1))
}

// Uncontended obtains and releases a lock nobody else wants, ops times for each contender.
// The contenders take turns pair by pair, in a random order each time, so that a noisy, shared
// machine slows them alike. The commands and round trips are counted
// afterwards, in a block of countOps pairs per contender with the statistics reset before it.
// Results are in the order of cs. It resets srv, so nothing else may use srv meanwhile.
func Uncontended(ctx context.Context, srv *Server, cs []Contender, ops, countOps int) ([]UncontendedResult, error) {
	if err := srv.Reset(ctx); err != nil {
		return nil, err
	}
	fleets := make([]*fleet, len(cs))
	defer func() {
		for _, f := range fleets {
			if f != nil {
				_ = f.close()
			}
		}
	}()
	res := make([]UncontendedResult, len(cs))
	for i, c := range cs {
		fleets[i] = openFleet(c, srv.Addr(), 1)
		if err := warmUp(ctx, fleets[i].locker(0), uncontendedKey(c)); err != nil {
			return nil, fmt.Errorf("%s: %w", c.Name, err)
		}
		res[i].Latencies = make([]time.Duration, 0, ops)
	}
	for range ops {
		// A fresh random order every time: in a fixed rotation each contender would always
		// follow the same one, and what one leaves behind (goroutines finishing, threads
		// spinning) speeds up or slows down the next.
		for _, i := range mrand.Perm(len(cs)) {
			d, err := pair(ctx, fleets[i].locker(0), uncontendedKey(cs[i]))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cs[i].Name, err)
			}
			res[i].Latencies = append(res[i].Latencies, d)
		}
	}
	for i, c := range cs {
		if err := srv.ResetStats(ctx); err != nil {
			return nil, err
		}
		before := fleets[i].count.n.Load()
		for range countOps {
			if _, err := pair(ctx, fleets[i].locker(0), uncontendedKey(c)); err != nil {
				return nil, fmt.Errorf("%s: %w", c.Name, err)
			}
		}
		res[i].RoundTrips = fleets[i].count.n.Load() - before
		calls, err := srv.CommandStats(ctx)
		if err != nil {
			return nil, err
		}
		res[i].Calls = calls
		res[i].counted = countOps
		res[i].sent = fleets[i].count.sentNames()
	}
	return res, nil
}

func uncontendedKey(c Contender) string { return namespace + "uncontended:" + c.Name }

// pair obtains and releases key once and returns the time it took.
func pair(ctx context.Context, l locker, key string) (time.Duration, error) {
	start := time.Now()
	release, err := l.acquire(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("obtain: %w", err)
	}
	if err := release(ctx); err != nil {
		return 0, fmt.Errorf("release: %w", err)
	}
	return time.Since(start), nil
}
