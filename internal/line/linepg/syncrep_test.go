package linepg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linepg"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/syncrep"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestUnreplicatedJoinIsNotAcknowledged: a join whose commit Postgres answered with the warning
// of a wait for its synchronous standby cut short is answered unavailable — the place may be on
// the primary alone — and the join again answers the ticket. A trigger draws the warning in
// the join's own statement, as a standby that never answers would at its commit.
func TestUnreplicatedJoinIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.OnNotice = syncrep.OnNotice
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	ctx := context.Background()
	p, err := stockpg.New(pool).CreateProduct(ctx, stock.NewProduct{SKU: "sync", Name: "sync", Stock: 5,
		Sale: stock.SaleRules{Line: stock.LineRules{Admit: 5, AdmissionFor: time.Minute}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `CREATE FUNCTION cut_short() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE WARNING 'canceling wait for synchronous replication due to user request'; RETURN NEW; END $$;
		CREATE TRIGGER cut_short BEFORE INSERT ON line_tickets FOR EACH ROW EXECUTE FUNCTION cut_short()`); err != nil {
		t.Fatal(err)
	}
	s := linepg.New(pool)
	if _, _, _, err := s.Join(ctx, p.ID, "ann"); !errors.Is(err, line.ErrUnavailable) {
		t.Fatalf("the join answered with the warning = %v, want unavailable", err)
	}
	if _, err := pool.Exec(ctx, `DROP TRIGGER cut_short ON line_tickets`); err != nil {
		t.Fatal(err)
	}
	tk, created, _, err := s.Join(ctx, p.ID, "ann")
	if err != nil || created || tk.CustomerID != "ann" {
		t.Errorf("joining again = %+v (created %v), %v; want the ticket the first join made", tk, created, err)
	}
	if _, created, _, err := s.Join(ctx, p.ID, "bob"); err != nil || !created {
		t.Errorf("another join, without the warning = %v (created %v)", err, created)
	}
}
