package stock

import (
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// The sale rules in allocation: decided from the snapshot alone, the window on its clock.

func ruled(stock int64, rules SaleRules, bought map[string]int64, now time.Time) Snapshot {
	s := levels(map[int64]int64{1: stock})
	l := s.Levels[1]
	l.Sale, l.Bought = rules, bought
	s.Levels[1], s.Now = l, now
	return s
}

// ruleSummary is summary with the rules' refusals named.
func ruleSummary(a allocation) []string {
	out := summary(a)
	for i, o := range a.outcomes {
		var over *CustomerLimitError
		var held *HoldLimitError
		switch {
		case errors.As(o.err, &over):
			out[i] = "limit " + itoa(over.Bought)
		case errors.As(o.err, &held):
			out[i] = "hold " + itoa(held.Held)
		case errors.Is(o.err, ErrSaleNotOpen):
			out[i] = "not open"
		case errors.Is(o.err, ErrSaleEnded):
			out[i] = "ended"
		}
	}
	return out
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestAllocateWindow(t *testing.T) {
	opens := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	ends := opens.Add(time.Hour)
	rules := SaleRules{StartsAt: &opens, EndsAt: &ends}
	for _, tc := range []struct {
		name string
		now  time.Time
		want string
	}{
		{"a microsecond early", opens.Add(-time.Microsecond), "not open"},
		{"at the opening", opens, "ok"},
		{"a microsecond before the end", ends.Add(-time.Microsecond), "ok"},
		{"at the end", ends, "ended"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := allocate(ruled(5, rules, nil, tc.now), []*ticket{keyed(tk("a", item(1, 1)), "k")}, nil, true)
			if got := ruleSummary(a); got[0] != tc.want {
				t.Errorf("outcome %q, want %q", got[0], tc.want)
			}
			if tc.want != "ok" && (len(a.write.Records) != 0 || len(a.write.Decrements) != 0) {
				t.Errorf("a refusal by the window wrote %+v; it must store nothing", a.write)
			}
		})
	}
	// Without the checks (Postgres alone), the window is not looked at.
	a := allocate(ruled(5, rules, nil, opens.Add(-time.Hour)), []*ticket{tk("a", item(1, 1))}, nil, false)
	if got := ruleSummary(a); got[0] != "ok" {
		t.Errorf("without the checks: %q, want ok (the statement refuses it)", got[0])
	}
}

func TestAllocateLimitPerCustomer(t *testing.T) {
	rules := SaleRules{MaxPerCustomer: 2}
	// ann has 1 already; in one batch she asks for 1, 1, then bob for 2, ann 1 again, bob 1.
	snap := ruled(10, rules, map[string]int64{"ann": 1}, time.Now())
	tickets := []*ticket{tk("ann", item(1, 1)), tk("ann", item(1, 1)), tk("bob", item(1, 2)), tk("ann", item(1, 1)), tk("bob", item(1, 1))}
	a := allocate(snap, tickets, nil, true)
	want := []string{"ok", "limit 2", "ok", "limit 2", "limit 2"}
	if diff := cmp.Diff(want, ruleSummary(a)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if a.write.SkipStored {
		t.Errorf("a write that refused for the limit may skip stored orders: the refusals could become untrue")
	}
	if got := a.units[1]; got["ann"] != 2 || got["bob"] != 2 {
		t.Errorf("units after the batch %v, want ann 2 and bob 2", got)
	}
	// A product without a limit counts nothing.
	a = allocate(levels(map[int64]int64{1: 10}), []*ticket{tk("ann", item(1, 5)), tk("ann", item(1, 5))}, nil, true)
	if diff := cmp.Diff([]string{"ok", "ok"}, ruleSummary(a)); diff != "" || len(a.units) != 0 {
		t.Errorf("without a limit (-want +got):\n%s; units %v", diff, a.units)
	}
}

// TestAllocateHoldLimit: the service's own check of the cap on what a customer holds (issue
// #31), from the read and through the batch, before anything is written.
func TestAllocateHoldLimit(t *testing.T) {
	rules := SaleRules{HoldFor: time.Hour, MaxHeldPerCustomer: 3}
	// ann holds 1 already; in one batch she asks for 2, then 1, bob for 3 then 1, ann 1 again.
	snap := ruled(10, rules, nil, time.Now())
	l := snap.Levels[1]
	l.Held = map[string]int64{"ann": 1}
	snap.Levels[1] = l
	tickets := []*ticket{tk("ann", item(1, 2)), keyed(tk("ann", item(1, 1)), "k"), tk("bob", item(1, 3)), tk("bob", item(1, 1)), tk("ann", item(1, 1))}
	a := allocate(snap, tickets, nil, true)
	want := []string{"ok", "hold 3", "ok", "hold 3", "hold 3"}
	if diff := cmp.Diff(want, ruleSummary(a)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if len(a.write.Records) != 0 || a.write.SkipStored {
		t.Errorf("write %+v: a refusal by the cap must store nothing, and a write that refused may not skip stored orders", a.write)
	}
	if len(a.write.Decrements) != 1 || a.write.Decrements[0].Quantity != 5 {
		t.Errorf("decrements %+v, want the 5 units held", a.write.Decrements)
	}
	// Without a hold, nothing is held: the cap does not apply.
	free := ruled(10, SaleRules{MaxHeldPerCustomer: 3}, nil, time.Now())
	a = allocate(free, []*ticket{tk("ann", item(1, 5)), tk("ann", item(1, 5))}, nil, true)
	if diff := cmp.Diff([]string{"ok", "ok"}, ruleSummary(a)); diff != "" {
		t.Errorf("without a hold (-want +got):\n%s", diff)
	}
	// A cart with a held product is held whole: each product's units count against its own cap.
	cart := Snapshot{Now: time.Now(), Levels: map[int64]Level{
		1: {Stock: 10, Sale: SaleRules{MaxHeldPerCustomer: 2}},
		2: {Stock: 10, Sale: SaleRules{HoldFor: time.Minute, MaxHeldPerCustomer: 5}},
	}}
	a = allocate(cart, []*ticket{tk("ann", item(1, 2), item(2, 1)), tk("ann", item(1, 1), item(2, 1))}, nil, true)
	var over *HoldLimitError
	if a.outcomes[0].err != nil || !errors.As(a.outcomes[1].err, &over) || over.ProductID != 1 || over.Held != 2 || over.Limit != 2 {
		t.Errorf("cart outcomes %v, want the first held and the second refused for product 1's cap (2 held of 2)", ruleSummary(a))
	}
	// Without the checks (Postgres alone), the cap is not looked at.
	a = allocate(snap, []*ticket{tk("ann", item(1, 9))}, nil, false)
	if got := ruleSummary(a); got[0] != "ok" {
		t.Errorf("without the checks: %q, want ok (the statement refuses it)", got[0])
	}
}

func TestLevelNoteCarriesTheWindow(t *testing.T) {
	opens := time.UnixMicro(time.Now().UnixMicro())
	l := Level{Stock: 4, Version: 9, Sale: SaleRules{StartsAt: &opens}}
	got, ok := parseLevelNote(levelNote(l))
	if !ok || got.Stock != 4 || got.Version != 9 || got.Sale.StartsAt == nil || !got.Sale.StartsAt.Equal(opens) || got.Sale.EndsAt != nil {
		t.Errorf("note round trip: %+v, %v; want %+v", got, ok, l)
	}
	// A note from a replica before the window (two fields) still reads.
	if got, ok := parseLevelNote("4 9"); !ok || got.Sale.Windowed() {
		t.Errorf("an old note: %+v, %v", got, ok)
	}
}
