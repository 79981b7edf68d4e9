package linepg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linepg"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The tie between a join and the draw, forced with two transactions: every join is in the
// draw or placed after it, never lost, whichever holds the line's row first.

// lined makes a product with a line, and n tickets in it.
func lined(t *testing.T, pool *pgxpool.Pool, s line.Store, n int) (int64, []int64) {
	t.Helper()
	p, err := stockpg.New(pool).CreateProduct(context.Background(), stock.NewProduct{SKU: "race", Name: "race", Stock: 10,
		Sale: stock.SaleRules{Line: stock.LineRules{Admit: 10, AdmissionFor: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for i := range n {
		tk, _, _ := join(t, s, p.ID, fmt.Sprint("early", i))
		ids = append(ids, tk.ID)
	}
	return p.ID, ids
}

// gate returns a hook's channels: held, closed by the hook once it holds its transaction, and
// release, which it waits for; open closes release, as the test's end does if it failed first.
func gate(t *testing.T) (held, release chan struct{}, open func()) {
	held, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	open = func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	return held, release, open
}

// waitingOnLock waits until a statement of the test's database waits for a row lock.
func waitingOnLock(t *testing.T, pool *pgxpool.Pool, what string) {
	t.Helper()
	testenv.Poll(t, 10*time.Second, what, func() bool {
		var n int
		err := pool.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_stat_activity
			 WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&n)
		return err == nil && n > 0
	})
}

// TestJoinCommittedBeforeTheDrawIsInIt: a join that holds the line's row when the draw comes
// makes the draw wait, and is drawn.
func TestJoinCommittedBeforeTheDrawIsInIt(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := linepg.New(pool)
	held, release, open := gate(t)
	s.SetHooks(linepg.Hooks{Join: func(context.Context) {
		close(held)
		<-release
	}})
	id, early := lined(t, pool, linepg.New(pool), 5)
	joined := make(chan line.Ticket, 1)
	go func() {
		tk, _, _, err := s.Join(context.Background(), id, "racer")
		if err != nil {
			t.Errorf("racer's join: %v", err)
		}
		joined <- tk
	}()
	<-held
	drew := make(chan line.Advanced, 1)
	go func() {
		a, err := linepg.New(pool).Advance(context.Background(), id, nil, planned(line.Plan{Seed: seed}, nil))
		if err != nil {
			t.Errorf("draw: %v", err)
		}
		drew <- a
	}()
	waitingOnLock(t, pool, "the draw waits for the join")
	open()
	racer := <-joined
	if a := <-drew; a.Drawn != 6 {
		t.Fatalf("the draw placed %d tickets, want the 5 early ones and the racer", a.Drawn)
	}
	want := line.Rank(seed, append(early, racer.ID))
	for i, tid := range want {
		if tk := ticket(t, s, id, tid); tk.Place != int64(i+1) {
			t.Errorf("ticket %d at place %d, want %d", tid, tk.Place, i+1)
		}
	}
}

// TestJoinRacingTheDrawIsPlacedAfterIt: a join that comes while the draw holds the line's row
// waits for it, learns the line was drawn, and the next advance places it after the drawn.
func TestJoinRacingTheDrawIsPlacedAfterIt(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := linepg.New(pool)
	held, release, open := gate(t)
	s.SetHooks(linepg.Hooks{Draw: func(context.Context) {
		close(held)
		<-release
	}})
	id, _ := lined(t, pool, s, 5)
	drew := make(chan line.Advanced, 1)
	go func() {
		a, err := s.Advance(context.Background(), id, nil, planned(line.Plan{Seed: seed}, nil))
		if err != nil {
			t.Errorf("draw: %v", err)
		}
		drew <- a
	}()
	<-held
	type joinResult struct {
		tk    line.Ticket
		drawn bool
	}
	joined := make(chan joinResult, 1)
	go func() {
		tk, _, drawn, err := linepg.New(pool).Join(context.Background(), id, "racer")
		if err != nil {
			t.Errorf("racer's join: %v", err)
		}
		joined <- joinResult{tk, drawn}
	}()
	waitingOnLock(t, pool, "the join waits for the draw")
	open()
	if a := <-drew; a.Drawn != 5 {
		t.Fatalf("the draw placed %d tickets, want the 5 early ones", a.Drawn)
	}
	r := <-joined
	if !r.drawn || r.tk.Place != 0 {
		t.Fatalf("the racer's join = %+v drawn %v; want a late arrival", r.tk, r.drawn)
	}
	if a, err := linepg.New(pool).Advance(context.Background(), id, nil, planned(line.Plan{}, nil)); err != nil || a.Placed != 1 {
		t.Fatalf("next advance = %+v, %v; want the racer placed", a, err)
	}
	if tk := ticket(t, s, id, r.tk.ID); tk.Place != 6 {
		t.Errorf("the racer is at place %d, want 6", tk.Place)
	}
}

// TestAdvanceFindingTheLineHeldIsBusy: an advance that finds another advance of the line
// running does not queue behind it: it is line.ErrBusy at once and writes nothing (its used
// marks stay the caller's), and the same advance once the line is free does its work.
func TestAdvanceFindingTheLineHeldIsBusy(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	s := linepg.New(pool)
	id, _ := lined(t, pool, s, 3)
	if a, err := s.Advance(context.Background(), id, nil, planned(line.Plan{Seed: seed, Admit: 1, AdmissionFor: time.Minute}, nil)); err != nil || a.Admitted != 1 {
		t.Fatalf("the draw = %+v, %v; want one admitted", a, err)
	}
	d, err := s.Drawn(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	first := ticket(t, s, id, d.Tickets[0].Ticket)
	held, release, open := gate(t)
	hooked := linepg.New(pool)
	hooked.SetHooks(linepg.Hooks{Advance: func(context.Context) {
		close(held)
		<-release
	}})
	done := make(chan error, 1)
	go func() {
		_, err := hooked.Advance(context.Background(), id, nil, planned(line.Plan{}, nil))
		done <- err
	}()
	<-held
	used := []line.Use{{Ticket: first.ID}}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second) // a queued advance fails the test, not hangs it
	defer cancel()
	if _, err := s.Advance(ctx, id, used, planned(line.Plan{}, nil)); !errors.Is(err, line.ErrBusy) {
		t.Fatalf("an advance while another holds the line: %v, want line.ErrBusy", err)
	}
	if tk := ticket(t, s, id, first.ID); tk.Status != line.TicketAdmitted {
		t.Fatalf("the busy advance wrote its mark: ticket is %s", tk.Status)
	}
	open()
	if err := <-done; err != nil {
		t.Fatalf("the holding advance: %v", err)
	}
	if a, err := s.Advance(context.Background(), id, used, planned(line.Plan{}, nil)); err != nil || a.Used != 1 {
		t.Fatalf("the advance again = %+v, %v; want the mark written", a, err)
	}
}
