package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// testServer is the redis-server of this package's benchmarks, started by TestMain.
var testServer *Server

func TestMain(m *testing.M) {
	srv, err := StartServer(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	testServer = srv
	code := m.Run()
	if err := srv.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "bench: close redis-server:", err)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: leaked goroutines:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// BenchmarkUncontended obtains and releases a lock nobody else wants. Every iteration also
// does one raw pair (SET NX PX + compare-and-delete), in alternating order, so that ns/op
// (the implementation's own pair) has a baseline measured alongside it: raw-ns/op, and their
// ratio x-raw. cmds/op and rtt/op are the Redis commands (scripts' included) and round trips of
// one pair, counted afterwards.
func BenchmarkUncontended(b *testing.B) {
	ctx := context.Background()
	set := UncontendedSet()
	raw := set[0]
	for _, c := range set {
		b.Run(c.Name, func(b *testing.B) {
			if err := testServer.Reset(ctx); err != nil {
				b.Fatal(err)
			}
			impl := openFleet(c, testServer.Addr(), 1)
			defer impl.close()
			floor := openFleet(raw, testServer.Addr(), 1)
			defer floor.close()
			key, floorKey := uncontendedKey(c), uncontendedKey(raw)+":floor"
			for _, f := range []struct {
				l   locker
				key string
			}{{impl.locker(0), key}, {floor.locker(0), floorKey}} {
				if err := warmUp(ctx, f.l, f.key); err != nil {
					b.Fatal(err)
				}
			}
			paired := c.Name != raw.Name
			var own, base time.Duration
			b.ResetTimer()
			for i := range b.N {
				if paired && i%2 == 0 {
					d, err := pair(ctx, floor.locker(0), floorKey)
					if err != nil {
						b.Fatal(err)
					}
					base += d
				}
				d, err := pair(ctx, impl.locker(0), key)
				if err != nil {
					b.Fatal(err)
				}
				own += d
				if paired && i%2 == 1 {
					d, err := pair(ctx, floor.locker(0), floorKey)
					if err != nil {
						b.Fatal(err)
					}
					base += d
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(own.Nanoseconds())/float64(b.N), "ns/op")
			if paired {
				b.ReportMetric(float64(base.Nanoseconds())/float64(b.N), "raw-ns/op")
				b.ReportMetric(float64(own)/float64(base), "x-raw")
			}
			calls, trips := countPairs(b, impl, key, 200)
			b.ReportMetric(calls, "cmds/op")
			b.ReportMetric(trips, "rtt/op")
		})
	}
}

// countPairs returns the Redis commands and round trips of one pair, over n pairs.
func countPairs(b *testing.B, f *fleet, key string, n int) (calls, trips float64) {
	b.Helper()
	ctx := context.Background()
	if err := testServer.ResetStats(ctx); err != nil {
		b.Fatal(err)
	}
	before := f.count.n.Load()
	for range n {
		if _, err := pair(ctx, f.locker(0), key); err != nil {
			b.Fatal(err)
		}
	}
	stats, err := testServer.CommandStats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return float64(sum(stats)) / float64(n), float64(f.count.n.Load()-before) / float64(n)
}

// BenchmarkHotKey has 16 and then 64 workers take b.N turns on one lock, holding it 1ms
// each. It reports throughput (acq/s), the wait from asking to holding (p50-wait-ms,
// p99-wait-ms), the longest run of turns one worker won back to back while others waited
// (max-streak), and Redis commands, round trips and Redis time per acquisition (cmds/acq,
// rtt/acq, redis-us/acq). The
// peers run first; our rows then also report their ratios to the best peer figure of the same
// run (p99-x-peer, cmds-x-peer). Run it with a fixed count, e.g. -benchtime 3000x.
func BenchmarkHotKey(b *testing.B) {
	ctx := context.Background()
	var peers, ours []Contender
	for _, c := range HotKeySet() {
		if c.Peer {
			peers = append(peers, c)
		} else {
			ours = append(ours, c)
		}
	}
	for _, workers := range []int{16, 64} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			// The peers' figures of their last (full-size) run, by name: the framework runs
			// each sub-benchmark first with b.N = 1.
			type figures struct{ p99, calls float64 }
			peerFigures := map[string]figures{}
			for _, c := range append(peers, ours...) {
				b.Run(c.Name, func(b *testing.B) {
					res, err := HotKey(ctx, testServer, c, HotKeyConfig{Workers: workers, Hold: time.Millisecond, Acquisitions: b.N})
					if err != nil {
						b.Fatal(err)
					}
					if res.Overlaps != 0 {
						b.Fatalf("%d turns overlapped another holder", res.Overlaps)
					}
					p99, calls := ms(res.WaitQuantile(0.99)), res.CallsPerAcquisition()
					b.ReportMetric(res.Throughput(), "acq/s")
					b.ReportMetric(ms(res.WaitQuantile(0.5)), "p50-wait-ms")
					b.ReportMetric(p99, "p99-wait-ms")
					b.ReportMetric(float64(res.MaxStreak), "max-streak")
					b.ReportMetric(calls, "cmds/acq")
					b.ReportMetric(res.RoundTripsPerAcquisition(), "rtt/acq")
					b.ReportMetric(us(res.ServerTimePerAcquisition()), "redis-us/acq")
					if c.Peer {
						peerFigures[c.Name] = figures{p99, calls}
						return
					}
					if len(peerFigures) == 0 {
						return // peers filtered out by -bench
					}
					best := figures{math.Inf(1), math.Inf(1)}
					for _, f := range peerFigures {
						best.p99, best.calls = min(best.p99, f.p99), min(best.calls, f.calls)
					}
					b.ReportMetric(p99/best.p99, "p99-x-peer")
					b.ReportMetric(calls/best.calls, "cmds-x-peer")
				})
			}
		})
	}
}
