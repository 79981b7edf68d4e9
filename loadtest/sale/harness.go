// Package sale is the k6 flash sale (the default mode) and -compare, which runs it in several
// configurations side by side: a deployment (package cluster) under k6's scenarios
// (flashsale.js), what the replicas and the balancer counted, the invariants checked in
// Postgres (invariants.go, package verdict), and the one-screen summary (report.go).
package sale

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// harness is the invocation's shared state, which the sale extends with methods of its own.
type harness struct{ *env.Harness }

// Sale runs the one configured sale and reports it; env.ErrFailed when an invariant or a k6
// threshold failed, env.ErrStopped when a signal cut it short.
func Sale(ctx context.Context, h *env.Harness, o Options) error { return (&harness{h}).sale(ctx, o) }

// Compare runs -compare and writes compare.md.
func Compare(ctx context.Context, h *env.Harness, o Options) error {
	return (&harness{h}).compare(ctx, o)
}

// sale runs the one configured sale and reports it.
func (h *harness) sale(ctx context.Context, o Options) error {
	spec := saleSpec{label: "sale", defense: h.Cluster.Defense, lockRetry: o.LockRetry,
		lockMaxRetries: o.LockMaxRetries, scenarios: o.Scenarios}
	run, err := h.runSale(ctx, spec, o)
	if err != nil {
		return err
	}
	defer h.closeRun(run)
	checkCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	raceStock := int64(0)
	if strings.Contains(o.Scenarios, "race") {
		raceStock = int64(o.RaceStock)
	}
	invariants, ledgers, err := checkInvariants(checkCtx, run, raceStock, run.killed >= 0)
	if err != nil {
		return err
	}
	timing, err := saleTiming(checkCtx, run)
	if err != nil {
		return err
	}
	log, logErr := readOrders(run)
	if logErr != nil {
		// The checks and the summary still stand; only the latency line and the page want it.
		h.Printf("  warning: %v\n", logErr)
	}
	err = h.report(run, o, invariants, ledgers, timing, log)
	if logErr != nil {
		return err
	}
	if perr := h.writePage(checkCtx, run, o, invariants, verdictOf(err), log); perr != nil {
		h.Printf("  warning: no report page: %v\n", perr)
	}
	return err
}

// writePage writes the sale's report page beside its logs (report.html, which the summary
// names) and prints its headline rates, each over the phase it describes.
func (h *harness) writePage(ctx context.Context, run *saleRun, o Options, invariants []verdict.Invariant, outcome string, log orderLog) error {
	r, err := h.pageRun(ctx, run, o, "flash sale", "", invariants, outcome, log)
	if err != nil {
		return err
	}
	page := report.Page{Title: "stocksvc flash sale", Command: "go run -C loadtest . " + strings.Join(h.Args, " "), Runs: []report.Run{r}}
	if err := report.Write(filepath.Join(run.dir, "report.html"), page); err != nil {
		return err
	}
	h.Printf("by phase      %s\n", report.Headline(r))
	return nil
}
