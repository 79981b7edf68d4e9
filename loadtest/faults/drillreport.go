package faults

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/model"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// drills runs every chosen scenario -runs times, reports each run and a table of all of
// them (also written to drills.md in the output directory), and fails unless every run passed.
func (h *harness) drills(ctx context.Context, opts DrillOptions) error {
	picked, err := pickScenarios(opts.Fault)
	if err != nil {
		return err
	}
	plan := opts.plan()
	var outcomes []drillOutcome
	began := time.Now()
	for _, sc := range picked {
		for run := 1; run <= opts.Runs; run++ {
			if ctx.Err() != nil {
				break
			}
			o := h.runDrill(ctx, plan, sc, run, opts.Seed+uint64(run)-1)
			h.printOutcome(o)
			outcomes = append(outcomes, o)
		}
	}
	table := drillTable(outcomes, h.Cluster, opts, time.Since(began))
	h.Printf("\n%s\n", table)
	path := filepath.Join(h.Out, "drills.md")
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	h.Printf("written to %s\n", path)
	if ctx.Err() != nil {
		return env.ErrStopped
	}
	for _, o := range outcomes {
		if o.verdict() != "PASS" {
			return env.ErrFailed
		}
	}
	return nil
}

// recheck checks a saved history again; a violation's picture goes beside it.
func (h *harness) recheck(path string, plan drillPlan) error {
	ops, end, err := model.Load(path)
	if err != nil {
		return err
	}
	writes, reads, err := checkBoth(plan, ops, end, nil, filepath.Dir(path))
	if err != nil {
		return err
	}
	h.Printf("%s\n%s\n", writes, reads)
	if writes.Result != porcupine.Ok || reads.Result != porcupine.Ok {
		return env.ErrFailed
	}
	return nil
}

// plan is what every run of every drill shares, and what -recheck checks with.
func (o DrillOptions) plan() drillPlan {
	return drillPlan{
		rate:          o.Rate,
		lockTTL:       o.LockTTL,
		clientTimeout: o.ClientTimeout,
		checkTimeout:  o.CheckTimeout,
		readSlack:     o.ReadSlack,
		model:         model.Options{ExactAvailable: !o.LooseSoldOut},
		direct:        o.Direct,
		warmup:        3 * time.Second,
		tail:          5 * time.Second,
		rules:         !o.NoRules,
		// The window's moments are Postgres's, the answers' times the harness's: one wall
		// clock read at different instants, and a replica refusing from its view reads its own.
		windowSlack: 20 * time.Millisecond,
	}
}

