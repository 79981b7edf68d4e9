package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"golang.org/x/sync/errgroup"

	"github.com/stocksvc/stocksvc/internal/clock"
)

// errBudgetSpent marks a shutdown stage that the shutdown budget (STOCKSVC_SHUTDOWN_GRACE) cut
// short or left out.
var errBudgetSpent = errors.New("the shutdown budget ran out")

// shutdown stops the replica within cfg.ShutdownGrace, one budget for all of it, so that an
// orchestrator's grace period (Compose's stop_grace_period, 20 s) that is longer than the
// budget never has to kill it half way. In order, under one deadline:
//
//  1. readiness turns 503 and the listeners stay open for STOCKSVC_SHUTDOWN_DELAY, so that a
//     balancer takes the replica out before it stops taking connections;
//  2. the listeners close and the requests in flight finish;
//  3. the workers deciding orders accepted for later stop (a drain in progress finishes its
//     round; one still running at the deadline is abandoned, and its orders, still in line
//     in Postgres, are decided by another replica);
//  4. the orders queued in the service are decided;
//  5. the line's keeper stops (an advance in flight rolls back: another replica's does its
//     work) and the admissions this replica's last orders used are written;
//  6. the housekeeping goroutines (key purge, Redis watch, profiler) are joined;
//  7. the lock client, Redis and Postgres connections close.
//
// A stage still running at the deadline is abandoned, and the stages after it are left out:
// the process is about to exit, which ends them all. The error then names them (with
// errBudgetSpent), and the process exits 1; it also holds whatever failed on the way, a
// listener that broke included.
func shutdown(ctx context.Context, cfg config, log *slog.Logger, lis *listeners, a *app, deps dependencies, g *errgroup.Group) error {
	ctx = context.WithoutCancel(ctx)
	log.InfoContext(ctx, "shutting down", slog.String("budget", cfg.ShutdownGrace.String()), slog.String("delay", cfg.ShutdownDelay.String()))
	bctx, cancel := context.WithTimeout(ctx, cfg.ShutdownGrace)
	defer cancel()
	return runStages(bctx, []stage{
		{"drain delay", func(ctx context.Context) error {
			a.api.StartDraining()
			_ = clock.Sleep(ctx, cfg.ShutdownDelay)
			return nil
		}},
		{"in-flight requests", lis.shutdown},
		{"async workers", func(ctx context.Context) error {
			if !a.workers {
				return nil
			}
			return a.queue.Stop(ctx)
		}},
		{"queued orders", func(context.Context) error {
			// No order can arrive any more; Close returns once the queued ones are decided
			// (their handlers have been answered, or abandoned, by then).
			a.svc.Close()
			return nil
		}},
		{"line keeper", func(ctx context.Context) error {
			a.lines.Stop()
			return a.lines.Flush(ctx)
		}},
		{"housekeeping", func(context.Context) error { return g.Wait() }},
		{"connections", func(context.Context) error {
			_ = a.locks.Close()
			deps.close()
			return nil
		}},
	})
}

// stage is one step of a shutdown. run should return once ctx ends, but need not: runStages
// does not wait for it beyond ctx's deadline.
type stage struct {
	name string
	run  func(ctx context.Context) error
}

// runStages runs the stages in order, each with ctx, until ctx ends: one deadline for all of
// them, not one each. A stage still running when ctx ends is abandoned (its goroutine runs on,
// until the process exits) and the stages after it are not begun. It returns every stage's
// error, each wrapped with the stage's name, and for each stage cut short or left out one
// that wraps errBudgetSpent.
func runStages(ctx context.Context, stages []stage) error {
	var errs []error
	for i, s := range stages {
		if ctx.Err() != nil {
			var names []string
			for _, left := range stages[i:] {
				names = append(names, left.name)
			}
			errs = append(errs, fmt.Errorf("left out %q: %w", names, errBudgetSpent))
			break
		}
		done := make(chan error, 1)
		go func() { done <- s.run(ctx) }()
		select {
		case err := <-done:
			switch {
			case err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()):
				errs = append(errs, fmt.Errorf("%s: cut short: %w (%w)", s.name, errBudgetSpent, err))
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", s.name, err))
			}
		case <-ctx.Done():
			errs = append(errs, fmt.Errorf("%s: cut short: %w", s.name, errBudgetSpent))
		}
	}
	return errors.Join(errs...)
}
