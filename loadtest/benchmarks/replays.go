package benchmarks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// The replay benchmark (-replays, issue #18 item 3): what a retry storm costs a sale. Clients
// that time out send their order again with the same Idempotency-Key; the service must answer
// such a replay from the key's record, cheaply, without failing or redoing the batch it lands
// in. Rounds of three loads of one product (which never sells out) take turns, each a closed
// loop of wrk connections through the balancer:
//
//   - fresh: every order a new key;
//   - sequential: every key sent twice, the second time after the first's answer;
//   - concurrent: every key sent twice at once, from two connections.
//
// Requests answered per second of each are compared by the medians of their rounds. The
// script also checks each pair of answers (the replay of a confirmed order must be that order,
// marked Idempotent-Replayed), and afterwards SQL checks that no key bought twice.

// ReplayOptions configure -replays. The zero value is off.
type ReplayOptions struct {
	On      bool
	Round   time.Duration // length of each round (whole seconds)
	Rounds  int           // measured rounds of each load
	Clients int           // wrk connections
}

// Register defines the -replays flags on fs.
func (o *ReplayOptions) Register(fs *flag.FlagSet) {
	fs.BoolVar(&o.On, "replays", false, "benchmark: requests answered/s with fresh keys against every key sent twice, in a row and at once, in alternating rounds (docs/loadtest.md)")
	fs.DurationVar(&o.Round, "replay-round", 5*time.Second, "in -replays, the length of each round (whole seconds)")
	fs.IntVar(&o.Rounds, "replay-rounds", 3, "in -replays, measured rounds of each load (medians are compared)")
	fs.IntVar(&o.Clients, "replay-clients", 64, "in -replays, wrk connections")
}

// Validate refuses flags -replays cannot run with; a mode that is off is not judged.
func (o ReplayOptions) Validate() error {
	if o.On && (o.Round < time.Second || o.Rounds < 1 || o.Clients < 2) {
		return errors.New("-replay-round must be at least 1s, -replay-rounds positive and -replay-clients at least 2")
	}
	return nil
}

// The loads, and the least ratio of a replayed load's requests/s to the fresh one's.
const (
	replayFresh      = "fresh"
	replaySequential = "sequential"
	replayConcurrent = "concurrent"
	replayTarget     = 0.9
)

var replayModes = []string{replayFresh, replaySequential, replayConcurrent}

// replayLua orders one unit of $PRODUCT per request. The key is also the customer id (so
// the database can tell whether a key bought twice) and the X-Request-ID, which every replica
// echoes: that is how an answer is matched to its key. $MODE:
//   - fresh: a new key every time;
//   - sequential: a key is queued when its first answer arrives, and the next request of any
//     connection sends it again;
//   - concurrent: a key is queued when it is first sent, and the next request of another
//     connection (this one waits for its answer) sends it again at once. `late` counts the
//     twins that went out after the first's answer came back.
//
// The second answer of a key is judged against the first: both 201 with the same Location
// (`same`), one of them marked Idempotent-Replayed (else `unmarked`); 201s naming two orders
// (`different`); in sequential mode, a replay of a confirmed key answered anything but 201
// (`refused`, by status as `refused-NNN`); a first answer that was not 201 makes the second a
// retry, not a replay (`retry`). Every mode runs the same code per answer, so that the
// counting costs each the same.
var replayLua = wrkScript(`
local mode = os.getenv("MODE") or "fresh"
local product = os.getenv("PRODUCT")
local prefix = os.getenv("KEYPREFIX") or "r"
function start()
  counts = {}
  queue = {}
  head, tail = 1, 0
  first = {}
end
local function count(name)
  counts[name] = (counts[name] or 0) + 1
end
local function order(key)
  local body = string.format('{"customer_id":"%s","items":[{"product_id":%s,"quantity":1}]}', key, product)
  return wrk.format("POST", "/v1/orders", {["Content-Type"] = "application/json", ["Idempotency-Key"] = key, ["X-Request-ID"] = key}, body)
end
function request()
  if head <= tail then
    local key = queue[head]
    queue[head] = nil
    head = head + 1
    if mode == "concurrent" then
      if first[key] then count("late") else count("together") end
    end
    count("second-sent")
    return order(key)
  end
  local key = newKey(prefix)
  if mode == "concurrent" then
    tail = tail + 1
    queue[tail] = key
  end
  return order(key)
end
function response(status, headers, body)
  countStatus(status)
  -- HAProxy hands header names on in lower case.
  local key, loc, replayed = nil, "", false
  for name, value in pairs(headers) do
    local n = string.lower(name)
    if n == "x-request-id" then key = value
    elseif n == "location" then loc = value
    elseif n == "idempotent-replayed" then replayed = (value == "true") end
  end
  if mode == "fresh" or key == nil then return end
  local a = first[key]
  if a == nil then
    first[key] = {status = status, loc = loc, replayed = replayed}
    if mode == "sequential" then
      tail = tail + 1
      queue[tail] = key
    end
    return
  end
  first[key] = nil
  count("pairs")
  if a.status ~= 201 then
    count("retry")
  elseif status ~= 201 then
    if mode == "sequential" then
      count("refused")
      count("refused-" .. status)
    else
      count("confirmed-then-" .. status)
    end
  elseif a.loc ~= loc then
    count("different")
  elseif not (a.replayed or replayed) then
    count("unmarked")
  else
    count("same")
  end
end
function done(summary, latency, requests)
  printStatuses(function(t)
    for name, n in pairs(t:get("counts")) do
      io.write(string.format("wrk-count %s %d\n", name, n))
    end
  end)
end
`)

