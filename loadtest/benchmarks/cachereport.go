package benchmarks

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/report"
)

// cacheReport renders what the -cache mode measured as markdown (cache.md).
func cacheReport(replicas int, o CacheOptions, so soldOutPhase, rd readsPhase, st []stampedeRound) string {
	var b strings.Builder
	fmt.Fprintf(&b, "One run: %d replicas behind HAProxy, wrk closed loops of %d connections through the balancer. "+
		"Each phase alternates rounds of %v of its load and of `GET /healthz` (%d of each, after unmeasured warm-ups: %v of the load, one replica profiled meanwhile, and %v of healthz); "+
		"rates are medians over the rounds, and ratios are taken between those medians.\n\n",
		replicas, o.Clients, o.Duration, o.Rounds, profiledWarmUp, cacheWarmUp)

	refusals, healthz1 := roundsOf(so.rounds, kindRefusals), roundsOf(so.rounds, kindHealthz)
	reads, healthz2 := roundsOf(rd.rounds, kindReads), roundsOf(rd.rounds, kindHealthz)
	refusedPerS, hz1 := median(rates(refusals, http.StatusConflict)), median(rates(healthz1, http.StatusOK))
	readsPerS, hz2 := median(rates(reads, http.StatusOK)), median(rates(healthz2, http.StatusOK))
	refusedN := answers(refusals, http.StatusConflict)
	readN := answers(reads, http.StatusOK)
	view1, view2 := sumViews(refusals), sumViews(reads)
	queries := make([]float64, len(st))
	for i, r := range st {
		queries[i] = r.view.queries()
	}
	stampedeView := viewStats{}
	if len(st) > 0 {
		stampedeView = st[0].view
	}

	b.WriteString("## Summary\n\n| measure | result | target |\n| --- | ---: | --- |\n")
	fmt.Fprintf(&b, "| sold-out refusals/s ÷ healthz/s | %s (%.0f / %.0f per s; rounds %s) | ≥ %.1f×: %s |\n",
		report.Ratio(refusedPerS, hz1), refusedPerS, hz1, pairRange(refusals, healthz1, http.StatusConflict), readTarget, targetVerdict(refusedPerS/hz1, readTarget))
	fmt.Fprintf(&b, "| sold-out answers given from the view (refused-from-view ÷ sold-out outcomes, the replicas' counters) | %s | all |\n",
		share(view1.refused, soldOutAnswers(view1, refusedN), view1.has(metricRefusedByView)))
	fmt.Fprintf(&b, "| Postgres queries per 1,000 refusals (view and key-set counters) | %s | 0 |\n",
		perThousand(view1.queries(), float64(refusedN), view1.has(queryMetrics...)))
	fmt.Fprintf(&b, "| scans of the run's tables per 1,000 refusals, over all the phase's rounds (pg_stat_user_tables) | %s | 0 |\n",
		perThousand(float64(sumScans(so.rounds)), float64(refusedN), true))
	fmt.Fprintf(&b, "| product reads/s ÷ healthz/s, during a sale | %s (%.0f / %.0f per s; rounds %s) | ≥ %.1f×: %s |\n",
		report.Ratio(readsPerS, hz2), readsPerS, hz2, pairRange(reads, healthz2, http.StatusOK), readTarget, targetVerdict(readsPerS/hz2, readTarget))
	fmt.Fprintf(&b, "| the buyers' confirmed orders/s meanwhile (%d connections) | %.0f | |\n",
		saleBuyers, perSecond(rd.buyers.statuses[http.StatusCreated], rd.buyers.window))
	fmt.Fprintf(&b, "| Postgres queries per 1,000 reads (view and key-set counters) | %s | |\n",
		perThousand(view2.queries(), float64(readN), view2.has(queryMetrics...)))
	if len(st) > 0 {
		fmt.Fprintf(&b, "| stampede of %d reads: Postgres queries per round, median (min–max of %d rounds) | %s | 1 |\n",
			o.StampedeReaders, len(st), spread(queries, stampedeView.has(queryMetrics...)))
		all := stampedeLatencies(st)
		fmt.Fprintf(&b, "| stampede: read latency p50 / p99, all rounds | %.1f / %.1f ms | |\n", report.Percentile(all, 50), report.Percentile(all, 99))
	}

	fmt.Fprintf(&b, "\n## 1. Sold-out refusals against healthz\n\n")
	fmt.Fprintf(&b, "Product %d had %d units; %d orders of one unit, one at a time, sold them (the next was refused), "+
		"and a read said stock 0 %v after the last sale. Then rounds of orders for it, each with its own Idempotency-Key "+
		"(every answer must be 409 sold-out), took turns with rounds of healthz.\n\n",
		so.product, soldOutStock, so.sold, so.zeroIn.Round(time.Millisecond))
	b.WriteString(roundTable(so.rounds, false))
	b.WriteString("\n" + viewNotes(sumViews(so.rounds)) + "\n")
	b.WriteString(cacheCPUTable(so.rounds, []string{kindRefusals, kindHealthz}))

	fmt.Fprintf(&b, "\n## 2. Product reads during a sale\n\n")
	fmt.Fprintf(&b, "Product %d (stock %d) was ordered throughout by %d closed-loop wrk connections, each order one unit with its own "+
		"Idempotency-Key; they got %s over %v. Rounds of `GET /v1/products/%d` took turns with rounds of healthz.\n\n",
		rd.product, throughputStock, saleBuyers, report.Statuses(rd.buyers.statuses), rd.buyers.window.Round(time.Second), rd.product)
	b.WriteString(roundTable(rd.rounds, true))
	b.WriteString("\n" + viewNotes(sumViews(rd.rounds)) + "\n")
	b.WriteString(cacheCPUTable(rd.rounds, []string{kindReads, kindHealthz}))
	b.WriteString("\nThe buyers' CPU (their wrk included) is in every round of this phase alike.\n")

	if len(st) > 0 {
		fmt.Fprintf(&b, "\n## 3. Stampede\n\n")
		fmt.Fprintf(&b, "Each round: %d connections opened (on healthz), the product read once, its view's Redis key deleted, "+
			"%v waited (the lease of %v and a margin), then %d reads of the product released at once, from as many goroutines, "+
			"through the balancer. Counters are summed over the replicas.\n\n", o.StampedeReaders, viewLease+leaseMargin, viewLease, o.StampedeReaders)
		b.WriteString("| round | key was there | Postgres queries: all = rebuild + fallback + key sets | rebuilds | rebuild waits | give-ups | reads from process / redis / postgres | answers | of them read from Postgres (Cache-Status) | p50 / p99 | last answer |\n")
		b.WriteString("| ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |\n")
		for i, r := range st {
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s | %s | %s | %d | %.1f / %.1f ms | %.1f ms |\n", i+1, yesNo(r.deleted),
				queryFigure(r.view), figure(r.view.rebuilds, r.view.has(metricViewRebuilds)),
				figure(r.view.waits, r.view.has(metricViewWaits)), figure(r.view.giveups, r.view.has(metricViewGiveups)),
				bySource(r.view), report.Statuses(r.statuses), r.misses, report.Percentile(r.latencies, 50), report.Percentile(r.latencies, 99),
				float64(r.took)/float64(time.Millisecond))
		}
	}
	return b.String()
}

