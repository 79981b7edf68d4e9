package faults

import (
	"slices"
	"testing"
	"time"
)

// TestReplayLine: released units join the back of the stock and are timed from their
// expires_at to the order that takes them again; a cancel's units count as sold again but are
// not timed; units in front of them (the initial stock) go first.
func TestReplayLine(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	events := []lineEvent{
		{at: at(0), units: 2},  // a hold takes the two units there are
		{at: at(10), units: 1}, // sold out: nothing to take
		{at: at(3000), units: 1, release: true, expired: true, expires: at(2990)}, // the first hold expires
		{at: at(3040), units: 1},                // the next buyer takes it: 50 ms after expires_at
		{at: at(3100), units: 1, release: true}, // a cancel
		{at: at(3200), units: 2},                // takes the cancelled unit, and there is no other
		{at: at(4000), units: 2, release: true, expired: true, expires: at(3995)},
		{at: at(4100), units: 1}, // one of the two: 105 ms
	}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	r := replayLine(2, events)
	if r.released != 4 || r.resold != 3 || !r.ranOut || r.initialGone != 0 {
		t.Errorf("released %d, resold %d, initial gone after %v; want 4, 3, at once", r.released, r.resold, r.initialGone)
	}
	if want := []float64{0.05, 0.105}; !slices.EqualFunc(r.fromExpiry, want, near) {
		t.Errorf("from expiry = %v, want %v", r.fromExpiry, want)
	}
	if want := []float64{0.04, 0.1, 0.1}; !slices.EqualFunc(r.fromRelease, want, near) {
		t.Errorf("from release = %v, want %v", r.fromRelease, want)
	}
	// With stock in front of them, released units wait their turn.
	r = replayLine(5, []lineEvent{{at: at(0), units: 1}, {at: at(100), units: 1, release: true, expired: true, expires: at(90)},
		{at: at(200), units: 4}, {at: at(300), units: 1}})
	if r.resold != 1 || len(r.fromExpiry) != 1 || !near(r.fromExpiry[0], 0.21) || !r.ranOut || r.initialGone != 200*time.Millisecond {
		t.Errorf("resold %d, from expiry %v, initial gone after %v; want 1, [0.21], 200ms", r.resold, r.fromExpiry, r.initialGone)
	}
}