// replayRound is what one round measured.
type replayRound struct {
	mode  string
	round int // 1-based; 0 is the warm-up
	wrkResult
}

// replayBench runs the -replays benchmark and writes replays.md.
func (h *harness) replayBench(ctx context.Context, o ReplayOptions) error {
	c, err := h.startCluster(ctx, "replays")
	if err != nil {
		return err
	}
	defer c.Close()
	script := filepath.Join(c.Dir, "replay.lua")
	if err := os.WriteFile(script, []byte(replayLua), 0o644); err != nil {
		return err
	}
	product, err := c.CreateProduct(ctx, "REPLAY-"+strconv.FormatInt(time.Now().UnixNano(), 36), throughputStock)
	if err != nil {
		return err
	}
	h.Printf("[replays] %d replicas, %d connections ordering product %d; rounds of %v: %s\n",
		h.Cluster.Replicas, o.Clients, product, o.Round, strings.Join(replayModes, ", "))
	runRound := func(mode string, n int, d time.Duration) (replayRound, error) {
		label := fmt.Sprintf("round%d-%s", n, mode)
		if n == 0 {
			label = "warm-up-" + mode
		}
		job := wrkJob{name: mode, conns: o.Clients, threads: 2, script: script,
			env: []string{"MODE=" + mode, "PRODUCT=" + strconv.FormatInt(product, 10), fmt.Sprintf("KEYPREFIX=%s%d", mode[:1], n)}}
		res, err := runWrkJobs(ctx, h.Wrk, c.Dir, label, c.Front, d, job)
		if err != nil {
			return replayRound{}, err
		}
		return replayRound{mode: mode, round: n, wrkResult: res[0]}, nil
	}
	for _, mode := range replayModes {
		r, err := runRound(mode, 0, floodWarmUp)
		if err != nil {
			return err
		}
		h.Printf("[replays] warm-up, %s: %.0f answers/s\n", mode, r.perSecond(0))
	}
	var rounds []replayRound
	for n := 1; n <= o.Rounds; n++ {
		for _, mode := range replayModes {
			r, err := runRound(mode, n, o.Round)
			if err != nil {
				return err
			}
			h.Printf("[replays] round %d/%d, %-11s %6.0f answers/s (%s)%s\n", n, o.Rounds, mode+":", r.perSecond(0),
				answersOf(r.statuses), describePairs(r.counters))
			rounds = append(rounds, r)
		}
	}
	dbURL := c.DatabaseURL
	twice, err := keysBoughtTwice(ctx, dbURL)
	if err != nil {
		return err
	}
	summary := summariseReplays(rounds)
	report := replayReport(h.Cluster.Replicas, o, product, summary, rounds, twice)
	h.Printf("\n%s\n", report)
	path := filepath.Join(h.Out, "replays.md")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	h.Printf("written to %s\n", path)
	if failed := replayChecks(summary, twice); len(failed) > 0 {
		for _, f := range failed {
			h.Printf("FAIL: %s\n", f)
		}
		return env.ErrFailed
	}
	h.Printf("PASS: the replayed loads kept at least %.1f× of the fresh load's rate, every replay was its order, no key bought twice\n", replayTarget)
	return nil
}

