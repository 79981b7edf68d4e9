// Package benchmarks holds the benchmarks run against a deployment (package cluster) with wrk
// and vegeta: -throughput (throughput.go), -cache (cache.go, cachereport.go), -flood
// (flood.go) and -replays (replays.go). Their load generators are wrk.go and wrkjob.go; what
// the replicas count is read in metrics.go. docs/benchmarks.md and docs/loadtest.md hold
// their results and their flags.
package benchmarks

import (
	"context"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/env"
)

// harness is the invocation's shared state, which the benchmarks extend with methods of their
// own.
type harness struct{ *env.Harness }

// ThroughputOptions configure -throughput.
type ThroughputOptions struct {
	Duration       time.Duration
	Clients        int
	ClosedOnly     bool
	PGBenchClients int
	// PostgresHA runs the deployment, and pgbench, on a Patroni topology with a synchronous
	// standby (cluster.PostgresHA): what synchronous replication costs.
	PostgresHA bool
	// Reference runs the closed loop as Rounds rounds each of the service, the Redis
	// pre-deduction reference (issue #24, reference.go) and GET /healthz, in turn.
	Reference bool
	Rounds    int
}

// CacheOptions configure -cache.
type CacheOptions struct {
	Duration        time.Duration
	Clients         int
	Rounds          int
	StampedeRounds  int
	StampedeReaders int
}

// Throughput runs -throughput and writes throughput.md.
func Throughput(ctx context.Context, h *env.Harness, o ThroughputOptions) error {
	return (&harness{h}).throughput(ctx, o)
}

// Cache runs -cache and writes cache.md; env.ErrFailed when a check failed.
func Cache(ctx context.Context, h *env.Harness, o CacheOptions) error {
	return (&harness{h}).cache(ctx, o)
}

// Flood runs -flood and writes flood.md; env.ErrFailed when a check failed.
func Flood(ctx context.Context, h *env.Harness, o FloodOptions) error {
	return (&harness{h}).floodBench(ctx, o)
}

// Replays runs -replays and writes replays.md; env.ErrFailed when a check failed.
func Replays(ctx context.Context, h *env.Harness, o ReplayOptions) error {
	return (&harness{h}).replayBench(ctx, o)
}
