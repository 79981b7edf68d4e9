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
// the stock remaining of every product, latency percentiles over time by outcome, and any
// further panel the mode adds, with the sold-out moment, the fault windows and the fault's
// events marked; above them the run's totals as its console summary printed them, its
// headline rates over the phases they describe and its latency by outcome; beside them the
// run's parameters and the Postgres verdict.

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
	"lat": func(p PhaseRates, group string) string {
		l, ok := p.Latency[group]
		if !ok || l.N == 0 {
			return "–"
		}
		return fmt.Sprintf("%.1f / %.1f ms", l.P50, l.P99)
	},
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

// Group is a table of a run's figures under a caption: its totals, its counts per replica,
// as the mode's console summary printed them.
type Group struct {
	Name   string
	Fields []Field
}

// Panel is a further chart of a run, drawn under the others on their time axis: named lines of
// points in one unit, each holding its value until its next point. A mode fills it with what
// only it measures — the opening's line in front of the sale, say: its length, the customers
// admitted per second, the waits per group, one panel per unit.
type Panel struct {
	Title string // the chart's caption
	Of    string // where its figures come from
	Unit  string // the y axis's label
	Lines []Line
}

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
	// Totals are the run's totals as its console summary printed them (orders, units,
	// refusals by reason, requests per replica, the defense layers' catches, failed
	// requests), shown above its plots.
	Totals  []Group
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
	// Panels are further charts, under the others (none: none drawn).
	Panels  []Panel
	StockOf string // where the stock comes from
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
	// Groups are the latency groups the run's answers fall in, for the rates table; none for
	// a run sampled from counters.
	Groups []string
	// Latency is the whole run's latency by class, as the sale's console prints it.
	Latency []classLatency
	Data    chartData
}

type classLatency struct {
	Class Class
	Latency
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
		if l := LatencyOf(r.Answers, c); l.N > 0 {
			v.Latency = append(v.Latency, classLatency{Class: c, Latency: l})
		}
	}
	for _, g := range LatencyGroups {
		if _, ok := s.ByOutcome[g]; ok {
			v.Groups = append(v.Groups, g)
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
	Panels    []panelData        `json:"panels"`
	Totals    map[string]int     `json:"totals"` // answers per class, for a reader (or test) to check the plot against
	StockLast map[string]float64 `json:"stockLast"`
	// Span is the x series' legend when no moment is picked: the run's span.
	Span string `json:"span"`
}

type namedSeries struct {
	Name   string     `json:"name"`
	Color  string     `json:"color"`
	Dash   bool       `json:"dash,omitempty"`
	Values []*float64 `json:"values"`
	// Legend is what the series' legend reads when no moment is picked (a static render, or
	// the cursor off the plot): the whole run's figure — its total, its last value, its
	// percentile over the run — instead of uPlot's "–".
	Legend string `json:"legend"`
}

type panelData struct {
	Title  string        `json:"title"`
	Unit   string        `json:"unit"`
	T      []float64     `json:"t"`
	Series []namedSeries `json:"series"`
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

// groupColors are the latency plot's colours, by latency group: its classes' where it has one.
var groupColors = map[string]string{"confirmed": "#2a9d4b", "accepted": "#2f6fd6", "sold-out": "#555555", "others": "#d62f2f"}

func newChartData(id string, r Run, s Series) chartData {
	d := chartData{ID: id, Step: s.Step.Seconds(), Totals: map[string]int{}, StockLast: map[string]float64{}}
	for _, at := range s.Start {
		d.T = append(d.T, at.Seconds())
	}
	end := r.End
	if n := len(s.Start); n > 0 {
		end = max(end, s.Start[n-1]+s.Step)
	}
	d.Span = fmt.Sprintf("0–%.1f s", end.Seconds())
	for _, c := range Classes {
		rates := s.Rates[c]
		if rates == nil {
			continue
		}
		total := 0.0
		for _, v := range rates {
			total += v * s.Step.Seconds()
		}
		d.Totals[string(c)] = int(math.Round(total))
		d.Outcomes = append(d.Outcomes, namedSeries{Name: string(c), Color: classColors[c], Values: nullable(rates),
			Legend: fmt.Sprintf("%d in all", d.Totals[string(c)])})
	}
	for _, g := range LatencyGroups {
		p, ok := s.ByOutcome[g]
		if !ok {
			continue
		}
		whole := LatencyOf(r.Answers, groupClasses(g)...)
		d.Latency = append(d.Latency,
			namedSeries{Name: g + " p50", Color: groupColors[g], Dash: true, Values: nullable(p.P50), Legend: msLegend("%.1f ms over the run", whole.P50)},
			namedSeries{Name: g + " p99", Color: groupColors[g], Values: nullable(p.P99), Legend: msLegend("%.1f ms over the run", whole.P99)})
	}
	if len(d.Latency) == 0 && hasValue(s.P50) {
		// A run sampled from a histogram of every answer: no outcome apart.
		d.Latency = []namedSeries{
			{Name: "p50", Color: "#2a9d4b", Values: nullable(s.P50), Legend: msLegend("peak %.1f ms", peak(s.P50))},
			{Name: "p95", Color: "#e39b16", Values: nullable(s.P95), Legend: msLegend("peak %.1f ms", peak(s.P95))},
			{Name: "p99", Color: "#d62f2f", Values: nullable(s.P99), Legend: msLegend("peak %.1f ms", peak(s.P99))},
		}
	}
	d.StockT, d.Stock = stockGrid(r.Stock, end)
	for _, l := range r.Stock {
		if len(l.Points) > 0 {
			d.StockLast[l.Name] = l.Points[len(l.Points)-1].Value
		}
	}
	for _, p := range r.Panels {
		t, lines := stockGrid(p.Lines, end)
		d.Panels = append(d.Panels, panelData{Title: p.Title, Unit: p.Unit, T: t, Series: lines})
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
// and end, each line holding its last value until it moves again (null before its first
// point) — to the end, so that a product sold out at 3 s is drawn at zero until the run's
// end, not left to vanish there.
func stockGrid(lines []Line, end time.Duration) ([]float64, []namedSeries) {
	var times []time.Duration
	for _, l := range lines {
		for _, p := range l.Points {
			times = append(times, p.At)
		}
	}
	if len(times) > 0 {
		times = append(times, end)
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
		legend := "–"
		if last != nil {
			legend = fmt.Sprintf("%g at the end", *last)
		}
		out = append(out, namedSeries{Name: l.Name, Color: stockColors[i%len(stockColors)], Values: values, Legend: legend})
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

func msLegend(format string, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

func peak(vs []float64) float64 {
	m := math.NaN()
	for _, v := range vs {
		if !math.IsNaN(v) && (math.IsNaN(m) || v > m) {
			m = v
		}
	}
	return m
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
