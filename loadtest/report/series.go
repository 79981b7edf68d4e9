package report

import (
	"math"
	"net/http"
	"slices"
	"time"
)

// The sale report's figures (page.go draws them): the answers a run's clients got, bucketed
// into outcomes per second and latency percentiles over time, the stock remaining, and the
// headline rates over the phases they describe.

// Class is what an answer said, as the report groups them.
type Class string

const (
	Confirmed Class = "confirmed" // 201: bought
	// Accepted is a 202: an order accepted for later (Prefer: respond-async).
	Accepted Class = "accepted"
	SoldOut  Class = "sold-out"    // 409 sold-out (or an asynchronous order rejected for want of stock)
	Busy     Class = "busy"        // 429: nothing happened, try again
	Other    Class = "other"       // any other refusal: a sale rule, a key in flight, a 4xx
	Down     Class = "unavailable" // 5xx from a replica or the balancer, or no answer at all
)

// Classes lists the classes in the order the report shows them.
var Classes = []Class{Confirmed, Accepted, SoldOut, Busy, Other, Down}

// ClassOf classes an HTTP answer to an order: status 0 is no answer; code is the problem's
// code when the answer was one ("" when the client did not read it: a 409 is then taken for
// sold-out, the only conflict a plain order meets).
func ClassOf(status int, code string) Class {
	switch {
	case status == http.StatusCreated:
		return Confirmed
	case status == http.StatusAccepted:
		return Accepted
	case status == http.StatusConflict && (code == "" || code == "sold-out"):
		return SoldOut
	case status == http.StatusTooManyRequests:
		return Busy
	case status == 0 || status >= 500:
		return Down
	}
	return Other
}

// Answer is one answer a client got, or one decision read from Postgres.
type Answer struct {
	At      time.Duration // when it came, since the run's start
	Latency time.Duration // from the request to the answer; negative: none (a decision)
	Class   Class
}

// Point is a value at a moment of the run.
type Point struct {
	At    time.Duration
	Value float64
}

// Line is a named series of points, such as a product's stock over time.
type Line struct {
	Name   string
	Points []Point
}

// Window is a span of the run: a fault in force, or a phase of a benchmark.
type Window struct {
	Start, End time.Duration
	Label      string
}

// Mark is a moment of the run: something a fault did, the sold-out moment.
type Mark struct {
	At    time.Duration
	Label string
}

// Series is a run's answers in buckets of Step: each class's answers per second, and the
// latency percentiles of the answers in each bucket (NaN where a bucket has none), of every
// answer (P50, P95, P99: all a run sampled from a histogram has) and of each outcome apart
// (ByOutcome, by LatencyGroup: a run whose answers were each timed).
type Series struct {
	Step          time.Duration
	Start         []time.Duration // each bucket's start
	Rates         map[Class][]float64
	P50, P95, P99 []float64 // ms
	ByOutcome     map[string]Percentiles
}

// Percentiles are latency percentiles over time, in ms, one per bucket.
type Percentiles struct{ P50, P95, P99 []float64 }

// LatencyGroups are the outcomes whose latencies the report keeps apart, in the order it
// shows them: a sale's confirmed answers wait for the lock and Postgres, its sold-out answers
// mostly for neither, so that a percentile over both describes no request anyone made.
var LatencyGroups = []string{"confirmed", "accepted", "sold-out", "others"}

// LatencyGroup is the latency group of a class: its own for confirmed, accepted and
// sold-out, "others" for the rest (busy, other refusals, unavailable), which are few.
func LatencyGroup(c Class) string {
	switch c {
	case Confirmed, Accepted, SoldOut:
		return string(c)
	}
	return "others"
}

// drawnAlways are the classes a run of answers draws even when it saw none of them: a line
// at zero says "none", where a missing line leaves the reader to guess. Accepted answers come
// only from asynchronous orders, so a synchronous run leaves them out.
var drawnAlways = []Class{Confirmed, SoldOut, Busy, Other, Down}

// bucketSteps are the bucket widths the report picks from: the narrowest that keeps a run
// within maxBuckets.
var bucketSteps = []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 250 * time.Millisecond,
	500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}

const maxBuckets = 200

