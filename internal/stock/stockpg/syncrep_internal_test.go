package stockpg

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/async/asyncpg"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/syncrep"
)

// syncCancelWarning is the warning Postgres sends with a commit whose wait for its synchronous
// standby was ended early.
const syncCancelWarning = `canceling wait for synchronous replication due to user request`

// cutBarrier is a barrier (Store.barrier) that draws the warning, as a standby that never
// answers would.
const cutBarrier = `DO $$ BEGIN RAISE WARNING '` + syncCancelWarning + `'; END $$`

// cutShort makes every event (INSERT, UPDATE) on table draw the warning inside the write's own
// statement, as a standby that never answers would at its commit, until the returned function
// drops the trigger.
func cutShort(t *testing.T, pool *pgxpool.Pool, table, event string) (drop func()) {
	t.Helper()
	ctx := context.Background()
	name := pgx.Identifier{"cut_short_" + table}.Sanitize()
	if _, err := pool.Exec(ctx, `CREATE OR REPLACE FUNCTION cut_short() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE WARNING '`+syncCancelWarning+`'; RETURN NEW; END $$;
		CREATE TRIGGER `+name+` BEFORE `+event+` ON `+pgx.Identifier{table}.Sanitize()+` FOR EACH ROW EXECUTE FUNCTION cut_short()`); err != nil {
		t.Fatal(err)
	}
	return func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `DROP TRIGGER `+name+` ON `+pgx.Identifier{table}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
}

// wantUnknown checks that err is the answer to a write Postgres committed without its
// synchronous standby: unavailable, outcome unknown, not replicated.
func wantUnknown(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, stock.ErrOutcomeUnknown) || !errors.Is(err, syncrep.ErrNotReplicated) {
		t.Fatalf("%s = %v, want unavailable, outcome unknown, not replicated", what, err)
	}
}

// wantNotReplicated checks that err is the answer to a read of a write not known to be on a
// synchronous standby.
func wantNotReplicated(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, syncrep.ErrNotReplicated) {
		t.Errorf("%s = %v, want unavailable, not replicated", what, err)
	}
}

// noticeService is a Store over a fresh database whose pool has the service's notice handler,
// and a Service over it (with one process's locks).
func noticeService(t *testing.T) (*pgxpool.Pool, *Store, *stock.Service) {
	t.Helper()
	pool := noticePool(t)
	s := New(pool)
	svc := stock.NewService(s, &stocktest.LocalLocker{}, stock.Config{}, nil)
	t.Cleanup(svc.Close)
	return pool, s, svc
}

func mustCreate(t *testing.T, s *Store, p stock.NewProduct) stock.Product {
	t.Helper()
	created, err := s.CreateProduct(context.Background(), p)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	return created
}

// TestUnreplicatedRestockIsNotAcknowledged: a restock whose commit Postgres answered with the
// warning is not acknowledged (unavailable, outcome unknown: an admin told "added" would count
// on units a failover takes away); its retry under the same key replays it only once the
// barrier shows a standby has it, and it was added once.
func TestUnreplicatedRestockIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	pool, s, svc := noticeService(t)
	ctx := context.Background()
	p := mustCreate(t, s, stock.NewProduct{SKU: "restocked", Name: "restocked", Stock: 1})
	req := stock.RestockRequest{ProductID: p.ID, Quantity: 5, IdempotencyKey: "rk"}
	drop := cutShort(t, pool, "restocks", "INSERT")
	_, err := svc.Restock(ctx, req)
	wantUnknown(t, "restock answered with the warning", err)
	drop()

	s.barrier = cutBarrier
	_, err = svc.Restock(ctx, req)
	wantNotReplicated(t, "its retry, the barrier cut short", err)
	s.barrier = syncrep.Barrier
	if res, err := svc.Restock(ctx, req); err != nil || !res.Replayed || res.Product.Stock != 6 {
		t.Errorf("its retry with the barrier passing = %+v, %v; want the restock replayed, stock 6", res, err)
	}
	if res, err := svc.Restock(ctx, stock.RestockRequest{ProductID: p.ID, Quantity: 1}); err != nil || res.Product.Stock != 7 {
		t.Errorf("a restock answered without the warning = %+v, %v; want stock 7", res, err)
	}
	if a, err := s.Audit(ctx, p.ID); err != nil || a.Received != 7 {
		t.Errorf("audit = %+v, %v; want 7 received: the keyed restock added once", a, err)
	}
}

// TestUnreplicatedCancelIsNotAcknowledged: a hold's cancel whose commit Postgres answered with
// the warning is not acknowledged (a failover would bring the hold back, and its units would be
// sold twice over); a cancel that finds the hold ended answers only once the barrier shows a
// standby has the end.
func TestUnreplicatedCancelIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	pool, s, svc := noticeService(t)
	ctx := context.Background()
	p := mustCreate(t, s, stock.NewProduct{SKU: "cancelled", Name: "cancelled", Stock: 5, Sale: stock.SaleRules{HoldFor: time.Minute}})
	held, err := svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "c", Items: []stock.Item{{ProductID: p.ID, Quantity: 2}}})
	if err != nil || held.Order.Status != stock.OrderStatusHeld {
		t.Fatalf("order = %+v, %v; want it held", held, err)
	}
	id := held.Order.ID
	drop := cutShort(t, pool, "orders", "UPDATE")
	_, err = svc.Cancel(ctx, id, "")
	wantUnknown(t, "cancel answered with the warning", err)
	drop()

	s.barrier = cutBarrier
	_, err = svc.Cancel(ctx, id, "")
	wantNotReplicated(t, "cancel again, the barrier cut short", err)
	s.barrier = syncrep.Barrier
	if o, err := svc.Cancel(ctx, id, ""); err != nil || o.Status != stock.OrderStatusCancelled {
		t.Errorf("cancel again with the barrier passing = %+v, %v; want cancelled", o, err)
	}
	if a, err := s.Audit(ctx, p.ID); err != nil || a.Stock != 5 || a.Held != 0 {
		t.Errorf("audit = %+v, %v; want 5 in stock, none held: the units given back once", a, err)
	}
}

// TestUnreplicatedAcceptedRecordIsNotReplayed: the key of an order accepted for later (written
// by package asyncpg, with the order) is answered to a retry, on either route, only once the
// barrier shows a standby has it.
func TestUnreplicatedAcceptedRecordIsNotReplayed(t *testing.T) {
	t.Parallel()
	pool := noticePool(t)
	s := New(pool)
	orders, err := asyncpg.New(pool)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	p := mustCreate(t, s, stock.NewProduct{SKU: "accepted", Name: "accepted", Stock: 5})
	id, key := uuid.Must(uuid.NewV7()), stock.RecordKey{CustomerID: "c", Key: "k"}
	out, err := orders.Accept(ctx, []async.NewOrder{{ID: id, Request: stock.Prepared{CustomerID: key.CustomerID,
		Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}, Key: key.Key, Fingerprint: []byte("f")}}})
	if err != nil || out[0].State != async.Accepted {
		t.Fatalf("accept = %+v, %v", out, err)
	}

	if recs, err := s.Records(ctx, []stock.RecordKey{key}); err != nil || recs[key].Accepted == nil || *recs[key].Accepted != id {
		t.Errorf("the key's record with the barrier passing = %+v, %v; want order %s", recs, err, id)
	}
	s.barrier = cutBarrier
	_, err = s.Records(ctx, []stock.RecordKey{key})
	wantNotReplicated(t, "the key's record for a retry, the barrier cut short", err)
}
