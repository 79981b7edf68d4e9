package linepg_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linepg"
	"github.com/stocksvc/stocksvc/internal/line/linetest"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The line.Store contract, run against every store: Postgres, and the in-memory one that the
// line's unit tests and the HTTP tests over fakes use. A store that passes decides nothing
// itself (the plan does), gives places as Rank says, and writes an advance all or nothing.

// fixture is a store under test, with what a case needs around it.
type fixture struct {
	store line.Store
	// product makes a product the line can be of.
	product func(t *testing.T) int64
	// runOut makes ticket id's admission run out by the store's clock.
	runOut func(t *testing.T, id int64)
}

func fixtures() map[string]func(t *testing.T) fixture {
	return map[string]func(t *testing.T) fixture{
		"postgres": func(t *testing.T) fixture {
			pool := testenv.Pool(t)
			products := stockpg.New(pool)
			n := 0
			return fixture{
				store: linepg.New(pool),
				product: func(t *testing.T) int64 {
					n++
					p, err := products.CreateProduct(context.Background(), stock.NewProduct{SKU: fmt.Sprint("p", n), Name: "p", Stock: 10,
						Sale: stock.SaleRules{Line: stock.LineRules{Admit: 10, AdmissionFor: time.Minute}}})
					if err != nil {
						t.Fatal(err)
					}
					return p.ID
				},
				runOut: func(t *testing.T, id int64) {
					if _, err := pool.Exec(context.Background(), `UPDATE line_tickets SET admitted_until = now() - interval '1 second' WHERE id = $1`, id); err != nil {
						t.Fatal(err)
					}
				},
			}
		},
		"memory": func(*testing.T) fixture {
			m := linetest.NewMemStore()
			n := int64(0)
			return fixture{
				store:   m,
				product: func(*testing.T) int64 { n++; return n },
				runOut: func(_ *testing.T, id int64) {
					m.Update(id, func(t *line.Ticket) { t.AdmittedUntil = time.Now().Add(-time.Second) })
				},
			}
		},
	}
}

func TestStoreContract(t *testing.T) {
	t.Parallel()
	for name, open := range fixtures() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range storeCases {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, open(t))
				})
			}
		})
	}
}

type storeCase struct {
	name string
	run  func(t *testing.T, f fixture)
}

func join(t *testing.T, s line.Store, product int64, customer string) (line.Ticket, bool, bool) {
	t.Helper()
	tk, created, drawn, err := s.Join(context.Background(), product, customer)
	if err != nil {
		t.Fatalf("join %s: %v", customer, err)
	}
	return tk, created, drawn
}

// planned is a plan that does what p says and records the standing it was given.
func planned(p line.Plan, saw *line.Standing) func(context.Context, line.Standing) (line.Plan, error) {
	return func(_ context.Context, st line.Standing) (line.Plan, error) {
		if saw != nil {
			*saw = st
		}
		return p, nil
	}
}

func advance(t *testing.T, s line.Store, product int64, used []line.Use, p line.Plan) (line.Advanced, line.Standing) {
	t.Helper()
	var st line.Standing
	a, err := s.Advance(context.Background(), product, used, planned(p, &st))
	if err != nil {
		t.Fatalf("advance: %v", err)
	}
	return a, st
}

func read(t *testing.T, s line.Store, product, since int64) line.Snapshot {
	t.Helper()
	snap, err := s.Line(context.Background(), product, since, true)
	if err != nil {
		t.Fatalf("read the line: %v", err)
	}
	return snap
}

func ticket(t *testing.T, s line.Store, product, id int64) line.Ticket {
	t.Helper()
	tk, err := s.Ticket(context.Background(), product, id)
	if err != nil {
		t.Fatalf("read ticket %d: %v", id, err)
	}
	return tk
}

var seed = []byte("0123456789abcdef0123456789abcdef")

