// Package bench measures package lock against the two Go Redis lock libraries it is most often
// compared with, github.com/bsm/redislock and github.com/go-redsync/redsync, and against the
// two-command floor (SET NX PX, then a compare-and-delete script).
//
// It lives in a module of its own so that the peers stay out of the service's go.mod. Every
// measurement runs against a redis-server the package starts itself on a loopback port
// (Server), so that CONFIG RESETSTAT and INFO commandstats touch nobody else's server.
//
// Two measurements:
//
//   - Uncontended: one goroutine obtains and releases a lock nobody else wants, again and
//     again; the figure is the latency of the pair.
//   - HotKey: many workers take turns on one lock, each holding it for a simulated critical
//     section, and the figures are throughput, the wait from asking to holding, fairness (the
//     longest run of turns one worker won back to back while others waited) and the Redis
//     commands spent per acquisition.
//
// The Go benchmarks in this package report each figure with b.ReportMetric; cmd/lockbench runs
// everything side by side several times and prints the medians as a Markdown table.
package bench