// describePairs sums up what the script said about the pairs of answers, if anything.
func describePairs(c map[string]int) string {
	if c["pairs"] == 0 {
		return ""
	}
	var parts []string
	for _, name := range sortedKeys(c) {
		if name != "pairs" && name != "second-sent" {
			parts = append(parts, fmt.Sprintf("%s %d", name, c[name]))
		}
	}
	return fmt.Sprintf("; %d pairs: %s", c["pairs"], strings.Join(parts, ", "))
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// boughtTwice is what SQL found about keys (customer ids) with more than one order.
type boughtTwice struct {
	keys   int64 // customer ids with two orders or more
	orders int64 // orders of the run
	stored int64 // idempotency records of confirmed orders
}

// keysBoughtTwice counts the run's customers (each one key) with more than one order.
func keysBoughtTwice(ctx context.Context, dbURL string) (boughtTwice, error) {
	var t boughtTwice
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return t, fmt.Errorf("connect to check the orders: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	err = conn.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM (SELECT customer_id FROM orders GROUP BY customer_id HAVING count(*) > 1) d),
		       (SELECT count(*) FROM orders),
		       (SELECT count(*) FROM idempotency_keys WHERE outcome = 'confirmed')`).Scan(&t.keys, &t.orders, &t.stored)
	if err != nil {
		return t, fmt.Errorf("count orders per key: %w", err)
	}
	return t, nil
}

// replayLine is one load's figures over its rounds.
type replayLine struct {
	mode      string
	rate      float64 // median answers/s
	confirmed float64 // median 201/s
	ratio     float64 // rate ÷ the fresh load's rate
	statuses  map[int]int
	counters  map[string]int // summed over the rounds
}

// summariseReplays reduces the rounds to one line per load, fresh first.
func summariseReplays(rounds []replayRound) []replayLine {
	var lines []replayLine
	for _, mode := range replayModes {
		l := replayLine{mode: mode, statuses: map[int]int{}, counters: map[string]int{}}
		var rates, confirmed []float64
		for _, r := range rounds {
			if r.mode != mode {
				continue
			}
			rates = append(rates, r.perSecond(0))
			confirmed = append(confirmed, r.perSecond(201))
			addStatuses(l.statuses, r.statuses, r.failed)
			for k, v := range r.counters {
				l.counters[k] += v
			}
		}
		l.rate, l.confirmed = median(rates), median(confirmed)
		lines = append(lines, l)
	}
	for i := range lines {
		lines[i].ratio = lines[i].rate / lines[0].rate
	}
	return lines
}

// replayChecks returns what failed: a replayed load below the target, a replay answered with
// another order, unmarked or (in a row) refused, and a key that bought twice.
func replayChecks(lines []replayLine, twice boughtTwice) []string {
	var failed []string
	for _, l := range lines {
		if l.mode == replayFresh {
			if !(l.rate > 0) {
				failed = append(failed, "the fresh load got no answers: nothing to compare with")
			}
			continue
		}
		if !(l.ratio >= replayTarget) {
			failed = append(failed, fmt.Sprintf("%s replays: %.0f answers/s, %.2f× the fresh load's (target ≥ %.1f×)", l.mode, l.rate, l.ratio, replayTarget))
		}
		if n := l.counters["different"]; n > 0 {
			failed = append(failed, fmt.Sprintf("%s replays: %d keys were answered with two different orders", l.mode, n))
		}
		if n := l.counters["unmarked"]; n > 0 {
			failed = append(failed, fmt.Sprintf("%s replays: %d keys were answered 201 twice with neither answer marked Idempotent-Replayed", l.mode, n))
		}
		if n := l.counters["refused"]; n > 0 {
			failed = append(failed, fmt.Sprintf("%s replays: %d replays of a confirmed order were not answered with it (%s)", l.mode, n, refusedBy(l.counters)))
		}
	}
	if twice.keys > 0 {
		failed = append(failed, fmt.Sprintf("%d keys bought more than once (orders per customer id, in SQL)", twice.keys))
	}
	if twice.orders != twice.stored {
		failed = append(failed, fmt.Sprintf("%d orders but %d confirmed idempotency records: every order here was keyed", twice.orders, twice.stored))
	}
	return failed
}

func refusedBy(c map[string]int) string {
	var parts []string
	for _, k := range sortedKeys(c) {
		if st, ok := strings.CutPrefix(k, "refused-"); ok {
			parts = append(parts, fmt.Sprintf("%s ×%d", st, c[k]))
		}
	}
	return strings.Join(parts, ", ")
}

// replayReport renders the benchmark as markdown (replays.md).
func replayReport(replicas int, r ReplayOptions, product int64, lines []replayLine, rounds []replayRound, twice boughtTwice) string {
	var b strings.Builder
	fmt.Fprintf(&b, "One run: %d replicas behind HAProxy; wrk, %d connections in a closed loop, orders one unit of product %d (stock %d) per request. "+
		"Rounds of %v, %d of each load, taking turns after a %v warm-up of each; rates are medians over the rounds, ratios are taken between those medians.\n\n",
		replicas, r.Clients, product, throughputStock, r.Round, r.Rounds, floodWarmUp)
	b.WriteString("| load | answers/s | ÷ fresh | target | 201/s | answers | pairs of answers of one key |\n| --- | ---: | ---: | --- | ---: | --- | --- |\n")
	for _, l := range lines {
		target := "baseline"
		if l.mode != replayFresh {
			target = fmt.Sprintf("≥ %.1f×: %s", replayTarget, targetVerdict(l.ratio, replayTarget))
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %.0f | %s | %s |\n", replayAbout(l.mode), l.rate, report.Ratio(l.rate, lines[0].rate), target,
			l.confirmed, answersOf(l.statuses), strings.TrimPrefix(describePairs(l.counters), "; "))
	}
	if c := lines[len(lines)-1].counters; c["together"]+c["late"] > 0 {
		fmt.Fprintf(&b, "\nAt once: %d of %d twins were sent before the first's answer came back.\n", c["together"], c["together"]+c["late"])
	}
	fmt.Fprintf(&b, "\nSQL afterwards: %d orders, %d confirmed idempotency records, %d keys (customer ids) with more than one order.\n",
		twice.orders, twice.stored, twice.keys)
	b.WriteString("\nRounds, in the order they ran:\n\n| round | load | answers/s | 201/s | p50 / p99 |\n| --- | --- | ---: | ---: | --- |\n")
	for _, rd := range rounds {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.0f | %.1f / %.1f ms |\n", rd.round, rd.mode, rd.perSecond(0), rd.perSecond(201), rd.p50, rd.p99)
	}
	b.WriteString("\nPairs: `same` both 201 with one order, one marked Idempotent-Replayed; `retry` the first answer was not 201; " +
		"`refused` a replay in a row of a confirmed order answered anything but 201 (`refused-NNN` by status); `confirmed-then-NNN` at once, the later answer NNN.\n")
	return b.String()
}

func replayAbout(mode string) string {
	switch mode {
	case replaySequential:
		return "every key twice, in a row"
	case replayConcurrent:
		return "every key twice, at once"
	}
	return "fresh keys"
}
