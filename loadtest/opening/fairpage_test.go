package opening

import (
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// valueAt is line l's value at at (the point at or before it).
func valueAt(t *testing.T, l report.Line, at time.Duration) float64 {
	t.Helper()
	v, found := 0.0, false
	for _, p := range l.Points {
		if p.At <= at {
			v, found = p.Value, true
		}
	}
	if !found {
		t.Fatalf("%s has no point at or before %v", l.Name, at)
	}
	return v
}

// TestFairPageShowsTheLine: a round with the line is drawn with its line's length and
// admissions from its tickets, its stock from its sales, who heard when, the opening and the
// sold-out moment marked, and its checks; a round without the line has no line panels.
func TestFairPageShowsTheLine(t *testing.T) {
	t.Parallel()
	origin := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return origin.Add(d) }
	opens := at(2 * time.Second)
	r := roundResult{
		mix: mix{Polite: 2, Scripts: 1, Units: 2}, seed: 7, lined: true,
		politeWins: 1, scriptWins: 1, firstSale: 100 * time.Millisecond, soldOut: 300 * time.Millisecond,
		origin: origin, opens: opens,
		orders: []report.Answer{
			{At: 2100 * time.Millisecond, Latency: 5 * time.Millisecond, Class: report.Confirmed},
			{At: 2300 * time.Millisecond, Latency: 8 * time.Millisecond, Class: report.Confirmed},
			{At: 2400 * time.Millisecond, Latency: 4 * time.Millisecond, Class: report.SoldOut},
		},
		heard: map[string][]time.Duration{"p": {2100 * time.Millisecond, 2400 * time.Millisecond}, "s": {2300 * time.Millisecond}},
		tables: roundTables{
			initial: 2,
			sales:   []sale{{at: at(2100 * time.Millisecond), units: 1}, {at: at(2300 * time.Millisecond), units: 1}},
			tickets: []ticketRow{
				{joined: at(500 * time.Millisecond), admitted: at(2000 * time.Millisecond), ended: at(2150 * time.Millisecond)},
				{joined: at(600 * time.Millisecond), admitted: at(2000 * time.Millisecond), ended: at(2350 * time.Millisecond)},
				{joined: at(700 * time.Millisecond)},
			},
		},
		invariants: []verdict.Invariant{{Name: "nothing oversold on the lined product", OK: true, Detail: "2 of 2"}},
	}
	without := r
	without.lined, without.tables.tickets = false, nil
	page := fairPage("go run -C loadtest . -opening -opening-fair", []roundResult{r, without})
	if len(page.Runs) != 2 {
		t.Fatalf("%d runs, want one per round", len(page.Runs))
	}
	run := page.Runs[0]
	panels := map[string]report.Panel{}
	for _, p := range run.Panels {
		panels[p.Title] = p
	}
	line, ok := panels["The line"]
	if !ok || len(line.Lines) != 2 {
		t.Fatalf("panels %v: want the line's length and admissions running", run.Panels)
	}
	for _, c := range []struct {
		at               time.Duration
		waiting, running float64
	}{
		{400 * time.Millisecond, 0, 0},
		{1 * time.Second, 3, 0},
		{2020 * time.Millisecond, 1, 2},
		{2200 * time.Millisecond, 1, 1},
		{2400 * time.Millisecond, 1, 0},
	} {
		if w, a := valueAt(t, line.Lines[0], c.at), valueAt(t, line.Lines[1], c.at); w != c.waiting || a != c.running {
			t.Errorf("at %v: %v in line, %v admissions running; want %v and %v", c.at, w, a, c.waiting, c.running)
		}
	}
	if v := valueAt(t, panels["Admissions"].Lines[0], 2*time.Second); v != 20 {
		t.Errorf("admissions a second at the opening = %v, want 2 in a tenth of a second: 20", v)
	}
	heard := panels["Who knows their outcome"]
	if p, s := valueAt(t, heard.Lines[0], 2200*time.Millisecond), valueAt(t, heard.Lines[1], 2200*time.Millisecond); p != 1 || s != 0 {
		t.Errorf("at 2.2 s: %v polite and %v scripts know, want 1 and 0", p, s)
	}
	if s := run.Stock[0]; valueAt(t, s, time.Second) != 2 || valueAt(t, s, 2200*time.Millisecond) != 1 || valueAt(t, s, 2400*time.Millisecond) != 0 {
		t.Errorf("stock = %v, want 2 → 1 at 2.1 s → 0 at 2.3 s", s.Points)
	}
	if run.SoldOut == nil || *run.SoldOut != 2300*time.Millisecond || run.Events[0].At != 2*time.Second {
		t.Errorf("sold out %v, events %v: want 2.3 s and the opening at 2 s", run.SoldOut, run.Events)
	}
	if run.Verdict != "PASS" || len(run.Checks) != 1 {
		t.Errorf("verdict %q, checks %v", run.Verdict, run.Checks)
	}
	for _, p := range page.Runs[1].Panels {
		if p.Title == "The line" || p.Title == "Admissions" {
			t.Errorf("the round without the line has the panel %q", p.Title)
		}
	}
	html, err := report.Render(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"The line", "Who knows their outcome", "with the line", "without the line"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the page does not mention %q", want)
		}
	}
}
