package report

import (
	"bytes"
	_ "embed"
	"fmt"
	"html/template"
	"math"
	"os"
	"slices"
	"strings"
	"time"
)

// The sale report: one self-contained HTML page per load run, which an operator opens in a
// browser, offline. Its plots are drawn by uPlot (assets/, MIT licence, embedded whole in
// every page: no network), from the figures series.go builds here in Go: outcomes per second,
// the stock remaining, latency percentiles over time, with the sold-out moment, the fault
// windows and the fault's events marked; beside them the run's parameters, its headline rates
// over the phases they describe, and the Postgres verdict.

var (
	//go:embed assets/uPlot.iife.min.js
	uplotJS string
	//go:embed assets/uPlot.min.css
	uplotCSS string
	//go:embed assets/page.js
	pageJS string
	//go:embed assets/page.css
	pageCSS string
	//go:embed assets/page.html.tmpl
	pageHTML string
)

// UPlotVersion is the version of uPlot embedded in the pages.
const UPlotVersion = "1.6.32"

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"secs": func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) },
	"rate": func(p PhaseRates, c Class) string {
		if p.Counts[c] == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f/s", p.Rate(c))
	},
	"count": func(p PhaseRates, c Class) int { return p.Counts[c] },
	"ms": func(v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return fmt.Sprintf("%.1f ms", v)
	},
	"span":  func(a, b time.Duration) string { return fmt.Sprintf("%.2f s", (b - a).Seconds()) },
	"deref": func(d *time.Duration) time.Duration { return *d },
	"lower": strings.ToLower,
}).Parse(pageHTML))

// Field is one named value: a parameter, a figure.
type Field struct{ Name, Value string }

// Check is one of the run's checks, in Postgres or of what the clients were told.
type Check struct {
	Name   string
	OK     bool
	Detail string
}

// Run is one load run as its page shows it. The answers (or, for a run that counted rather
// than timed each request, Sampled) make the outcome and latency plots; the rest is drawn over
// them or shown beside.
type Run struct {
	Title string
	About string // a sentence on what the run did
	// Verdict is the run's verdict as its summary printed it (PASS, FAIL, INVALID, ...).
	Verdict string
	Params  []Field
	Figures []Field // further figures of the run, as its summary printed them
	Checks  []Check // the Postgres verdict (and any check of what the clients were told)
	Answers []Answer
	// Sampled replaces the series built from Answers, for a run whose load generator did not
	// time each request (the replicas' counters, sampled).
	Sampled *Series
	// LatencyOf says what the latency plot measures (where, of which answers).
	LatencyOf string
	// OutcomesOf says which requests the outcome plot counts.
	OutcomesOf string
	Stock      []Line // stock remaining, one line per product
	StockOf    string // where the stock comes from
	// SoldOut is the moment the product sold out (by Postgres's clock), when it did.
	SoldOut *time.Duration
	Faults  []Window // shaded on every plot
	Phases  []Window // a benchmark's loads; none: selling and refusing, from the answers
	Events  []Mark
	End     time.Duration // the end of the load (0: the last answer)
	Notes   []string
	Files   []Field // other files of the run, by what they hold: paths relative to the page
}

// Page is one report page: usually one run, or several side by side (-compare).
type Page struct {
	Title   string
	Command string // the command line that ran it
	Summary []Field
	Runs    []Run
}

// Write renders the page to path.
func Write(path string, p Page) error {
	b, err := Render(p)
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write the report page: %w", err)
	}
	return nil
}

// Render renders the page.
func Render(p Page) ([]byte, error) {
	view := pageView{Page: p, UPlotVersion: UPlotVersion, Generated: time.Now().Format(time.RFC3339),
		UPlotJS: template.JS(uplotJS), PageJS: template.JS(pageJS), CSS: template.CSS(uplotCSS + "\n" + pageCSS)}
	for i, r := range p.Runs {
		view.Runs = append(view.Runs, newRunView(fmt.Sprintf("run%d", i), r))
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, view); err != nil {
		return nil, fmt.Errorf("render the report page: %w", err)
	}
	return b.Bytes(), nil
}

type pageView struct {
	Page
	UPlotVersion, Generated string
	UPlotJS, PageJS         template.JS
	CSS                     template.CSS
	Runs                    []runView
}

type runView struct {
	Run
	ID      string
	Rates   []PhaseRates
	Classes []Class // the classes the run saw, for the rates table
	Data    chartData
}

func newRunView(id string, r Run) runView {
	v := runView{Run: r, ID: id}
	end := r.End
	var s Series
	if r.Sampled != nil {
		s = *r.Sampled
	} else {
		for _, a := range r.Answers {
			end = max(end, a.At)
		}
		s = Bucket(r.Answers, StepFor(end), end)
	}
	phases := Phases(r.Answers, r.Phases, r.SoldOut != nil, r.Faults)
	if r.Sampled != nil {
		v.Rates = RatesFromSeries(s, phases)
	} else {
		v.Rates = Rates(r.Answers, phases)
	}
	for _, c := range Classes {
		if s.Rates[c] != nil {
			v.Classes = append(v.Classes, c)
		}
	}
	v.Data = newChartData(id, r, s)
	return v
}