func (h *harness) printOutcome(o drillOutcome) {
	name := filepath.Base(o.dir)
	if o.err != nil {
		h.Printf("[%s] ERROR: %v (logs in %s)\n", name, o.err, o.dir)
		return
	}
	a := o.avail
	h.Printf("[%s] %s: %d operations (at most %d open at once), %d outcomes unknown to their client (%d found in the database)\n",
		name, o.verdict(), o.ops, o.concurrent, o.unknown, o.resolved)
	h.Printf("  orders        confirmed %d, sold-out %d, refused %d, unknown %d; by the rules: not open %d, ended %d, over the limit %d\n",
		a.orders[model.Confirmed], a.orders[model.SoldOut], a.orders[model.Refused], a.orders[model.Unknown],
		a.orders[model.NotOpen], a.orders[model.Ended], a.orders[model.OverLimit])
	h.Printf("  check         %s\n  check         %s\n", o.writes, o.reads)
	h.Printf("  layers        catches: fence %.0f, version %.0f, guard %.0f, check %.0f (live replicas' counters)\n",
		o.catches["fence"], o.catches["version"], o.catches["guard"], o.catches["check"])
	for _, inv := range append(o.invariants, o.reconcile...) {
		mark := "ok  "
		if !inv.OK {
			mark = "FAIL"
		}
		h.Printf("  %s          %s: %s\n", mark, inv.Name, inv.Detail)
	}
	h.Printf("  availability  orders answered 429 during %.1fs, 503/5xx/nothing during %.1fs; longest stall %.1fs (from %.1fs); slowest replica answer %.1fs (%s); %d client timeouts\n",
		a.busy.Seconds(), a.unavailable.Seconds(), a.longestStall.Seconds(), a.stallAt.Seconds(), a.slowest.Seconds(), a.slowestWhat, a.timeouts)
	if len(a.duringFault) > 0 {
		h.Printf("  during fault  %s\n", report.Statuses(a.duringFault))
	}
	if a.failedAttempts > 0 {
		h.Printf("  failed        %d of %d requests: %s\n", a.failedAttempts, a.attempts, a.failedKinds)
	}
	if a.staleInFlight > 0 {
		h.Printf("  finding       %d answers 409 idempotency-key-in-flight for a key none of whose attempts was still running\n", a.staleInFlight)
	}
	for _, n := range o.notes {
		h.Printf("  note          %s\n", n)
	}
	for _, f := range o.failed {
		h.Printf("  FAIL          %s\n", f)
	}
	for _, why := range o.invalid {
		h.Printf("  INVALID       %s\n", why)
	}
	h.Printf("  history       %s\n", filepath.Join(o.dir, "history.txt"))
	if page := filepath.Join(o.dir, pageName); fileExists(page) {
		h.Printf("  report        %s\n", page)
	}
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// drillTable is the markdown table docs/reliability.md keeps: one row per scenario, with the
// worst availability figures over its runs.
func drillTable(outcomes []drillOutcome, cl env.ClusterOptions, o DrillOptions, took time.Duration) string {
	var b strings.Builder
	rules, flag := "sale rules on the third product, customer tokens", ""
	if o.NoRules {
		rules, flag = "no sale rules (-rules=false), customer tokens", " -rules=false"
	}
	fmt.Fprintf(&b, "`go run -C loadtest . -fault %s -runs %d -seed %d%s` (%d replicas behind HAProxy, %.0f operations/s, lock TTL %v, lock wait %v, defense %s, %s; %s in all)\n\n",
		o.Fault, o.Runs, o.Seed, flag, cl.Replicas, o.Rate, o.LockTTL, cl.LockWait, cl.Defense, rules, took.Round(time.Second))
	b.WriteString("| scenario | runs | operations | unknown (found in DB) | violations | invalid | 429 time | 503/failed time | longest stall | slowest answer | failed requests | stale in-flight |\n")
	b.WriteString("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
	type row struct {
		runs, ops, unknown, resolved, violations, invalid, errors, failed, stale int
		busy, down, stall, slowest                                               time.Duration
	}
	var order []string
	rows := map[string]*row{}
	for _, oc := range outcomes {
		r := rows[oc.scenario]
		if r == nil {
			r = &row{}
			rows[oc.scenario] = r
			order = append(order, oc.scenario)
		}
		r.runs++
		if oc.err != nil {
			r.errors++
			continue
		}
		r.ops += oc.ops
		r.unknown += oc.unknown
		r.resolved += oc.resolved
		r.violations += oc.violations()
		if oc.verdict() == "INVALID" {
			r.invalid++
		}
		r.failed += oc.avail.failedAttempts
		r.stale += oc.avail.staleInFlight
		r.busy = max(r.busy, oc.avail.busy)
		r.down = max(r.down, oc.avail.unavailable)
		r.stall = max(r.stall, oc.avail.longestStall)
		r.slowest = max(r.slowest, oc.avail.slowest)
	}
	for _, name := range order {
		r := rows[name]
		runs := fmt.Sprint(r.runs)
		if r.errors > 0 {
			runs += fmt.Sprintf(" (%d errors)", r.errors)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %d (%d) | %d | %d | %.1fs | %.1fs | %.1fs | %.1fs | %d | %d |\n", name, runs, r.ops, r.unknown, r.resolved,
			r.violations, r.invalid, r.busy.Seconds(), r.down.Seconds(), r.stall.Seconds(), r.slowest.Seconds(), r.failed, r.stale)
	}
	b.WriteString("\nTimes are the worst run's: 429 / 503 time adds up the 100 ms slices in which some order was answered so; the longest stall is the longest time no order got a 201 or a sold-out.\n")
	writeNoSale(&b, outcomes)
	return b.String()
}

// writeNoSale adds the HA drills' windows without selling (ha.go), one line per scenario with
// every run's figure; nothing when no drill measured one.
func writeNoSale(b *strings.Builder, outcomes []drillOutcome) {
	var order []string
	runs := map[string][]string{}
	for _, o := range outcomes {
		if o.err != nil || o.noSale == 0 {
			continue
		}
		if runs[o.scenario] == nil {
			order = append(order, o.scenario)
		}
		runs[o.scenario] = append(runs[o.scenario], fmt.Sprintf("%.1fs", o.noSale.Seconds()))
	}
	if len(order) == 0 {
		return
	}
	b.WriteString("\nWindow without selling (from the fault to the first confirmed order sent after it), by run:\n")
	for _, name := range order {
		fmt.Fprintf(b, "- %s: %s\n", name, strings.Join(runs[name], ", "))
	}
}
