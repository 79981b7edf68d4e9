package report

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"math"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// The report page in a real browser: Debian's Chromium, headless, driven over the DevTools
// protocol (chromedp), in a tall window (1400×2400, a tall screenshot's). The page must load
// without an error or a request outside itself; its charts must hold — and have drawn — the
// run's data; its totals must be there, its legends filled without a cursor, and its lower
// half drawn on.
//
// Without Chromium the test skips, and the package then fails at its end, saying so, unless
// STOCKSVC_REQUIRE_BROWSER=0 (or -short) accepts the skip: a skipped browser test must not read
// "ok" in piped output. STOCKSVC_REQUIRE_BROWSER=1 (.ci/run) makes the missing browser a failure
// at once. STOCKSVC_CHROMIUM names the browser when it is not chromium on PATH.
const envRequireBrowser = "STOCKSVC_REQUIRE_BROWSER"

var browserSkipped struct {
	sync.Mutex
	reason string
}

func TestMain(m *testing.M) {
	code := m.Run()
	browserSkipped.Lock()
	reason := browserSkipped.reason
	browserSkipped.Unlock()
	if reason != "" {
		line := fmt.Sprintf("report: the browser test SKIPPED: %s (install Debian's chromium, or set %s=0 to accept the skip)", reason, envRequireBrowser)
		fmt.Println(line)
		if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
			fmt.Fprintln(tty, line)
			tty.Close()
		}
		if v := os.Getenv(envRequireBrowser); code == 0 && v != "0" && !strings.EqualFold(v, "false") && !testing.Short() {
			fmt.Printf("report: FAIL: the browser test skipped, and %s=0 (or -short) does not say that is fine\n", envRequireBrowser)
			code = 1
		}
	}
	os.Exit(code)
}

// chromium finds the browser, or skips (or fails, where it is required).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("STOCKSVC_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	reason := "no chromium on PATH"
	if v := os.Getenv(envRequireBrowser); v == "1" || strings.EqualFold(v, "true") {
		t.Fatalf("%s, and %s=1 requires the browser test", reason, envRequireBrowser)
	}
	browserSkipped.Lock()
	browserSkipped.reason = reason
	browserSkipped.Unlock()
	t.Skip(reason)
	return ""
}

// syntheticBenchmark is a run sampled from counters, with two named loads: 1000 confirmed a
// second for 3 s, then 500 confirmed and 500 busy a second for 2 s.
func syntheticBenchmark() Run {
	s := Series{Step: 500 * time.Millisecond, Rates: map[Class][]float64{}}
	for i := range 10 {
		s.Start = append(s.Start, time.Duration(i)*500*time.Millisecond)
		confirmed, busy := 1000.0, 0.0
		if i >= 6 {
			confirmed, busy = 500, 500
		}
		s.Rates[Confirmed] = append(s.Rates[Confirmed], confirmed)
		s.Rates[Busy] = append(s.Rates[Busy], busy)
		s.P50, s.P95, s.P99 = append(s.P50, 4), append(s.P95, 9), append(s.P99, 15)
	}
	return Run{
		Title: "throughput", Verdict: "PASS", Sampled: &s,
		Phases: []Window{{Start: 0, End: 3 * time.Second, Label: "closed loop"}, {Start: 3 * time.Second, End: 5 * time.Second, Label: "2× the peak"}},
		Params: []Field{{"clients", "128"}},
	}
}

// plotted is what the page's script gave a chart, and what it drew.
type plotted struct {
	Run    string       `json:"run"`
	Kind   string       `json:"kind"`
	Labels []string     `json:"labels"`
	Data   [][]*float64 `json:"data"` // x first
	// Painted counts the plot area's pixels of each series' colour, by label.
	Painted map[string]int `json:"painted"`
	// Fault and Clear are pixels of the plot area's top third, [r, g, b, alpha], or null
	// without a fault: the most common one in the middle of the first fault window, and the
	// faintest halfway from its end to the plot's.
	Fault       []int `json:"fault"`
	Clear       []int `json:"clear"`
	SoldOutDark int   `json:"soldOutDark"` // dark pixels in the sold-out moment's column
	// Legend is what the legend reads, by label (the x series' as "t"), with no cursor on it.
	Legend map[string]string `json:"legend"`
	YMin   float64           `json:"yMin"`   // the y scale's lower end
	Bottom float64           `json:"bottom"` // the chart's bottom edge, in the window
}

