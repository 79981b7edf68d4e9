// Command loadtest runs a whole flash sale on one machine and proves, from Postgres, that
// nothing was oversold or lost: it builds stocksvc, starts N replicas on loopback ports against
// one Postgres and one Redis, puts HAProxy in front (health-checking /readyz), drives k6
// (loadtest/flashsale.js) through the balancer, checks the invariants with SQL, prints a
// one-screen summary and stops everything it started — also on Ctrl-C.
//
//	go run -C loadtest .                         # the default sale
//	go run -C loadtest . -replicas 5 -stock 2000 -rate 400 -duration 60s -kill-after 20s
//	go run -C loadtest . -compare                # the comparison for docs/benchmarks.md
//	go run -C loadtest . -cache -duration 10s    # reads and sold-out answers against healthz
//	go run -C loadtest . -async -kill-after 3s   # every order Prefer: respond-async, a replica killed
//	go run -C loadtest . -flood                  # buyers beside floods of audits, missing ids, forged tokens, one customer, healthz
//	go run -C loadtest . -replays                # fresh keys against every key sent twice
//	go run -C loadtest . -opening                # the opening: a crowd through a sale's opening, a limit per customer
//	go run -C loadtest . -holds -duration 20s    # holds beside the plain sale: buyers who never pay, units sold again
//
// It is a module of its own (github.com/stocksvc/stocksvc/loadtest), so that its load
// generators and checkers stay out of the service's go.mod. It builds the service from the
// repository it sits in, wherever it is started from; relative paths given in flags are
// relative to the working directory (loadtest/ under go run -C loadtest).
//
// It exits 1 when an invariant or a k6 threshold fails.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/stocksvc/stocksvc/loadtest/benchmarks"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/faults"
	"github.com/stocksvc/stocksvc/loadtest/opening"
	"github.com/stocksvc/stocksvc/loadtest/sale"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := run(ctx, os.Args[1:], os.Stdout)
	switch {
	case err == nil:
	case errors.Is(err, env.ErrFailed):
		os.Exit(1)
	case errors.Is(err, env.ErrStopped) || ctx.Err() != nil:
		// The shell's convention for a command ended by Ctrl-C, so that scripts and CI can tell
		// "stopped" from both "passed" and "found a violation".
		if !errors.Is(err, env.ErrStopped) {
			fmt.Fprintln(os.Stderr, "loadtest: stopped by a signal:", err)
		}
		os.Exit(130)
	default:
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

// run parses the command line and runs the mode it picks. Every mode but -recheck builds the
// service and finds HAProxy first; the sales find k6, the benchmarks wrk.
func run(ctx context.Context, args []string, w io.Writer) error {
	o, err := parseOptions(args, w)
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	h := &env.Harness{Cluster: o.cluster, W: w, Args: args}
	if o.mode == modeRecheck {
		return faults.Recheck(h, o.drills)
	}
	if h.Out, err = filepath.Abs(o.out); err != nil {
		return err
	}
	// The sales drive k6. -throughput, which does not, has always looked for it too; that is
	// kept here, as every other behaviour of the harness, while its code is reorganised.
	needK6 := o.mode == modeSale || o.mode == modeCompare || o.mode == modeThroughput || o.mode == modeOpening
	if needK6 {
		if h.Script, err = filepath.Abs(o.script); err != nil {
			return err
		}
		if _, err := os.Stat(h.Script); err != nil {
			return fmt.Errorf("k6 script %s: %w", o.script, err)
		}
	}
	if err := os.MkdirAll(h.Out, 0o755); err != nil {
		return err
	}
	if needK6 {
		if h.K6, err = cluster.FindK6(ctx, o.k6, w); err != nil {
			return err
		}
	}
	if h.HAProxy, err = cluster.FindTool(ctx, "haproxy", "haproxy", w); err != nil {
		return err
	}
	h.Binary = filepath.Join(h.Out, "stocksvc")
	if err := cluster.BuildService(ctx, h.Binary, w); err != nil {
		return err
	}
	switch o.mode {
	case modeThroughput, modeCache, modeFlood, modeReplays:
		if h.Wrk, err = cluster.FindTool(ctx, "wrk", "wrk", w); err != nil {
			return err
		}
	}
	switch o.mode {
	case modeCompare:
		return sale.Compare(ctx, h, o.sale)
	case modeThroughput:
		return benchmarks.Throughput(ctx, h, o.throughput)
	case modeCache:
		return benchmarks.Cache(ctx, h, o.cache)
	case modeFlood:
		return benchmarks.Flood(ctx, h, o.flood)
	case modeReplays:
		return benchmarks.Replays(ctx, h, o.replays)
	case modeDrills:
		return faults.Drills(ctx, h, o.drills)
	case modeAsync:
		return faults.Async(ctx, h, o.async)
	case modeOpening:
		return opening.Run(ctx, h, o.opening)
	case modeHolds:
		return faults.Holds(ctx, h, o.holds)
	}
	return sale.Sale(ctx, h, o.sale)
}