// roundTable lists a phase's rounds in the order they ran: with what the sold-out path counts,
// or with what the read path and the buyers did (sale).
func roundTable(rounds []cacheRound, sale bool) string {
	var b strings.Builder
	b.WriteString("| round | load | answers/s | answers | p50 / p99 | Postgres queries: all = rebuild + fallback + key sets |")
	if sale {
		b.WriteString(" reads from process / redis / postgres | rebuilds | scans of the run's tables | buyers' confirmed/s |\n")
		b.WriteString("| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |\n")
	} else {
		b.WriteString(" refused from view | scans of the run's tables |\n")
		b.WriteString("| ---: | --- | ---: | --- | ---: | ---: | ---: | ---: |\n")
	}
	n := map[string]int{}
	for _, r := range rounds {
		n[r.kind]++
		answers := report.Statuses(r.wrk.statuses)
		if r.wrk.failed > 0 {
			answers += fmt.Sprintf(", %d socket errors", r.wrk.failed)
		}
		if r.wrk.notSoldOut > 0 {
			answers += fmt.Sprintf(" (%d of the 409s not sold-out)", r.wrk.notSoldOut)
		}
		fmt.Fprintf(&b, "| %d | %s | %.0f | %s | %.1f / %.1f ms | %s |", n[r.kind], r.kind, r.rate(0), answers,
			r.wrk.p50, r.wrk.p99, queryFigure(r.view))
		if sale {
			fmt.Fprintf(&b, " %s | %s | %d | %.0f |\n", bySource(r.view), figure(r.view.rebuilds, r.view.has(metricViewRebuilds)),
				r.scans, perSecond(int(r.buyers), r.wrk.window))
		} else {
			fmt.Fprintf(&b, " %s | %d |\n", figure(r.view.refused, r.view.has(metricRefusedByView)), r.scans)
		}
	}
	return b.String()
}

