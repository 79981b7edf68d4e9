package report

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// TestDrillRun: a drill's page shows every order attempt by its answer (and no other kind of
// operation), the scenario's failed checks among the checks, why the run is invalid among the
// notes, and the checker's verdicts.
func TestDrillRun(t *testing.T) {
	t.Parallel()
	ops := []*model.Op{
		{In: model.Input{Kind: model.KindOrder}, Attempts: []model.Attempt{
			{Start: time.Second, End: 1100 * time.Millisecond, Status: 503},
			{Start: 1200 * time.Millisecond, End: 1300 * time.Millisecond, Status: 201},
		}},
		{In: model.Input{Kind: model.KindRead}, Attempts: []model.Attempt{{Start: 0, End: time.Millisecond, Status: 200}}},
	}
	r := DrillRun(Drill{
		Scenario: "kill-replica", About: "SIGKILL a replica", Run: 2, Seed: 9, Verdict: "FAIL",
		Params:  DrillParams{Replicas: 3, Victim: "r2", Buyers: 4},
		Checks:  []Check{{Name: "ledger", OK: true}},
		Failed:  []string{"the victim answered after its death"},
		Invalid: []string{"the fault came after the sell-out"},
		History: ops,
		Writes:  model.CheckResult{Name: "writes", Result: porcupine.Illegal},
		Reads:   model.CheckResult{Name: "reads", Result: porcupine.Ok},
	})
	if r.Title != "kill-replica, run 2" || r.About != "SIGKILL a replica." {
		t.Errorf("title %q, about %q", r.Title, r.About)
	}
	if len(r.Answers) != 2 || r.Answers[0].Class != ClassOf(503, "") || r.Answers[1].Latency != 100*time.Millisecond {
		t.Errorf("answers %+v, want the order's two attempts", r.Answers)
	}
	if len(r.Checks) != 2 || r.Checks[1].OK || r.Checks[1].Detail != "the victim answered after its death" {
		t.Errorf("checks %+v, want the ledger and the scenario's failed check", r.Checks)
	}
	if len(r.Notes) != 1 || !strings.HasPrefix(r.Notes[0], "INVALID: ") {
		t.Errorf("notes %v, want the invalid run's reason", r.Notes)
	}
	figures := map[string]string{}
	for _, f := range r.Figures {
		figures[f.Name] = f.Value
	}
	if !strings.HasPrefix(figures["linearizable, writes"], "NOT LINEARIZABLE") || !strings.HasPrefix(figures["linearizable, reads"], "linearizable") {
		t.Errorf("figures %v", figures)
	}
	if p := r.Params[len(r.Params)-1]; p != (Field{Name: "closed-loop buyers", Value: "4"}) {
		t.Errorf("last param %v, want the closed-loop buyers", p)
	}
}
