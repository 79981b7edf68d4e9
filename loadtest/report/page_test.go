package report

import (
	"bytes"
	"math"
	"strings"
	"testing"
	"time"
)

// syntheticSale is a sale the tests know everything about: 10 s of load; for 2 s (0.5–2.5 s) 40
// confirmed answers a second, each taking 20 ms, then the product is sold out and 100
// sold-out answers a second of 2 ms follow; 5 busy answers at 1.0 s; a fault from 4 s to 6 s
// during which 3 answers are unavailable (no answer, 500 ms each). A second product sells 10
// units; the console's totals and a panel of the line in front of the sale come with it.
func syntheticSale() Run {
	var answers []Answer
	for i := range 80 {
		answers = append(answers, Answer{At: 500*time.Millisecond + time.Duration(i)*25*time.Millisecond, Latency: 20 * time.Millisecond, Class: Confirmed})
	}
	for i := range 750 {
		answers = append(answers, Answer{At: 2500*time.Millisecond + time.Duration(i)*10*time.Millisecond, Latency: 2 * time.Millisecond, Class: SoldOut})
	}
	for range 5 {
		answers = append(answers, Answer{At: time.Second, Latency: 300 * time.Millisecond, Class: Busy})
	}
	for i := range 3 {
		answers = append(answers, Answer{At: 4500*time.Millisecond + time.Duration(i)*500*time.Millisecond, Latency: 500 * time.Millisecond, Class: Down})
	}
	stock := Line{Name: "hot product", Points: []Point{{0, 160}}}
	for i := range 80 {
		stock.Points = append(stock.Points, Point{500*time.Millisecond + time.Duration(i)*25*time.Millisecond, float64(160 - 2*(i+1))})
	}
	second := Line{Name: "second product", Points: []Point{{0, 40}, {time.Second, 35}, {2 * time.Second, 30}}}
	line := Line{Name: "length", Points: []Point{{0, 50}, {time.Second, 30}, {2 * time.Second, 0}}}
	soldOut := 2475 * time.Millisecond
	return Run{
		Totals: []Group{
			{Name: "Totals", Fields: []Field{{"orders confirmed", "80"}, {"units sold", "hot 160, second 10"}}},
			{Name: "Refusals by reason", Fields: []Field{{"sold-out", "750"}, {"busy", "5"}}},
			{Name: "Per replica", Fields: []Field{{"r1", "420 orders (balancer: 421 requests)"}}},
			{Name: "Defense-layer catches", Fields: []Field{{"guard", "7"}}},
		},
		Panels: []Panel{{Title: "The line", Of: "the synthetic opening", Unit: "customers", Lines: []Line{line}}},
		Title:  "flash sale", About: "a synthetic sale for the tests", Verdict: "PASS",
		Params:  []Field{{"replicas", "3"}, {"stock", "160"}},
		Checks:  []Check{{Name: "no oversell", OK: true, Detail: "0 units"}},
		Answers: answers, Stock: []Line{stock, second}, SoldOut: &soldOut,
		Faults: []Window{{Start: 4 * time.Second, End: 6 * time.Second, Label: "kill-replica"}},
		Events: []Mark{{At: 4 * time.Second, Label: "SIGKILL r2"}, {At: 6 * time.Second, Label: "r2 ready again"}},
		End:    10 * time.Second,
		Files:  []Field{{"k6 summary", "summary.txt"}},
	}
}

func TestClassOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status int
		code   string
		want   Class
	}{
		{201, "", Confirmed}, {202, "", Accepted}, {409, "", SoldOut}, {409, "sold-out", SoldOut},
		{409, "sale-ended", Other}, {409, "idempotency-key-in-flight", Other}, {429, "", Busy},
		{0, "", Down}, {502, "", Down}, {503, "unavailable", Down}, {400, "invalid-body", Other},
	}
	for _, c := range cases {
		if got := ClassOf(c.status, c.code); got != c.want {
			t.Errorf("ClassOf(%d, %q) = %s, want %s", c.status, c.code, got, c.want)
		}
	}
}

func TestStepFor(t *testing.T) {
	t.Parallel()
	for span, want := range map[time.Duration]time.Duration{
		5 * time.Second: 100 * time.Millisecond, 20 * time.Second: 100 * time.Millisecond, 30 * time.Second: 200 * time.Millisecond,
		90 * time.Second: 500 * time.Millisecond, 3 * time.Minute: time.Second, 3 * time.Hour: time.Minute,
	} {
		if got := StepFor(span); got != want {
			t.Errorf("StepFor(%v) = %v, want %v", span, got, want)
		}
	}
}

