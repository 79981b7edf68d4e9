package linepg_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linepg"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// replica is a line service over Postgres, as one replica runs it (its keeper running until
// stop, or the test's end).
func replica(t *testing.T, pool *pgxpool.Pool, store line.Store) *line.Service {
	t.Helper()
	products := stockpg.New(pool)
	svc := stock.NewService(products, &stocktest.LocalLocker{}, stock.Config{}, nil)
	t.Cleanup(svc.Close)
	s, err := line.New(context.Background(), store, products, svc,
		line.Config{Poll: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// TestKeeperStoppedMidAdvanceLosesNothing: a replica whose keeper is stopped while its advance
// holds the line (a shutdown, or the process dying: the connection goes either way) leaves the
// line as it was — the transaction rolls back — and another replica's keeper does the work.
func TestKeeperStoppedMidAdvanceLosesNothing(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	p, err := stockpg.New(pool).CreateProduct(ctx, stock.NewProduct{SKU: "stop", Name: "stop", Stock: 10,
		Sale: stock.SaleRules{MaxPerCustomer: 1, Line: stock.LineRules{Admit: 2, AdmissionFor: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	hooked := linepg.New(pool)
	entered := make(chan struct{}, 1)
	hooked.SetHooks(linepg.Hooks{Advance: func(ctx context.Context) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-ctx.Done() // held until the keeper stops
	}})
	a := replica(t, pool, hooked)
	var tokens []string
	for i := range 4 {
		j, err := a.Join(ctx, p.ID, fmt.Sprint("c", i)) // the first join's advance draws
		if err != nil {
			t.Fatal(err)
		}
		tokens = append(tokens, j.Token)
	}
	<-entered
	a.Stop()
	snap, err := linepg.New(pool).Line(ctx, p.ID, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	if snap.Version != 0 || !snap.DrawnAt.IsZero() || len(snap.Tickets) != 0 || snap.Unplaced != 4 {
		t.Fatalf("the line after the stopped advance = %+v, want it as before: version 0, not drawn, 4 waiting", snap)
	}
	b := replica(t, pool, linepg.New(pool))
	admitted := 0
	for _, tok := range tokens {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		st, err := b.Status(wctx, p.ID, tok)
		for err == nil && (st.State == line.Queued || st.Place == 0) {
			st, err = b.Wait(wctx, p.ID, tok, st.ETag, 5*time.Second)
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		if st.State == line.Admitted {
			admitted++
		}
	}
	if admitted != 2 {
		t.Errorf("%d admitted by the other replica, want 2", admitted)
	}
}
