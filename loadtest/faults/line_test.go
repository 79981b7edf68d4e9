package faults

import (
	"strings"
	"testing"
)

// TestJudgeLine: the line drills' checks of the tickets find each way of losing a place, and
// nothing in an opening that kept them.
func TestJudgeLine(t *testing.T) {
	t.Parallel()
	place := func(p int64) *int64 { return &p }
	// Four tickets drawn; after the opening, places 1 and 2 were admitted and used.
	drawn := func() map[int64]ticket {
		return map[int64]ticket{
			10: {ID: 10, Customer: "a", Status: "waiting", Place: place(2)},
			11: {ID: 11, Customer: "b", Status: "waiting", Place: place(1)},
			12: {ID: 12, Customer: "c", Status: "waiting", Place: place(4)},
			13: {ID: 13, Customer: "d", Status: "waiting", Place: place(3)},
		}
	}
	opened := func() map[int64]ticket {
		after := drawn()
		for _, id := range []int64{10, 11} {
			tk := after[id]
			tk.Status, tk.Admitted = "used", true
			after[id] = tk
		}
		return after
	}
	for _, tc := range []struct {
		name   string
		change func(before, after map[int64]ticket)
		joined int
		sold   int64
		want   string // "" for no failure, else a part of the one failure
	}{
		{name: "kept", change: func(before, after map[int64]ticket) {}, joined: 4, sold: 2},
		{name: "lost", change: func(_, after map[int64]ticket) { delete(after, 12) }, joined: 4, sold: 2, want: "1 tickets lost"},
		{name: "moved", change: func(_, after map[int64]ticket) {
			tk := after[12]
			tk.Place = place(5)
			after[12] = tk
		}, joined: 4, sold: 2, want: "changed places: ticket 12: place 4, then 5"},
		{name: "passed over", change: func(_, after map[int64]ticket) {
			tk := after[12]
			tk.Status, tk.Admitted = "admitted", true
			after[12] = tk
		}, joined: 4, sold: 2, want: "place 3 passed over"},
		{name: "not drawn", change: func(before, _ map[int64]ticket) {}, joined: 5, sold: 2, want: "4 tickets drawn, 5 joined"},
		{name: "oversold", change: func(before, after map[int64]ticket) {}, joined: 4, sold: lineStock + 1, want: "oversold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, after := drawn(), opened()
			tc.change(before, after)
			got := judgeLine(before, after, tc.joined, tc.sold)
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("failures %q, want none", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("failures %q, want one with %q", got, tc.want)
			}
		})
	}
}

// TestLineScenariosAreRegistered: -fault names the line's drills, and -fault all runs them.
func TestLineScenariosAreRegistered(t *testing.T) {
	t.Parallel()
	got, err := pickScenarios("kill-replica-opening,pause-redis-opening")
	if err != nil || len(got) != 2 || !got[1].ownRedis {
		t.Fatalf("pickScenarios = %d scenarios, %v; want both, the Redis pause on a Redis of its own", len(got), err)
	}
}