func TestBucket(t *testing.T) {
	t.Parallel()
	r := syntheticSale()
	s := Bucket(r.Answers, 500*time.Millisecond, r.End)
	if len(s.Start) != 21 || s.Start[20] != 10*time.Second {
		t.Fatalf("%d buckets ending at %v, want 21 from 0 to 10 s", len(s.Start), s.Start[len(s.Start)-1])
	}
	// Each full bucket of the selling phase holds 20 confirmed answers: 40/s.
	for i := 1; i <= 4; i++ {
		if got := s.Rates[Confirmed][i]; got != 40 {
			t.Errorf("confirmed/s in bucket %d = %v, want 40", i, got)
		}
	}
	if got := s.Rates[SoldOut][10]; got != 100 {
		t.Errorf("sold-out/s at 5 s = %v, want 100", got)
	}
	if got := s.Rates[Busy][2]; got != 10 {
		t.Errorf("busy/s at 1 s = %v, want 10 (5 answers in half a second)", got)
	}
	if _, ok := s.Rates[Accepted]; ok {
		t.Errorf("a class the run never saw has a series")
	}
	total := map[Class]float64{}
	for c, rates := range s.Rates {
		for _, v := range rates {
			total[c] += v * s.Step.Seconds()
		}
	}
	if total[Confirmed] != 80 || total[SoldOut] != 750 || total[Busy] != 5 || total[Down] != 3 {
		t.Errorf("totals %v, want every answer once", total)
	}
	// Bucket 2 (1.0–1.5 s): 20 confirmed of 20 ms and 5 busy of 300 ms.
	if s.P50[2] != 20 || s.P99[2] != 300 {
		t.Errorf("bucket 2 p50/p99 = %v/%v, want 20/300", s.P50[2], s.P99[2])
	}
	if !math.IsNaN(s.P50[0]) {
		t.Errorf("an empty bucket has a latency: %v", s.P50[0])
	}
}