// inspect is run in the page: what each chart holds and what it drew.
const inspect = `(() => {
  const colour = (c) => { const d = document.createElement('canvas').getContext('2d'); d.fillStyle = c; const h = d.fillStyle; return [1, 3, 5].map((i) => parseInt(h.slice(i, i + 2), 16)); };
  return window.stocksvcReport.charts.map((c) => {
    const u = c.plot, run = window.STOCKSVC_RUNS.find((r) => r.id === c.run);
    const { left, top, width, height } = u.bbox;
    const img = u.ctx.getImageData(left, top, width, height).data;
    const at = (x, y) => { const i = 4 * (Math.round(y) * width + Math.round(x)); return [img[i], img[i + 1], img[i + 2], img[i + 3]]; };
    const painted = {};
    u.series.slice(1).forEach((s, k) => {
      const [r, g, b] = colour(typeof s.stroke === 'function' ? s.stroke(u, k + 1) : s.stroke);
      let n = 0;
      for (let i = 0; i < img.length; i += 4) {
        if (Math.abs(img[i] - r) + Math.abs(img[i + 1] - g) + Math.abs(img[i + 2] - b) <= 24 && img[i + 3] > 200) n++;
      }
      painted[s.label] = n;
    });
    const x = (t) => u.valToPos(t, 'x', true) - left;
    // Down a column's top third, where the charts' series seldom go: its most common pixel
    // (a shade under a grid line or a dot stays the shade), and its faintest (between the
    // grid lines, nothing at all where nothing is drawn).
    const column = (cx) => { const out = []; for (let y = 2; y < height / 3; y++) out.push(at(cx, y)); return out; };
    const common = (cx) => { const n = {}; let best = null; for (const p of column(cx)) { const k = p.join(); n[k] = (n[k] || 0) + 1; if (!best || n[k] > n[best.join()]) best = p; } return best; };
    const faintest = (cx) => column(cx).reduce((a, p) => (p[3] < a[3] ? p : a));
    const f = run.faults && run.faults[0];
    let soldOutDark = 0;
    if (run.soldOut != null) {
      for (let y = 0; y < height; y++) { const [r, g, b] = at(x(run.soldOut), y); if (r + g + b < 150) soldOutDark++; }
    }
    const legend = {};
    u.root.querySelectorAll('.u-legend .u-series').forEach((row) => {
      const label = row.querySelector('.u-label'), value = row.querySelector('.u-value');
      if (label && value) legend[label.textContent] = value.textContent;
    });
    return {
      run: c.run, kind: c.kind, labels: u.series.slice(1).map((s) => s.label), data: u.data, painted, legend,
      yMin: u.scales.y.min, bottom: u.over.getBoundingClientRect().bottom,
      fault: f ? common(x((f.start + f.end) / 2)) : null,
      clear: f ? faintest(x(f.end + (u.scales.x.max - f.end) / 2)) : null,
      soldOutDark,
    };
  });
})()`

