package report

import (
	"testing"
	"time"
)

// TestAsyncRun: each client's answer and each decision is an answer of its class, a stock
// that reached zero marks the sell-out, and a fault window is named by the verb of the event
// that began it.
func TestAsyncRun(t *testing.T) {
	t.Parallel()
	r := AsyncRun(AsyncSale{
		Replicas: 3, Rate: 50, Stock: 10, Duration: 5 * time.Second, KillAfter: 2 * time.Second, Verdict: "PASS",
		Orders: []AsyncOrder{
			{Status: "accepted", Sent: time.Second, Answered: 5 * time.Millisecond},
			{Status: "refused", Sent: 2 * time.Second, Answered: time.Millisecond},
			{Status: "failed: EOF", Sent: 3 * time.Second, Answered: time.Second},
		},
		Decisions: []AsyncDecision{{At: 1500 * time.Millisecond, Status: "confirmed"}, {At: 1600 * time.Millisecond, Status: "rejected"}},
		Product:   Line{Points: []Point{{At: 0, Value: 10}, {At: 4 * time.Second, Value: 0}}},
		Faults:    []Window{{Start: 2 * time.Second, End: 3 * time.Second}},
		Events:    []Mark{{At: 2 * time.Second, Label: "SIGKILL r2"}},
	})
	want := []Class{Accepted, SoldOut, Down, Confirmed, SoldOut}
	if len(r.Answers) != len(want) {
		t.Fatalf("%d answers, want %d", len(r.Answers), len(want))
	}
	for i, c := range want {
		if r.Answers[i].Class != c {
			t.Errorf("answer %d: %s, want %s", i, r.Answers[i].Class, c)
		}
	}
	if r.Answers[0].At != time.Second+5*time.Millisecond || r.Answers[3].Latency != -1 {
		t.Errorf("answers %+v: a client's at its answer, a decision without a latency", r.Answers)
	}
	if r.SoldOut == nil || *r.SoldOut != 4*time.Second {
		t.Errorf("sold out at %v, want 4s", r.SoldOut)
	}
	if len(r.Faults) != 1 || r.Faults[0].Label != "SIGKILL" {
		t.Errorf("faults %+v, want one named SIGKILL", r.Faults)
	}
	if p := r.Params[len(r.Params)-1]; p != (Field{Name: "kill after", Value: "2s"}) {
		t.Errorf("last param %v, want the kill", p)
	}
}