// StepFor is the bucket width for a run of span: 100 ms for a drill of a few seconds, a
// second for a few minutes.
func StepFor(span time.Duration) time.Duration {
	for _, s := range bucketSteps {
		if span <= s*maxBuckets {
			return s
		}
	}
	return bucketSteps[len(bucketSteps)-1]
}

// Bucket puts answers in buckets of step from 0 to end (at least to the last answer).
func Bucket(answers []Answer, step, end time.Duration) Series {
	for _, a := range answers {
		end = max(end, a.At)
	}
	n := int(end/step) + 1
	s := Series{Step: step, Rates: map[Class][]float64{}, Start: make([]time.Duration, n)}
	for i := range n {
		s.Start[i] = time.Duration(i) * step
	}
	counts := map[Class][]int{}
	for _, c := range Classes {
		counts[c] = make([]int, n)
	}
	latencies := make([][]float64, n)
	byGroup := map[string][][]float64{}
	for _, a := range answers {
		if a.At < 0 {
			continue
		}
		i := int(a.At / step)
		if counts[a.Class] == nil {
			counts[a.Class] = make([]int, n)
		}
		counts[a.Class][i]++
		if a.Latency >= 0 {
			latencies[i] = append(latencies[i], ms(a.Latency))
			g := LatencyGroup(a.Class)
			if byGroup[g] == nil {
				byGroup[g] = make([][]float64, n)
			}
			byGroup[g][i] = append(byGroup[g][i], ms(a.Latency))
		}
	}
	for c, cs := range counts {
		if len(answers) == 0 || (!slices.Contains(drawnAlways, c) && !slices.ContainsFunc(cs, func(n int) bool { return n > 0 })) {
			continue // an optional class this run never saw is not drawn
		}
		rates := make([]float64, n)
		for i, k := range cs {
			rates[i] = float64(k) / step.Seconds()
		}
		s.Rates[c] = rates
	}
	s.P50, s.P95, s.P99 = make([]float64, n), make([]float64, n), make([]float64, n)
	for i, ls := range latencies {
		s.P50[i], s.P95[i], s.P99[i] = Percentile(ls, 50), Percentile(ls, 95), Percentile(ls, 99)
	}
	s.ByOutcome = map[string]Percentiles{}
	for g, buckets := range byGroup {
		p := Percentiles{P50: make([]float64, n), P95: make([]float64, n), P99: make([]float64, n)}
		for i, ls := range buckets {
			p.P50[i], p.P95[i], p.P99[i] = Percentile(ls, 50), Percentile(ls, 95), Percentile(ls, 99)
		}
		s.ByOutcome[g] = p
	}
	return s
}

// Latency is the latency of some answers over a whole run or phase: how many had one, and
// their nearest-rank percentiles in ms (NaN for none).
type Latency struct {
	N             int
	P50, P95, P99 float64
}

// groupClasses are the classes of a latency group.
func groupClasses(group string) []Class {
	var out []Class
	for _, c := range Classes {
		if LatencyGroup(c) == group {
			out = append(out, c)
		}
	}
	return out
}