func TestPageInChromium(t *testing.T) {
	browser := chromium(t)
	sale, bench := syntheticSale(), syntheticBenchmark()
	page := Page{Title: "stocksvc load test", Command: "go test", Runs: []Run{sale, bench}}
	path := filepath.Join(t.TempDir(), "report.html")
	if err := Write(path, page); err != nil {
		t.Fatal(err)
	}
	fileURL := (&url.URL{Scheme: "file", Path: path}).String()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(browser), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 2400), chromedp.Flag("disable-background-networking", true))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	var mu sync.Mutex
	var problems, requests []string
	// Every event of the page's tab, from the first: the listener only records (it runs in the
	// loop that reads the tab's messages).
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			what := d.Text
			if d.Exception != nil {
				what += " " + d.Exception.Description
			}
			problems = append(problems, fmt.Sprintf("exception at %d:%d: %s", d.LineNumber+1, d.ColumnNumber+1, what))
		case *runtime.EventConsoleAPICalled:
			switch ev.Type {
			case runtime.ConsoleAPICalledTypeError, runtime.ConsoleAPICalledTypeWarning, runtime.ConsoleAPICalledTypeAssert:
				var args []string
				for _, a := range ev.Args {
					args = append(args, fmt.Sprintf("%s%s", a.Value, a.Description))
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		case *log.EventEntryAdded:
			if ev.Entry.Level == log.EntryLevelError || ev.Entry.Level == log.EntryLevelWarning {
				problems = append(problems, fmt.Sprintf("log %s: %s %s", ev.Entry.Level, ev.Entry.Text, ev.Entry.URL))
			}
		case *network.EventRequestWillBeSent:
			requests = append(requests, ev.Request.URL)
		}
	}
	ctx, cancel := chromedp.NewContext(allocCtx, chromedp.WithListener(listen))
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()
	// Navigate returns once the page has loaded: its scripts, all inline, have run.
	if err := chromedp.Do(ctx, chromedp.Navigate(fileURL)); err != nil {
		t.Fatalf("load %s in %s: %v", fileURL, browser, err)
	}
	charts, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.dataset.charts || ""`))
	if err != nil {
		t.Fatal(err)
	}
	if charts == "" {
		mu.Lock()
		t.Fatalf("the page's script did not finish drawing; the page logged:\n%s", strings.Join(problems, "\n"))
	}
	raw, err := chromedp.Run(ctx, chromedp.Evaluate[[]plotted](inspect))
	if err != nil {
		t.Fatalf("inspect the charts: %v", err)
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
	if err != nil {
		t.Fatal(err)
	}
	totalsTables, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll('#run0 table.totals').length`))
	if err != nil {
		t.Fatal(err)
	}
	shot, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("take a screenshot: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Errorf("the page logged problems:\n%s", strings.Join(problems, "\n"))
	}
	for _, r := range requests {
		if r != fileURL && !strings.HasPrefix(r, "data:") {
			t.Errorf("the page requested %s: it must need nothing outside itself", r)
		}
	}
	// The sale has four charts (its line's panel the fourth); the benchmark has no stock, so two.
	if charts != "6" || len(raw) != 6 {
		t.Fatalf("%s charts drawn (%d inspected), want 6", charts, len(raw))
	}
	for _, want := range []string{"no oversell", "40.5/s", "refusing (sold out)", "during kill-replica", "SIGKILL r2", "closed loop", "2× the peak",
		// The console's totals, and the latency by outcome.
		"Refusals by reason", "orders confirmed", "hot 160, second 10", "Defense-layer catches", "420 orders (balancer: 421 requests)",
		"Latency by outcome", "The line"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page's text lacks %q", want)
		}
	}
	if totalsTables != 4 {
		t.Errorf("%d tables of totals in the sale's section, want 4", totalsTables)
	}

	byKind := map[string]plotted{}
	for _, p := range raw {
		byKind[p.Run+"/"+p.Kind] = p
	}
	// What the charts hold is what the run's answers add up to.
	expect := newChartData("run0", sale, Bucket(sale.Answers, StepFor(10*time.Second), sale.End))
	out := byKind["run0/outcomes"]
	if strings.Join(out.Labels, ",") != "confirmed,sold-out,busy,other,unavailable" {
		t.Errorf("outcome series %v, want every class but accepted, those the run never saw included", out.Labels)
	}
	// A class the run never saw is a series of zeros, not of gaps, drawn above the axis.
	for i, v := range out.Data[4] {
		if v == nil || *v != 0 {
			t.Errorf("the other refusals' series at bucket %d is %v, want 0", i, v)
			break
		}
	}
	totals := map[string]float64{}
	for i, label := range out.Labels {
		for _, v := range out.Data[i+1] {
			if v != nil {
				totals[label] += *v * expect.Step
			}
		}
	}
	for label, want := range map[string]float64{"confirmed": 80, "sold-out": 750, "busy": 5, "unavailable": 3} {
		if math.Abs(totals[label]-want) > 1e-6 {
			t.Errorf("the outcome chart holds %v %s answers, want %v", totals[label], label, want)
		}
	}
	if len(out.Data[0]) != len(expect.T) {
		t.Errorf("the outcome chart has %d buckets, want %d", len(out.Data[0]), len(expect.T))
	}
	stock := byKind["run0/stock"]
	if last := stock.Data[1][len(stock.Data[1])-1]; last == nil || *last != 0 || *stock.Data[1][0] != 160 {
		t.Errorf("the stock chart goes from %v to %v, want 160 to 0", stock.Data[1][0], last)
	}
	if ends := stock.Data[0][len(stock.Data[0])-1]; ends == nil || *ends < 10 {
		t.Errorf("the stock chart ends at %v s, want the run's end (10 s): a sold-out product stays drawn at zero", ends)
	}
	if strings.Join(stock.Labels, ",") != "hot product,second product" {
		t.Errorf("stock series %v, want every product", stock.Labels)
	}
	for _, key := range []string{"run0/outcomes", "run0/stock"} {
		if y := byKind[key].YMin; y >= 0 {
			t.Errorf("%s: the y scale starts at %v, want below 0 so that a zero series is drawn above the axis", key, y)
		}
	}
	lat := byKind["run0/latency"]
	if got := strings.Join(lat.Labels, ","); got != "confirmed p50,confirmed p99,sold-out p50,sold-out p99,others p50,others p99" {
		t.Errorf("latency series %s, want p50 and p99 of each outcome apart", got)
	}
	if maxOf(lat.Data[2]) != 20 || maxOf(lat.Data[4]) != 2 || maxOf(lat.Data[6]) != 500 {
		t.Errorf("p99 peaks: confirmed %v, sold-out %v, others %v ms; want 20, 2 and 500: the outcomes unmixed",
			maxOf(lat.Data[2]), maxOf(lat.Data[4]), maxOf(lat.Data[6]))
	}
	if panel := byKind["run0/panel0"]; strings.Join(panel.Labels, ",") != "length" || maxOf(panel.Data[1]) != 50 {
		t.Errorf("the line's panel holds %v up to %v, want length up to 50", panel.Labels, maxOf(panel.Data[1]))
	}

	// Legends, with no cursor on any chart (a static render), read the run's figures, not "–".
	for _, key := range []string{"run0/outcomes", "run0/stock", "run0/latency", "run0/panel0", "run1/outcomes", "run1/latency"} {
		p := byKind[key]
		if len(p.Legend) != len(p.Labels)+1 {
			t.Errorf("%s: legend %v, want a value for t and each of %v", key, p.Legend, p.Labels)
		}
		for label, v := range p.Legend {
			if v == "" || v == "–" {
				t.Errorf("%s: the legend of %s reads %q", key, label, v)
			}
		}
	}
	for label, want := range map[string]string{"confirmed": "80 in all", "other": "0 in all", "t": "0–10.1 s"} {
		if got := out.Legend[label]; got != want {
			t.Errorf("the outcome chart's legend for %s reads %q, want %q", label, got, want)
		}
	}
	if got := lat.Legend["confirmed p99"]; got != "20.0 ms over the run" {
		t.Errorf("the latency chart's legend for confirmed p99 reads %q, want the run's p99", got)
	}

	// The page's height is used: in a window 2400 px tall the sale's charts share it, so that
	// its last one ends in the lower half, and the screenshot's lower half is drawn on.
	if b := byKind["run0/panel0"].Bottom; b < 1800 {
		t.Errorf("the sale's last chart ends at %v px of 2400: the charts do not use the window's height", b)
	}
	if share := inkShare(t, shot, 0.5); share < 0.02 {
		t.Errorf("%.2f%% of the screenshot's lower half is drawn on, want at least 2%%: a blank lower half", 100*share)
	}
	bench0 := byKind["run1/outcomes"]
	if len(bench0.Data) != 3 || maxOf(bench0.Data[1]) != 1000 {
		t.Errorf("the benchmark's chart holds %v", bench0.Data)
	}

	// And they drew it: each series' colour in its plot area, the fault shaded, the sold-out
	// moment's line across.
	for key, series := range map[string][]string{
		"run0/outcomes": {"confirmed", "sold-out", "busy", "unavailable"}, "run0/stock": {"hot product"},
		"run0/latency": {"confirmed p99", "sold-out p99", "others p99"}, "run0/panel0": {"length"}, "run1/outcomes": {"confirmed", "busy"},
	} {
		for _, s := range series {
			if n := byKind[key].Painted[s]; n < 20 {
				t.Errorf("%s: %d pixels of %s's colour: the series is not drawn", key, n, s)
			}
		}
	}
	for _, key := range []string{"run0/outcomes", "run0/stock", "run0/latency"} {
		p := byKind[key]
		if p.SoldOutDark < 60 {
			t.Errorf("%s: %d dark pixels along the sold-out moment, want its line across the plot", key, p.SoldOutDark)
		}
		if key == "run0/outcomes" {
			continue // filled under its series: no plain background to compare with
		}
		if len(p.Fault) != 4 || p.Fault[3] == 0 || p.Fault[0]-p.Fault[1] < 100 {
			t.Errorf("%s: the fault window's pixel is %v, want a red shade", key, p.Fault)
		}
		if len(p.Clear) != 4 || p.Clear[3] != 0 {
			t.Errorf("%s: the plot outside the fault is %v, want nothing drawn", key, p.Clear)
		}
	}
	raw0, _ := json.Marshal(byKind["run0/outcomes"].Painted)
	t.Logf("pixels by series in the sale's outcome chart: %s", raw0)
}

// inkShare is the share of a PNG's pixels below the fraction from of its height that are not
// (nearly) white.
func inkShare(t *testing.T, shot []byte, from float64) float64 {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(shot))
	if err != nil {
		t.Fatalf("decode the screenshot: %v", err)
	}
	b := img.Bounds()
	top := b.Min.Y + int(from*float64(b.Dy()))
	inked, all := 0, 0
	for y := top; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			all++
			if r>>8 < 235 || g>>8 < 235 || bl>>8 < 235 {
				inked++
			}
		}
	}
	return float64(inked) / float64(max(1, all))
}

func maxOf(vs []*float64) float64 {
	m := math.Inf(-1)
	for _, v := range vs {
		if v != nil {
			m = max(m, *v)
		}
	}
	return m
}
