package opening

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// summary builds a k6 summary with counts and one threshold's verdict.
func summary(counts map[string]float64, thresholdOK bool) k6Summary {
	var s k6Summary
	s.Metrics = map[string]struct {
		Values     map[string]float64 `json:"values"`
		Thresholds map[string]struct {
			OK bool `json:"ok"`
		} `json:"thresholds"`
	}{}
	for name, n := range counts {
		m := s.Metrics[name]
		m.Values = map[string]float64{"count": n}
		s.Metrics[name] = m
	}
	m := s.Metrics["early_confirmations"]
	m.Thresholds = map[string]struct {
		OK bool `json:"ok"`
	}{"count==0": {OK: thresholdOK}}
	s.Metrics["early_confirmations"] = m
	return s
}

// TestReport: the ratio is the two phases' rates, the series and the sold-out moment come from
// Postgres's figures, and the verdict fails on a failed threshold, a broken invariant or k6's
// own failure, not on a signal.
func TestReport(t *testing.T) {
	t.Parallel()
	fig := figures{firstSale: 6 * time.Millisecond, perSecond: [5]int64{400, 100}, perTenth: [10]int64{300, 100}, sold: 500, stock: 500,
		soldOutAt: 1200 * time.Millisecond, customers: 300, atTheLimit: 200}
	held := []verdict.Invariant{{Name: "no customer above the limit", OK: true}}
	r := result{o: Options{Stock: 500, Limit: 2, Customers: 3000, CrowdVUs: 150, Closed: 64, Crowd: 5 * time.Second, Greedy: 5}, replicas: 3,
		fig: fig, summary: summary(map[string]float64{"refusal_answers": 10000, "healthz_answers": 20000}, true), invariants: held}
	text := r.String()
	for _, want := range []string{"| 5000/s", "| 10000/s", "| refusal rate / healthz rate | 0.50× |", "| 6ms |", "| 400, 100, 0, 0, 0 |",
		"| 300, 100, 0, 0, 0, 0, 0, 0, 0, 0 |", "| +1.2s |", "| 300; 200 |", "verdict: PASS"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	cases := []struct {
		name   string
		change func(*result)
		want   bool
	}{
		{"all held", func(*result) {}, false},
		{"a threshold failed", func(r *result) { r.summary = summary(nil, false) }, true},
		{"an invariant broke", func(r *result) { r.invariants = []verdict.Invariant{{Name: "x", OK: false}} }, true},
		{"k6 failed", func(r *result) { r.k6Err = errors.New("exit status 1") }, true},
		{"stopped by a signal", func(r *result) { r.k6Err, r.stopped = errors.New("exit status 105"), true }, false},
	}
	for _, c := range cases {
		r2 := r
		c.change(&r2)
		if got := r2.failed(); got != c.want {
			t.Errorf("%s: failed = %v, want %v", c.name, got, c.want)
		}
	}
	lined := r
	lined.o.Line = 100
	lined.summary = summary(map[string]float64{"refusal_answers": 10000, "healthz_answers": 20000, "line_joins": 600, "line_admissions": 300}, true)
	if text := lined.String(); !strings.Contains(text, "Through a line admitting 100 buyers at once: 600 joins, 300 admissions.") ||
		!strings.Contains(text, "| not-admitted (no pass) refusals before the opening") {
		t.Errorf("an opening through a line:\n%s", text)
	}
	if unsold := (result{fig: figures{firstSale: -1, sold: 10, stock: 500}}).String(); !strings.Contains(unsold, "no order confirmed") ||
		!strings.Contains(unsold, "not sold out (10 of 500)") {
		t.Errorf("a sale that sold nothing at first, and did not sell out:\n%s", unsold)
	}
}