// LatencyOf is the latency of the answers of the classes given. It is the one computation
// behind every latency figure a run prints or shows for its answers — the sale's console
// summary and its page's table take it from the same answers — so that the two cannot
// disagree as they did when the console printed k6's interpolated percentiles over every
// 201 and the page nearest-rank ones over the hot product's answers of every class
// (issue #34, item 6).
func LatencyOf(answers []Answer, classes ...Class) Latency {
	var ls []float64
	for _, a := range answers {
		if a.Latency >= 0 && slices.Contains(classes, a.Class) {
			ls = append(ls, ms(a.Latency))
		}
	}
	return Latency{N: len(ls), P50: Percentile(ls, 50), P95: Percentile(ls, 95), P99: Percentile(ls, 99)}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// PhaseRates is what the answers of one phase of a run add up to.
type PhaseRates struct {
	Name       string
	Start, End time.Duration
	Counts     map[Class]int
	// Latency is the latency of the phase's answers by LatencyGroup; nil for a run sampled
	// from counters.
	Latency map[string]Latency
}

// Rate is class's answers per second over the phase (0 for an empty phase).
func (p PhaseRates) Rate(c Class) float64 {
	if p.End <= p.Start {
		return 0
	}
	return float64(p.Counts[c]) / (p.End - p.Start).Seconds()
}

// Phases are the spans a run's headline rates are taken over, each over the phase it
// describes rather than the whole run:
//
//   - explicit, when the run names its phases (a benchmark's loads);
//   - else selling, from the first confirmed answer to the last; and refusing, from the last
//     confirmed answer to the last answer, when the product sold out (otherwise the load
//     ended with stock left, and there was no refusing phase);
//   - and one per fault window, during it.
func Phases(answers []Answer, explicit []Window, soldOut bool, faults []Window) []Window {
	if len(explicit) > 0 {
		return append(slices.Clone(explicit), faultPhases(faults)...)
	}
	var out []Window
	firstSale, lastSale, last := time.Duration(-1), time.Duration(-1), time.Duration(0)
	for _, a := range answers {
		last = max(last, a.At)
		if a.Class != Confirmed {
			continue
		}
		if firstSale < 0 || a.At < firstSale {
			firstSale = a.At
		}
		lastSale = max(lastSale, a.At)
	}
	if firstSale >= 0 {
		out = append(out, Window{Start: firstSale, End: lastSale, Label: "selling"})
		if soldOut && last > lastSale {
			// From just after the last sale: that answer is the selling phase's.
			out = append(out, Window{Start: lastSale + 1, End: last, Label: "refusing (sold out)"})
		}
	}
	return append(out, faultPhases(faults)...)
}

func faultPhases(faults []Window) []Window {
	var out []Window
	for _, f := range faults {
		out = append(out, Window{Start: f.Start, End: f.End, Label: "during " + f.Label})
	}
	return out
}

// Rates adds up the answers of each phase. An answer on a boundary counts in both phases
// that share it.
func Rates(answers []Answer, phases []Window) []PhaseRates {
	out := make([]PhaseRates, 0, len(phases))
	for _, w := range phases {
		p := PhaseRates{Name: w.Label, Start: w.Start, End: w.End, Counts: map[Class]int{}, Latency: map[string]Latency{}}
		var in []Answer
		for _, a := range answers {
			if a.At < w.Start || a.At > w.End {
				continue
			}
			p.Counts[a.Class]++
			in = append(in, a)
		}
		for _, c := range Classes {
			g := LatencyGroup(c)
			if _, done := p.Latency[g]; !done {
				p.Latency[g] = LatencyOf(in, groupClasses(g)...)
			}
		}
		out = append(out, p)
	}
	return out
}

// RatesFromSeries adds up bucketed answers over each phase, for a run sampled from counters
// rather than answered request by request: a bucket counts in a phase when it starts within
// it, so the phases' bounds are as coarse as the buckets. Latency percentiles are not
// recoverable from buckets, and are NaN.
func RatesFromSeries(s Series, phases []Window) []PhaseRates {
	out := make([]PhaseRates, 0, len(phases))
	for _, w := range phases {
		p := PhaseRates{Name: w.Label, Start: w.Start, End: w.End, Counts: map[Class]int{}}
		for i, at := range s.Start {
			if at < w.Start || at >= w.End {
				continue
			}
			for c, rates := range s.Rates {
				p.Counts[c] += int(math.Round(rates[i] * s.Step.Seconds()))
			}
		}
		out = append(out, p)
	}
	return out
}

// HistogramQuantile estimates the q-quantile (0..1) of the observations a Prometheus histogram
// gained over an interval — counts[i] of them at or under bounds[i], cumulative, the last
// bound +Inf — by linear interpolation within the bucket it falls in, as Prometheus's
// histogram_quantile does. NaN when there were none.
func HistogramQuantile(q float64, bounds, counts []float64) float64 {
	if len(counts) == 0 || counts[len(counts)-1] <= 0 {
		return math.NaN()
	}
	total := counts[len(counts)-1]
	rank := q * total
	for i, c := range counts {
		if c < rank {
			continue
		}
		if math.IsInf(bounds[i], 1) {
			if i == 0 {
				return math.NaN()
			}
			return bounds[i-1] // beyond the last finite bound: the bound is all that is known
		}
		lo, below := 0.0, 0.0
		if i > 0 {
			lo, below = bounds[i-1], counts[i-1]
		}
		if c == below {
			return bounds[i]
		}
		return lo + (bounds[i]-lo)*(rank-below)/(c-below)
	}
	return bounds[len(bounds)-1]
}