// cacheCPUTable gives, for each kind of round, the CPU each process group used per answer and
// as a share of the cores, over all rounds of that kind.
func cacheCPUTable(rounds []cacheRound, kinds []string) string {
	var b strings.Builder
	b.WriteString("CPU (utime+stime over the rounds), per answer and in cores:\n\n| process |")
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s: µs per answer | %s: cores |", k, k)
	}
	b.WriteString("\n| --- |" + strings.Repeat(" ---: | ---: |", len(kinds)) + "\n")
	type total struct {
		cpu     cpuUse
		answers int
		window  time.Duration
	}
	totals := make([]total, len(kinds))
	for i, k := range kinds {
		totals[i].cpu = cpuUse{}
		for _, r := range roundsOf(rounds, k) {
			for g, d := range r.cpu {
				totals[i].cpu[g] += d
			}
			totals[i].answers += r.wrk.requests
			totals[i].window += r.wrk.window
		}
	}
	for _, g := range append(slices.Clone(cpuGroups), "machine") {
		name := g
		if g == "machine" {
			name = "whole machine (/proc/stat)"
		}
		fmt.Fprintf(&b, "| %s |", name)
		for _, t := range totals {
			fmt.Fprintf(&b, " %.0f | %.2f |", perOrder(t.cpu[g], t.answers), t.cpu[g].Seconds()/t.window.Seconds())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// cacheChecks lists what must hold in any run, whatever the rates: every sold-out order
// refused as sold-out, every read and healthz answered 200, and the stampedes deleting a view
// that was there.
func cacheChecks(so soldOutPhase, rd readsPhase, st []stampedeRound) []string {
	var failed []string
	check := func(phase string, rounds []cacheRound) {
		n := map[string]int{}
		for _, r := range rounds {
			n[r.kind]++
			want := http.StatusOK
			if r.kind == kindRefusals {
				want = http.StatusConflict
			}
			if r.wrk.statuses[want] != r.wrk.requests || r.wrk.failed > 0 || r.wrk.notSoldOut > 0 {
				failed = append(failed, fmt.Sprintf("%s, round %d of %s: %s, %d socket errors, %d 409s not sold-out; want %d only",
					phase, n[r.kind], r.kind, report.Statuses(r.wrk.statuses), r.wrk.failed, r.wrk.notSoldOut, want))
			}
		}
	}
	check("sold-out phase", so.rounds)
	check("reads phase", rd.rounds)
	if rd.buyers.failed > 0 {
		failed = append(failed, fmt.Sprintf("reads phase: the buyers saw %d socket errors", rd.buyers.failed))
	}
	for i, r := range st {
		if r.statuses[http.StatusOK] != len(r.latencies) {
			failed = append(failed, fmt.Sprintf("stampede round %d: %s; want 200 only", i+1, report.Statuses(r.statuses)))
		}
		if !r.deleted {
			failed = append(failed, fmt.Sprintf("stampede round %d: the view's key was not in Redis (does the harness name it as the service does?)", i+1))
		}
	}
	return failed
}

func roundsOf(rounds []cacheRound, kind string) []cacheRound {
	var out []cacheRound
	for _, r := range rounds {
		if r.kind == kind {
			out = append(out, r)
		}
	}
	return out
}

// rates is each round's answers with status per second.
func rates(rounds []cacheRound, status int) []float64 {
	out := make([]float64, len(rounds))
	for i, r := range rounds {
		out[i] = r.rate(status)
	}
	return out
}

func answers(rounds []cacheRound, status int) int {
	n := 0
	for _, r := range rounds {
		n += r.wrk.statuses[status]
	}
	return n
}

func sumViews(rounds []cacheRound) viewStats {
	if len(rounds) == 0 {
		return viewStats{}
	}
	sum := rounds[0].view
	for _, r := range rounds[1:] {
		sum = sum.plus(r.view)
	}
	return sum
}

// soldOutAnswers is how many sold-out answers the replicas counted, or, from a build that does
// not count them, the 409s wrk counted (which leave out the answers still in flight when wrk
// stopped, up to one per connection).
func soldOutAnswers(v viewStats, wrk409s int) float64 {
	if n := v.outcomes["sold_out"]; n > 0 {
		return n
	}
	return float64(wrk409s)
}

// sumScans adds up the rounds' table scans: summed over a phase, the scans a backend reported
// a round late are counted all the same.
func sumScans(rounds []cacheRound) int64 {
	var n int64
	for _, r := range rounds {
		n += r.scans
	}
	return n
}

func stampedeLatencies(st []stampedeRound) []float64 {
	var all []float64
	for _, r := range st {
		all = append(all, r.latencies...)
	}
	return all
}

// median is the middle value of xs, or the mean of the two middle ones; NaN when xs is empty.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// pairRange is the lowest and highest ratio of a round of a to the healthz round that ran
// next to it (the i-th of each), answers with status over 200s.
func pairRange(a, healthz []cacheRound, status int) string {
	var rs []float64
	for i := range min(len(a), len(healthz)) {
		rs = append(rs, a[i].rate(status)/healthz[i].rate(http.StatusOK))
	}
	if len(rs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%.2f–%.2f×", slices.Min(rs), slices.Max(rs))
}

// targetVerdict says whether ratio reaches target.
func targetVerdict(ratio, target float64) string {
	switch {
	case math.IsNaN(ratio) || math.IsInf(ratio, 0):
		return "not measured"
	case ratio >= target:
		return "met"
	default:
		return "**missed**"
	}
}

// figure prints a counter's value, or n/a when the replicas do not export it.
func figure(v float64, ok bool) string {
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("%.0f", v)
}

func share(part, whole float64, ok bool) string {
	if !ok || whole == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%% (%.0f of %.0f)", 100*part/whole, part, whole)
}

func perThousand(n, of float64, ok bool) string {
	if !ok || of == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2f (%.0f in %.0f)", 1000*n/of, n, of)
}

func perSecond(n int, window time.Duration) float64 {
	if window <= 0 {
		return 0
	}
	return float64(n) / window.Seconds()
}

// spread is the median of xs and their range, or n/a.
func spread(xs []float64, ok bool) string {
	if !ok || len(xs) == 0 {
		return "n/a"
	}
	return fmt.Sprintf("**%g** (%g–%g)", median(xs), slices.Min(xs), slices.Max(xs))
}

// queryFigure is the Postgres queries of the read and sold-out paths, all and by purpose.
func queryFigure(v viewStats) string {
	if !v.has(queryMetrics...) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f = %.0f + %.0f + %.0f", v.queries(), v.queriesBy["rebuild"], v.queriesBy["fallback"], v.keySets)
}

// viewNotes is a line on what the view counted over rounds besides queries and sources.
func viewNotes(v viewStats) string {
	if !v.has(metricViewWaits, metricViewGiveups, metricViewUnavailable, metricViewLostUpdates) {
		return ""
	}
	return fmt.Sprintf("Over these rounds the replicas also counted %.0f rebuild waits, %.0f rebuild give-ups, %.0f reads answered unavailable (fallback reads all taken) and %.0f view updates Redis did not take.\n",
		v.waits, v.giveups, v.unavailable, v.lostUpdates)
}

// bySource lists view reads by where the view came from.
func bySource(v viewStats) string {
	if !v.has(metricViewReads) {
		return "n/a"
	}
	return fmt.Sprintf("%.0f / %.0f / %.0f", v.reads["process"], v.reads["redis"], v.reads["postgres"])
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "**no**"
}