func TestPhasesAndRates(t *testing.T) {
	t.Parallel()
	r := syntheticSale()
	phases := Phases(r.Answers, nil, true, r.Faults)
	want := []Window{
		{Start: 500 * time.Millisecond, End: 2475 * time.Millisecond, Label: "selling"},
		{Start: 2475*time.Millisecond + 1, End: 9990 * time.Millisecond, Label: "refusing (sold out)"},
		{Start: 4 * time.Second, End: 6 * time.Second, Label: "during kill-replica"},
	}
	if len(phases) != len(want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	for i := range want {
		if phases[i] != want[i] {
			t.Errorf("phase %d = %v, want %v", i, phases[i], want[i])
		}
	}
	rates := Rates(r.Answers, phases)
	// The headline: 80 sales over the 1.975 s they took, not over the 10 s run.
	if got := rates[0].Rate(Confirmed); math.Abs(got-80/1.975) > 1e-9 {
		t.Errorf("selling: %v confirmed/s, want %v", got, 80/1.975)
	}
	if got := rates[1].Rate(SoldOut); math.Abs(got-750/(7.515-1e-9)) > 1e-6 {
		t.Errorf("refusing: %v sold-out/s, want %v", got, 750/7.515)
	}
	if rates[1].Counts[Confirmed] != 0 {
		t.Errorf("refusing counts %d confirmed answers, want none: the last sale is the selling phase's", rates[1].Counts[Confirmed])
	}
	// Latency by outcome, never mixed: the selling phase's 20 ms sales apart from its 300 ms
	// busy answers.
	if l := rates[0].Latency["confirmed"]; l.N != 80 || l.P50 != 20 || l.P99 != 20 {
		t.Errorf("selling: confirmed latency %+v, want 80 answers, p50 and p99 20 ms", l)
	}
	if l := rates[0].Latency["others"]; l.N != 5 || l.P99 != 300 {
		t.Errorf("selling: other answers' latency %+v, want the 5 busy answers' 300 ms", l)
	}
	if l := rates[1].Latency["sold-out"]; l.N != 750 || l.P99 != 2 {
		t.Errorf("refusing: sold-out latency %+v, want 750 answers of 2 ms", l)
	}
	if rates[2].Counts[Down] != 3 || rates[2].Counts[SoldOut] != 201 {
		t.Errorf("during the fault: %v, want 3 unavailable and 201 sold-out", rates[2].Counts)
	}
	// Not sold out: no refusing phase, whatever came after the last sale.
	if got := Phases(r.Answers, nil, false, nil); len(got) != 1 || got[0].Label != "selling" {
		t.Errorf("phases of a sale with stock left = %v, want selling only", got)
	}
	explicit := []Window{{Start: 0, End: 3 * time.Second, Label: "closed loop"}}
	if got := Phases(r.Answers, explicit, true, nil); len(got) != 1 || got[0] != explicit[0] {
		t.Errorf("explicit phases = %v, want %v", got, explicit)
	}
}

func TestRatesFromSeries(t *testing.T) {
	t.Parallel()
	s := Series{Step: time.Second, Start: []time.Duration{0, time.Second, 2 * time.Second, 3 * time.Second},
		Rates: map[Class][]float64{Confirmed: {100, 200, 300, 400}, Busy: {0, 0, 10, 10}}}
	got := RatesFromSeries(s, []Window{{Start: time.Second, End: 3 * time.Second, Label: "loaded"}})
	if got[0].Counts[Confirmed] != 500 || got[0].Counts[Busy] != 10 || got[0].Rate(Confirmed) != 250 {
		t.Errorf("rates over 1–3 s = %+v, want 500 confirmed (250/s), 10 busy", got[0])
	}
}

func TestHistogramQuantile(t *testing.T) {
	t.Parallel()
	bounds := []float64{1, 2, 4, math.Inf(1)}
	// 10 observations ≤ 1, 10 in (1, 2], none above.
	counts := []float64{10, 20, 20, 20}
	if got := HistogramQuantile(0.5, bounds, counts); got != 1 {
		t.Errorf("median = %v, want 1", got)
	}
	if got := HistogramQuantile(0.75, bounds, counts); got != 1.5 {
		t.Errorf("p75 = %v, want 1.5 (halfway through the second bucket)", got)
	}
	if got := HistogramQuantile(0.99, bounds, []float64{0, 0, 0, 5}); got != 4 {
		t.Errorf("p99 beyond the last bound = %v, want the last finite bound", got)
	}
	if got := HistogramQuantile(0.5, bounds, []float64{0, 0, 0, 0}); !math.IsNaN(got) {
		t.Errorf("quantile of nothing = %v, want NaN", got)
	}
}

func TestStockGrid(t *testing.T) {
	t.Parallel()
	ts, lines := stockGrid([]Line{
		{Name: "a", Points: []Point{{0, 10}, {2 * time.Second, 8}}},
		{Name: "b", Points: []Point{{time.Second, 4}}},
	}, 5*time.Second)
	if len(ts) != 4 || ts[1] != 1 || ts[3] != 5 {
		t.Fatalf("times %v, want 0, 1, 2 and the end, 5", ts)
	}
	a, b := lines[0].Values, lines[1].Values
	if *a[0] != 10 || *a[1] != 10 || *a[2] != 8 || *a[3] != 8 || b[0] != nil || *b[1] != 4 || *b[3] != 4 {
		t.Errorf("a holds its value until it moves and to the end, b is null before its first point")
	}
	if lines[0].Legend != "8 at the end" {
		t.Errorf("a's legend = %q, want its value at the end", lines[0].Legend)
	}
}

// TestRender: the page is one file, with everything it needs inside — uPlot, the script, the
// data — and the parameters, rates and verdict as text.
func TestRender(t *testing.T) {
	t.Parallel()
	b, err := Render(Page{Title: "stocksvc load test", Command: "go run -C loadtest .", Runs: []Run{syntheticSale()}})
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	for _, want := range []string{"uPlot 1.6.32 (MIT licence)", `id="run0-outcomes"`, `id="run0-stock"`, `id="run0-latency"`,
		"no oversell", "selling", "refusing (sold out)", "40.5/s", "during kill-replica", "SIGKILL r2", `"soldOut":2.475`, `<a href="summary.txt">`,
		"Refusals by reason", "hot 160, second 10", "Latency by outcome", `id="run0-panel0"`, "The line", `"legend":"80 in all"`} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, banned := range []string{"<script src", "<link", `src="http`, `href="http`, "@import"} {
		if strings.Contains(page, banned) {
			t.Errorf("page refers outside itself: %q", banned)
		}
	}
	if bytes.Count(b, []byte("<script>")) != 3 {
		t.Errorf("want three inline scripts: uPlot, the data, the page's")
	}
}

func TestHeadline(t *testing.T) {
	t.Parallel()
	got := Headline(syntheticSale())
	want := "selling 1.98 s: 40.5 confirmed/s, 2.5 busy/s; refusing (sold out) 7.51 s: 99.8 sold-out/s, 0.4 unavailable/s; " +
		"during kill-replica 2.00 s: 100.5 sold-out/s, 1.5 unavailable/s"
	if got != want {
		t.Errorf("Headline =\n%s\nwant\n%s", got, want)
	}
}