var storeCases = []storeCase{
	{"a join is one open ticket per customer, and a line is made by its first", func(t *testing.T, f fixture) {
		id := f.product(t)
		if snap := read(t, f.store, id, 0); snap.Exists {
			t.Fatalf("a line nobody joined exists: %+v", snap)
		}
		a, created, drawn := join(t, f.store, id, "ann")
		if !created || drawn || a.Status != line.TicketWaiting || a.Place != 0 || a.CustomerID != "ann" || a.ProductID != id {
			t.Fatalf("first join = %+v created %v drawn %v", a, created, drawn)
		}
		again, created, _ := join(t, f.store, id, "ann")
		if created || again.ID != a.ID {
			t.Errorf("joining again = %+v (created %v), want ticket %d", again, created, a.ID)
		}
		b, created, _ := join(t, f.store, id, "bob")
		if !created || b.ID == a.ID {
			t.Errorf("another customer's join = %+v (created %v)", b, created)
		}
		snap := read(t, f.store, id, 0)
		if !snap.Exists || snap.Version != 0 || snap.Unplaced != 2 || len(snap.Tickets) != 0 || snap.StockKnown || !snap.DrawnAt.IsZero() {
			t.Errorf("the line after two joins = %+v, want version 0, two waiting without a place, nothing changed", snap)
		}
	}},
	{"the draw places every ticket joined before it as Rank says, and records the seed", func(t *testing.T, f fixture) {
		id := f.product(t)
		var ids []int64
		for i := range 20 {
			tk, _, _ := join(t, f.store, id, fmt.Sprint("c", i))
			ids = append(ids, tk.ID)
		}
		if a, st := advance(t, f.store, id, nil, line.Plan{Stock: 5}); st.Drawn || a.Drawn != 0 || !a.Changed {
			t.Fatalf("an advance without a seed = %+v from %+v: it must not draw (it records the stock)", a, st)
		}
		a, _ := advance(t, f.store, id, nil, line.Plan{Seed: seed, Stock: 5})
		if a.Drawn != 20 || !a.Changed || a.Version != 2 {
			t.Fatalf("the draw = %+v, want 20 drawn at version 2", a)
		}
		want := line.Rank(seed, ids)
		d, err := f.store.Drawn(context.Background(), id)
		if err != nil || string(d.Seed) != string(seed) || d.DrawnAt.IsZero() || len(d.Tickets) != 20 {
			t.Fatalf("Drawn = %+v, %v", d, err)
		}
		for i, dt := range d.Tickets {
			if dt.Place != int64(i+1) || dt.Ticket != want[i] {
				t.Fatalf("place %d is ticket %d, want %d (Rank)", dt.Place, dt.Ticket, want[i])
			}
		}
		// A second seed draws nothing: a line is drawn once.
		if a, st := advance(t, f.store, id, nil, line.Plan{Seed: []byte("another seed, never used........"), Stock: 5}); !st.Drawn || a.Drawn != 0 || a.Changed {
			t.Errorf("a second draw = %+v from %+v", a, st)
		}
		if d2, _ := f.store.Drawn(context.Background(), id); string(d2.Seed) != string(seed) {
			t.Error("the seed changed")
		}
		snap := read(t, f.store, id, 0)
		if snap.Drawn != 20 || snap.Placed != 20 || snap.Unplaced != 0 || len(snap.Tickets) != 20 || !snap.StockKnown || snap.Stock != 5 {
			t.Errorf("the line after the draw = %+v", snap)
		}
	}},
	{"a late arrival is placed after the last place by the next advance, in arrival order", func(t *testing.T, f fixture) {
		id := f.product(t)
		join(t, f.store, id, "early")
		advance(t, f.store, id, nil, line.Plan{Seed: seed})
		late1, _, drawn := join(t, f.store, id, "late1")
		late2, _, _ := join(t, f.store, id, "late2")
		if !drawn || late1.Place != 0 {
			t.Fatalf("a join after the draw = %+v, drawn %v", late1, drawn)
		}
		a, _ := advance(t, f.store, id, nil, line.Plan{})
		if a.Placed != 2 || !a.Changed {
			t.Fatalf("advance = %+v, want 2 placed", a)
		}
		if p1, p2 := ticket(t, f.store, id, late1.ID).Place, ticket(t, f.store, id, late2.ID).Place; p1 != 2 || p2 != 3 {
			t.Errorf("late arrivals at %d and %d, want 2 and 3", p1, p2)
		}
		if snap := read(t, f.store, id, 0); snap.Drawn != 1 || snap.Placed != 3 {
			t.Errorf("line = %+v, want 1 drawn, 3 placed", snap)
		}
		if d, _ := f.store.Drawn(context.Background(), id); len(d.Tickets) != 1 {
			t.Errorf("the draw lists %d tickets, want the one joined before it", len(d.Tickets))
		}
	}},
	{"admissions go in place order, count as active, run out and are used once", func(t *testing.T, f fixture) {
		id := f.product(t)
		var ids []int64
		for i := range 5 {
			tk, _, _ := join(t, f.store, id, fmt.Sprint("c", i))
			ids = append(ids, tk.ID)
		}
		order := line.Rank(seed, ids)
		a, _ := advance(t, f.store, id, nil, line.Plan{Seed: seed, Admit: 2, AdmissionFor: time.Minute, Stock: 9})
		if a.Admitted != 2 {
			t.Fatalf("advance = %+v, want 2 admitted", a)
		}
		for i, tid := range order {
			tk := ticket(t, f.store, id, tid)
			admitted := tk.Status == line.TicketAdmitted
			if admitted != (i < 2) || admitted && time.Until(tk.AdmittedUntil) < 30*time.Second {
				t.Errorf("place %d: %+v", i+1, tk)
			}
		}
		if _, st := advance(t, f.store, id, nil, line.Plan{Stock: 9}); st.Active != 2 {
			t.Errorf("active = %d, want 2", st.Active)
		}
		// The first is used (with its order's key), the second runs out; a waiting ticket
		// named as used stays waiting.
		f.runOut(t, order[1])
		a, st := advance(t, f.store, id, []line.Use{{Ticket: order[0], Key: "k1"}, {Ticket: order[2], Key: "k2"}}, line.Plan{Admit: 2, AdmissionFor: time.Minute, Stock: 9})
		if a.Used != 1 || a.Expired != 1 || st.Active != 0 || a.Admitted != 2 {
			t.Fatalf("advance = %+v from %+v: want 1 used, 1 expired, 0 active, then 2 admitted", a, st)
		}
		if u := ticket(t, f.store, id, order[0]); u.Status != line.TicketUsed || u.UsedKey != "k1" {
			t.Errorf("the used ticket = %+v", u)
		}
		if e := ticket(t, f.store, id, order[1]); e.Status != line.TicketExpired {
			t.Errorf("the ticket that ran out = %+v", e)
		}
		for _, tid := range order[2:4] {
			if tk := ticket(t, f.store, id, tid); tk.Status != line.TicketAdmitted {
				t.Errorf("the next in line = %+v, want admitted", tk)
			}
		}
		if snap := read(t, f.store, id, 0); snap.Admissions != 4 {
			t.Errorf("admissions in all = %d, want 4", snap.Admissions)
		}
		// Used again: nothing changes.
		if a, _ := advance(t, f.store, id, []line.Use{{Ticket: order[0], Key: "other"}}, line.Plan{Stock: 9}); a.Used != 0 || a.Changed {
			t.Errorf("using a used ticket again = %+v", a)
		}
		if u := ticket(t, f.store, id, order[0]); u.UsedKey != "k1" {
			t.Errorf("the used ticket's key became %q", u.UsedKey)
		}
	}},
	{"an advance that changes nothing moves nothing, and reads since a version see what changed after it", func(t *testing.T, f fixture) {
		id := f.product(t)
		a1, _, _ := join(t, f.store, id, "a")
		b1, _, _ := join(t, f.store, id, "b")
		first, _ := advance(t, f.store, id, nil, line.Plan{Seed: seed, Stock: 3})
		if again, _ := advance(t, f.store, id, nil, line.Plan{Stock: 3}); again.Changed || again.Version != first.Version {
			t.Errorf("an advance with nothing to do = %+v after %+v", again, first)
		}
		if again, _ := advance(t, f.store, id, nil, line.Plan{Stock: 2}); !again.Changed || again.Version != first.Version+1 {
			t.Errorf("an advance that saw the stock move = %+v", again)
		}
		versions, err := f.store.Versions(context.Background(), []int64{id, id + 1000})
		if err != nil || len(versions) != 1 || versions[id] != first.Version+1 {
			t.Errorf("versions = %v, %v", versions, err)
		}
		snap := read(t, f.store, id, first.Version)
		if len(snap.Tickets) != 0 || snap.Stock != 2 {
			t.Errorf("since %d: %+v, want no tickets and stock 2", first.Version, snap)
		}
		left, err := f.store.Leave(context.Background(), id, b1.ID)
		if err != nil || left.Status != line.TicketLeft {
			t.Fatalf("leave = %+v, %v", left, err)
		}
		snap = read(t, f.store, id, first.Version+1)
		if len(snap.Tickets) != 1 || snap.Tickets[0].ID != b1.ID || snap.Version != first.Version+2 {
			t.Errorf("after the leave: %+v, want the left ticket at version %d", snap, first.Version+2)
		}
		_ = a1
	}},
	{"a leave ends an open ticket once, and frees its customer to join anew at the back", func(t *testing.T, f fixture) {
		id := f.product(t)
		tk, _, _ := join(t, f.store, id, "lea")
		left, err := f.store.Leave(context.Background(), id, tk.ID)
		if err != nil || left.Status != line.TicketLeft || left.Changed == 0 {
			t.Fatalf("leave = %+v, %v", left, err)
		}
		v := read(t, f.store, id, 0).Version
		again, err := f.store.Leave(context.Background(), id, tk.ID)
		if err != nil || again.Status != line.TicketLeft || read(t, f.store, id, 0).Version != v {
			t.Errorf("leaving again = %+v, %v; want it as it is, the version kept", again, err)
		}
		if _, err := f.store.Leave(context.Background(), id, tk.ID+1000); !errors.Is(err, line.ErrTicketNotFound) {
			t.Errorf("leaving a ticket that does not exist: %v", err)
		}
		if _, err := f.store.Leave(context.Background(), id+1000, tk.ID); !errors.Is(err, line.ErrTicketNotFound) {
			t.Errorf("leaving in a line that does not exist: %v", err)
		}
		back, created, _ := join(t, f.store, id, "lea")
		if !created || back.ID == tk.ID {
			t.Errorf("joining after leaving = %+v (created %v), want a new ticket", back, created)
		}
		if _, err := f.store.Ticket(context.Background(), id, tk.ID+1000); !errors.Is(err, line.ErrTicketNotFound) {
			t.Errorf("reading a ticket that does not exist: %v", err)
		}
	}},
	{"a leave passes a running admission to the next in line, in the same change; a waiting leaver passes none", func(t *testing.T, f fixture) {
		id := f.product(t)
		for _, c := range []string{"a", "b", "c", "d"} {
			join(t, f.store, id, c)
		}
		drew, _ := advance(t, f.store, id, nil, line.Plan{Seed: seed, Admit: 1, AdmissionFor: time.Minute, Stock: 4})
		byPlace := map[int64]line.Ticket{}
		for _, tk := range read(t, f.store, id, 0).Tickets {
			byPlace[tk.Place] = tk
		}
		first, second, fourth := byPlace[1], byPlace[2], byPlace[4]
		if first.Status != line.TicketAdmitted {
			t.Fatalf("place 1 after the draw = %+v, want admitted", first)
		}
		if _, err := f.store.Leave(context.Background(), id, fourth.ID); err != nil {
			t.Fatal(err)
		}
		if tk := ticket(t, f.store, id, second.ID); tk.Status != line.TicketWaiting {
			t.Fatalf("after a waiting ticket left, place 2 = %+v, want still waiting", tk)
		}
		left, err := f.store.Leave(context.Background(), id, first.ID)
		if err != nil || left.Status != line.TicketLeft {
			t.Fatalf("the admitted ticket's leave = %+v, %v", left, err)
		}
		next := ticket(t, f.store, id, second.ID)
		if next.Status != line.TicketAdmitted || next.Changed != left.Changed {
			t.Fatalf("place 2 after the admitted ticket left = %+v, want admitted in the leave's change (version %d)", next, left.Changed)
		}
		if span := time.Until(next.AdmittedUntil); span < 50*time.Second || span > time.Minute {
			t.Errorf("the passed admission runs %v more, want about the minute the line gave", span)
		}
		snap := read(t, f.store, id, drew.Version)
		if snap.Admissions != 2 || len(snap.Tickets) != 3 {
			t.Errorf("the line since the draw = %+v, want 2 admissions in all and the 3 changed tickets", snap)
		}
		if a, _ := advance(t, f.store, id, nil, line.Plan{Admit: 0, Stock: 4}); a.Admitted != 0 {
			t.Errorf("an advance after the pass admitted %d more", a.Admitted)
		}
	}},
	{"an advance whose plan fails writes nothing", func(t *testing.T, f fixture) {
		id := f.product(t)
		var ids []int64
		for i := range 3 {
			tk, _, _ := join(t, f.store, id, fmt.Sprint("c", i))
			ids = append(ids, tk.ID)
		}
		advance(t, f.store, id, nil, line.Plan{Seed: seed, Admit: 2, AdmissionFor: time.Minute, Stock: 5})
		order := line.Rank(seed, ids)
		f.runOut(t, order[1])
		before := read(t, f.store, id, 0)
		failed := errors.New("the plan failed")
		_, err := f.store.Advance(context.Background(), id, []line.Use{{Ticket: order[0]}}, func(context.Context, line.Standing) (line.Plan, error) {
			return line.Plan{}, failed
		})
		if !errors.Is(err, failed) {
			t.Fatalf("advance = %v, want the plan's error", err)
		}
		after := read(t, f.store, id, 0)
		if after.Version != before.Version {
			t.Errorf("version moved from %d to %d", before.Version, after.Version)
		}
		if tk := ticket(t, f.store, id, order[0]); tk.Status != line.TicketAdmitted {
			t.Errorf("the use was written: %+v", tk)
		}
		if tk := ticket(t, f.store, id, order[1]); tk.Status != line.TicketAdmitted {
			t.Errorf("the expiry was written: %+v", tk)
		}
	}},
	{"an advance of a line nobody joined does nothing", func(t *testing.T, f fixture) {
		id := f.product(t)
		called := false
		a, err := f.store.Advance(context.Background(), id, nil, func(context.Context, line.Standing) (line.Plan, error) {
			called = true
			return line.Plan{Seed: seed}, nil
		})
		if err != nil || a.Exists || called {
			t.Errorf("advance = %+v, %v (plan called %v)", a, err, called)
		}
		if _, err := f.store.Drawn(context.Background(), id); !errors.Is(err, line.ErrNotDrawn) {
			t.Errorf("Drawn = %v, want ErrNotDrawn", err)
		}
	}},
	{"every change but a join is announced with its version", func(t *testing.T, f fixture) {
		id := f.product(t)
		ctx, cancel := context.WithCancel(context.Background())
		var (
			mu    sync.Mutex
			heard []int64
			ready = make(chan struct{})
			done  = make(chan error, 1)
		)
		go func() {
			done <- f.store.Listen(ctx, func() { close(ready) }, func(product, version int64) {
				if product == id {
					mu.Lock()
					heard = append(heard, version)
					mu.Unlock()
				}
			})
		}()
		<-ready
		tk, _, _ := join(t, f.store, id, "x")
		advance(t, f.store, id, nil, line.Plan{Seed: seed, Stock: 1})
		if _, err := f.store.Leave(context.Background(), id, tk.ID); err != nil {
			t.Fatal(err)
		}
		testenv.Poll(t, 5*time.Second, "two announcements", func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(heard) == 2
		})
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(heard, []int64{1, 2}) {
			t.Errorf("heard versions %v, want [1 2]", heard)
		}
	}},
	{"the first key is made once, and kept", func(t *testing.T, f fixture) {
		k1, err := f.store.Keys(context.Background())
		if err != nil || len(k1) != 1 || k1[0].ID != 1 || len(k1[0].Secret) != line.KeySize {
			t.Fatalf("keys = %+v, %v", k1, err)
		}
		k2, err := f.store.Keys(context.Background())
		if err != nil || len(k2) != 1 || string(k2[0].Secret) != string(k1[0].Secret) {
			t.Errorf("keys again = %+v, %v; want the same key", k2, err)
		}
	}},
}
