package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// SuiteConfig describes a full comparison.
type SuiteConfig struct {
	// Runs repeats everything; the report gives the median of the runs.
	Runs int
	// UncontendedOps pairs per implementation and run, interleaved pair by pair, and
	// UncontendedCountOps more per implementation to count commands.
	UncontendedOps, UncontendedCountOps int
	// Workers lists the hot-key worker counts; Hold and Duration apply to each case.
	Workers  []int
	Hold     time.Duration
	Duration time.Duration
	// Uncontended and Hot are the contenders of each measurement. Uncontended[0] is the
	// baseline of the uncontended ratios.
	Uncontended []Contender
	Hot         []Contender
}

// RunResult is one run of the suite.
type RunResult struct {
	Uncontended []UncontendedResult // in the order of SuiteConfig.Uncontended
	Hot         [][]HotKeyResult    // [worker count][contender], in the orders of SuiteConfig
}

// RunSuite runs cfg on srv. progress, if not nil, hears about each case as it ends.
func RunSuite(ctx context.Context, srv *Server, cfg SuiteConfig, progress func(string)) ([]RunResult, error) {
	if progress == nil {
		progress = func(string) {}
	}
	runs := make([]RunResult, cfg.Runs)
	for r := range cfg.Runs {
		un, err := Uncontended(ctx, srv, cfg.Uncontended, cfg.UncontendedOps, cfg.UncontendedCountOps)
		if err != nil {
			return nil, fmt.Errorf("run %d: uncontended: %w", r+1, err)
		}
		runs[r].Uncontended = un
		progress(fmt.Sprintf("run %d: uncontended done", r+1))
		runs[r].Hot = make([][]HotKeyResult, len(cfg.Workers))
		for w, workers := range cfg.Workers {
			runs[r].Hot[w] = make([]HotKeyResult, len(cfg.Hot))
			// Each run starts with a different contender, so none always goes first or last.
			for j := range cfg.Hot {
				i := (r + j) % len(cfg.Hot)
				c := cfg.Hot[i]
				res, err := HotKey(ctx, srv, c, HotKeyConfig{Workers: workers, Hold: cfg.Hold, Duration: cfg.Duration})
				if err != nil {
					return nil, fmt.Errorf("run %d: hot key, %d workers: %w", r+1, workers, err)
				}
				if res.Overlaps != 0 {
					return nil, fmt.Errorf("run %d: hot key, %d workers: %s: %d turns overlapped another holder", r+1, workers, c.Name, res.Overlaps)
				}
				runs[r].Hot[w][i] = res
				progress(fmt.Sprintf("run %d: %d workers: %-24s %7.0f acq/s  p99 %8.1f ms  streak %3d  cmds/acq %6.2f",
					r+1, workers, c.Name, res.Throughput(), ms(res.WaitQuantile(0.99)), res.MaxStreak, res.CallsPerAcquisition()))
			}
		}
	}
	return runs, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// median returns the median of xs (the mean of the middle two for an even count).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// across returns f of every run.
func across[T any](runs []RunResult, f func(RunResult) T) []T {
	out := make([]T, len(runs))
	for i, r := range runs {
		out[i] = f(r)
	}
	return out
}

// hotFigures are the per-run figures of one hot-key row.
type hotFigures struct {
	throughput, p50, p99, calls, trips, serverUs float64
	streak, minWins, maxWins, gaveUp             int
	censored                                     int
	// Ratios to the best peer figure of the same run, column by column; callsXFast is the
	// ratio to the commands of the peer row with the lowest p99 wait.
	throughputX, p99X, callsX, callsXFast float64
}

// hotTable computes the figures of every row of one worker count, run by run.
func hotTable(cfg SuiteConfig, runs []RunResult, w int) [][]hotFigures {
	out := make([][]hotFigures, len(cfg.Hot)) // [contender][run]
	for i := range cfg.Hot {
		out[i] = make([]hotFigures, len(runs))
	}
	for r, run := range runs {
		bestThroughput, bestP99, bestCalls, fastCalls := 0.0, 0.0, 0.0, 0.0
		first := true
		for i, c := range cfg.Hot {
			res := run.Hot[w][i]
			out[i][r] = hotFigures{
				throughput: res.Throughput(), p50: ms(res.WaitQuantile(0.5)), p99: ms(res.WaitQuantile(0.99)),
				calls: res.CallsPerAcquisition(), trips: res.RoundTripsPerAcquisition(), serverUs: us(res.ServerTimePerAcquisition()),
				streak: res.MaxStreak, minWins: res.MinWins, maxWins: res.MaxWins, gaveUp: res.GaveUp, censored: res.Censored,
			}
			if !c.Peer {
				continue
			}
			f := out[i][r]
			if first || f.throughput > bestThroughput {
				bestThroughput = f.throughput
			}
			if first || f.p99 < bestP99 {
				bestP99, fastCalls = f.p99, f.calls
			}
			if first || f.calls < bestCalls {
				bestCalls = f.calls
			}
			first = false
		}
		for i := range cfg.Hot {
			f := &out[i][r]
			f.throughputX, f.p99X, f.callsX, f.callsXFast = f.throughput/bestThroughput, f.p99/bestP99, f.calls/bestCalls, f.calls/fastCalls
		}
	}
	return out
}

func medianOf[T any](xs []T, f func(T) float64) float64 {
	v := make([]float64, len(xs))
	for i, x := range xs {
		v[i] = f(x)
	}
	return median(v)
}

func maxOf[T any](xs []T, f func(T) int) int {
	m := 0
	for _, x := range xs {
		m = max(m, f(x))
	}
	return m
}

// WriteMarkdown writes the medians of runs as Markdown tables, with the targets checked.
// env describes the machine and versions, in a sentence or two.
func WriteMarkdown(out io.Writer, cfg SuiteConfig, runs []RunResult, env, command string) error {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("## Redis lock: package lock against bsm/redislock and go-redsync/redsync\n\n")
	p("**Command** (from `bench/`):\n\n```sh\n%s\n```\n\n", command)
	p("**Machine:** %s\n\n", env)
	p("Each figure is the median of %d runs in one process against one redis-server of the benchmark's own; "+
		"every ratio is taken within a run (against a baseline measured in that run) and its median then reported.\n\n", len(runs))

	// Uncontended.
	p("### Uncontended obtain + release\n\n")
	p("One goroutine obtains and releases a lock nobody else wants, %d times per implementation and run; the "+
		"implementations take turns pair by pair. *Round trips* are requests the client sent; *Redis commands* are "+
		"INFO commandstats calls, counting the commands scripts run; *Redis µs* is the time Redis spent executing them "+
		"(commandstats usec of the commands the client sent, a script's including its commands), the rest of a pair being "+
		"client, network and scheduling. Commands and Redis time are counted over a further %d pairs per implementation.\n\n",
		cfg.UncontendedOps, cfg.UncontendedCountOps)
	p("| implementation | settings | mean µs | p50 µs | p99 µs | mean × %s | p50 × %s | round trips | Redis commands | Redis µs |\n", cfg.Uncontended[0].Name, cfg.Uncontended[0].Name)
	p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	for i, c := range cfg.Uncontended {
		rs := across(runs, func(r RunResult) UncontendedResult { return r.Uncontended[i] })
		mean := medianOf(rs, func(x UncontendedResult) float64 { return us(x.Mean()) })
		p50 := medianOf(rs, func(x UncontendedResult) float64 { return us(x.Quantile(0.5)) })
		p99 := medianOf(rs, func(x UncontendedResult) float64 { return us(x.Quantile(0.99)) })
		meanX := median(across(runs, func(r RunResult) float64 {
			return float64(r.Uncontended[i].Mean()) / float64(r.Uncontended[0].Mean())
		}))
		p50X := median(across(runs, func(r RunResult) float64 {
			return float64(r.Uncontended[i].Quantile(0.5)) / float64(r.Uncontended[0].Quantile(0.5))
		}))
		p("| %s | %s | %.1f | %.1f | %.1f | %.2f× | %.2f× | %.2f | %.2f | %.1f |\n", c.Name, c.Settings, mean, p50, p99, meanX, p50X,
			medianOf(rs, UncontendedResult.RoundTripsPerOp), medianOf(rs, UncontendedResult.CallsPerOp),
			medianOf(rs, func(x UncontendedResult) float64 { return us(x.ServerTimePerOp()) }))
	}
	p("\n")

	// Hot key.
	for w, workers := range cfg.Workers {
		tab := hotTable(cfg, runs, w)
		p("### One hot key: %d workers, %v critical section, %v per implementation\n\n", workers, cfg.Hold, cfg.Duration)
		p("| implementation | settings | acquisitions/s | × best peer | p50 wait ms | p99 wait ms | p99 × best peer | " +
			"longest streak (median / max) | turns per worker (min–max) | gave up | round trips / acq | Redis commands / acq | commands × best peer | commands × fastest peer | Redis µs / acq |\n")
		p("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n")
		for i, c := range cfg.Hot {
			f := tab[i]
			p("| %s | %s | %.0f | %.2f× | %.2f | %.1f | %.3f× | %.0f / %d | %.0f–%.0f | %.0f | %.2f | %.2f | %.3f× | %.3f× | %.1f |\n",
				c.Name, c.Settings,
				medianOf(f, func(x hotFigures) float64 { return x.throughput }),
				medianOf(f, func(x hotFigures) float64 { return x.throughputX }),
				medianOf(f, func(x hotFigures) float64 { return x.p50 }),
				medianOf(f, func(x hotFigures) float64 { return x.p99 }),
				medianOf(f, func(x hotFigures) float64 { return x.p99X }),
				medianOf(f, func(x hotFigures) float64 { return float64(x.streak) }), maxOf(f, func(x hotFigures) int { return x.streak }),
				medianOf(f, func(x hotFigures) float64 { return float64(x.minWins) }),
				medianOf(f, func(x hotFigures) float64 { return float64(x.maxWins) }),
				medianOf(f, func(x hotFigures) float64 { return float64(x.gaveUp) }),
				medianOf(f, func(x hotFigures) float64 { return x.trips }),
				medianOf(f, func(x hotFigures) float64 { return x.calls }),
				medianOf(f, func(x hotFigures) float64 { return x.callsX }),
				medianOf(f, func(x hotFigures) float64 { return x.callsXFast }),
				medianOf(f, func(x hotFigures) float64 { return x.serverUs }))
		}
		p("\n")
	}
	p("*Best peer* is, in each run and for each column on its own, the best figure any peer row reached " +
		"(highest throughput, lowest p99, fewest commands), so a peer configuration that polls rarely can set the command " +
		"figure while a tightly polling one sets the latency figure; *fastest peer* is the peer row with the lowest p99 wait " +
		"in the run, whose commands are what that latency costs. *Redis µs / acq* is the time Redis spent running the commands " +
		"the clients sent (a script's including its commands), per acquisition: the load each acquisition puts on Redis. Waits still going on when a case ended count with the " +
		"time waited so far (a lower bound), so that a starved worker is not left out of the tail. *Longest streak* is the most " +
		"turns one worker won back to back while another worker was waiting. *Gave up* counts waits the library abandoned " +
		"(retry budget spent) that the worker then resumed, its wait still running.\n\n")

	// Commands by name, for the analysis.
	p("### Redis commands per acquisition, by command (median of runs)\n\n")
	for w, workers := range cfg.Workers {
		p("%d workers:\n\n", workers)
		for i, c := range cfg.Hot {
			names := map[string]bool{}
			for _, r := range runs {
				for k := range maps.Keys(r.Hot[w][i].Calls) {
					names[k] = true
				}
			}
			type kv struct {
				name string
				v    float64
			}
			var parts []kv
			for name := range names {
				v := median(across(runs, func(r RunResult) float64 {
					return float64(r.Hot[w][i].Calls[name].Calls) / float64(max(r.Hot[w][i].Acquisitions, 1))
				}))
				parts = append(parts, kv{name, v})
			}
			slices.SortFunc(parts, func(a, b kv) int { return cmp.Or(cmp.Compare(b.v, a.v), cmp.Compare(a.name, b.name)) })
			var s []string
			for _, x := range parts {
				if x.v >= 0.005 {
					s = append(s, fmt.Sprintf("%s %.2f", strings.ToUpper(x.name), x.v))
				}
			}
			p("- %s: %s\n", c.Name, strings.Join(s, ", "))
		}
		p("\n")
	}

	// Targets.
	p("### Targets\n\n")
	for i, c := range cfg.Uncontended {
		if c.Peer || i == 0 || !strings.HasPrefix(c.Name, "ours") {
			continue
		}
		x := median(across(runs, func(r RunResult) float64 {
			return float64(r.Uncontended[i].Mean()) / float64(r.Uncontended[0].Mean())
		}))
		p("- uncontended %s within 1.2× of %s: %.2f× — %s\n", c.Name, cfg.Uncontended[0].Name, x, verdict(x <= 1.2))
	}
	for w, workers := range cfg.Workers {
		tab := hotTable(cfg, runs, w)
		for i, c := range cfg.Hot {
			if c.Peer {
				continue
			}
			p99X := medianOf(tab[i], func(x hotFigures) float64 { return x.p99X })
			callsX := medianOf(tab[i], func(x hotFigures) float64 { return x.callsX })
			callsXFast := medianOf(tab[i], func(x hotFigures) float64 { return x.callsXFast })
			streak := maxOf(tab[i], func(x hotFigures) int { return x.streak })
			p("- %d workers, %s: p99 wait ≤ 1/5 of the best peer: %.3f× — %s; commands per acquisition ≤ 1/3 of the best peer: %.3f× — %s "+
				"(of the fastest peer: %.3f× — %s); at most 2 turns in a row while others wait: longest %d in any run — %s\n",
				workers, c.Name, p99X, verdict(p99X <= 0.2), callsX, verdict(callsX <= 1.0/3), callsXFast, verdict(callsXFast <= 1.0/3),
				streak, verdict(streak <= 2))
		}
	}
	_, err := io.WriteString(out, b.String())
	return err
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}