// chartData is what the page's script draws, as JSON: times in seconds since the run's start,
// NaN as null.
type chartData struct {
	ID        string             `json:"id"`
	Step      float64            `json:"step"`
	T         []float64          `json:"t"`
	Outcomes  []namedSeries      `json:"outcomes"`
	Latency   []namedSeries      `json:"latency"`
	StockT    []float64          `json:"stockT"`
	Stock     []namedSeries      `json:"stock"`
	SoldOut   *float64           `json:"soldOut"`
	Faults    []windowData       `json:"faults"`
	Phases    []windowData       `json:"phases"`
	Events    []markData         `json:"events"`
	Totals    map[string]int     `json:"totals"` // answers per class, for a reader (or test) to check the plot against
	StockLast map[string]float64 `json:"stockLast"`
}

type namedSeries struct {
	Name   string     `json:"name"`
	Color  string     `json:"color"`
	Values []*float64 `json:"values"`
}

type windowData struct {
	Start float64 `json:"start"`
	End   float64 `json:"end"`
	Label string  `json:"label"`
}

type markData struct {
	At    float64 `json:"at"`
	Label string  `json:"label"`
}

// classColors are the outcome plot's colours: green bought, blue accepted, grey sold out,
// amber busy, purple other refusals, red unavailable.
var classColors = map[Class]string{
	Confirmed: "#2a9d4b", Accepted: "#2f6fd6", SoldOut: "#7a7a7a", Busy: "#e39b16", Other: "#8e44ad", Down: "#d62f2f",
}

var stockColors = []string{"#1f4e9e", "#c2570c", "#2a9d4b", "#8e44ad"}

func newChartData(id string, r Run, s Series) chartData {
	d := chartData{ID: id, Step: s.Step.Seconds(), Totals: map[string]int{}, StockLast: map[string]float64{}}
	for _, at := range s.Start {
		d.T = append(d.T, at.Seconds())
	}
	for _, c := range Classes {
		rates := s.Rates[c]
		if rates == nil {
			continue
		}
		d.Outcomes = append(d.Outcomes, namedSeries{Name: string(c), Color: classColors[c], Values: nullable(rates)})
		total := 0.0
		for _, v := range rates {
			total += v * s.Step.Seconds()
		}
		d.Totals[string(c)] = int(math.Round(total))
	}
	if hasValue(s.P50) {
		d.Latency = []namedSeries{
			{Name: "p50", Color: "#2a9d4b", Values: nullable(s.P50)},
			{Name: "p95", Color: "#e39b16", Values: nullable(s.P95)},
			{Name: "p99", Color: "#d62f2f", Values: nullable(s.P99)},
		}
	}
	d.StockT, d.Stock = stockGrid(r.Stock)
	for _, l := range r.Stock {
		if len(l.Points) > 0 {
			d.StockLast[l.Name] = l.Points[len(l.Points)-1].Value
		}
	}
	if r.SoldOut != nil {
		v := r.SoldOut.Seconds()
		d.SoldOut = &v
	}
	for _, w := range r.Faults {
		d.Faults = append(d.Faults, windowData{w.Start.Seconds(), w.End.Seconds(), w.Label})
	}
	for _, w := range r.Phases {
		d.Phases = append(d.Phases, windowData{w.Start.Seconds(), w.End.Seconds(), w.Label})
	}
	for _, e := range r.Events {
		d.Events = append(d.Events, markData{e.At.Seconds(), e.Label})
	}
	return d
}

// stockGrid puts the lines on one time axis, as the plot needs: every moment any line moves,
// each line holding its last value until it moves again (null before its first point).
func stockGrid(lines []Line) ([]float64, []namedSeries) {
	var times []time.Duration
	for _, l := range lines {
		for _, p := range l.Points {
			times = append(times, p.At)
		}
	}
	slices.Sort(times)
	times = slices.Compact(times)
	out := make([]namedSeries, 0, len(lines))
	for i, l := range lines {
		values := make([]*float64, len(times))
		j := 0
		var last *float64
		for k, at := range times {
			for j < len(l.Points) && l.Points[j].At <= at {
				v := l.Points[j].Value
				last = &v
				j++
			}
			values[k] = last
		}
		out = append(out, namedSeries{Name: l.Name, Color: stockColors[i%len(stockColors)], Values: values})
	}
	t := make([]float64, len(times))
	for i, at := range times {
		t[i] = at.Seconds()
	}
	return t, out
}

func nullable(vs []float64) []*float64 {
	out := make([]*float64, len(vs))
	for i, v := range vs {
		if !math.IsNaN(v) {
			out[i] = &vs[i]
		}
	}
	return out
}

func hasValue(vs []float64) bool {
	return slices.ContainsFunc(vs, func(v float64) bool { return !math.IsNaN(v) })
}

// Headline sums the run's phases up in one line, for the text summary: each phase's length
// and the rates of what was answered in it, e.g. "selling 1.98 s: 40.5 confirmed/s, 2.5
// busy/s; refusing (sold out) 7.51 s: 99.8 sold-out/s".
func Headline(r Run) string {
	v := newRunView("", r)
	var parts []string
	for _, p := range v.Rates {
		var rates []string
		for _, c := range Classes {
			if p.Counts[c] > 0 {
				rates = append(rates, fmt.Sprintf("%.1f %s/s", p.Rate(c), c))
			}
		}
		if len(rates) == 0 {
			rates = []string{"no answers"}
		}
		parts = append(parts, fmt.Sprintf("%s %.2f s: %s", p.Name, (p.End-p.Start).Seconds(), strings.Join(rates, ", ")))
	}
	return strings.Join(parts, "; ")
}
