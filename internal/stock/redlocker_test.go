package stock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestRedlockLockerNeedsQuorum places an order through stocklock.NewRedlock's locker over five
// nodes with some of them down: with two down the order is sold; with three down it is refused as
// unavailable (503), not busy, and nothing is sold. With every node up but the product's lock
// held by someone else on a quorum, the order is busy (429).
func TestRedlockLockerNeedsQuorum(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		down    []int
		held    bool // the product's lock is held elsewhere on every node
		wantErr error
	}{
		{name: "all up"},
		{name: "two down", down: []int{1, 3}},
		{name: "three down", down: []int{0, 2, 4}, wantErr: stock.ErrUnavailable},
		{name: "held elsewhere", held: true, wantErr: stock.ErrBusy},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			w := newWorld(t)
			nodes := testenv.StartRedisNodes(t, 5)
			// Room for a few attempts on a loaded machine (see stocklock's TestRedlockBusyOrUnavailable).
			r := w.replica(t, stock.DefaultDefense(), replicaOptions{redlock: nodes, lockWait: 3 * time.Second})
			id := createProduct(t, r, "quorum", 5)
			for _, i := range tt.down {
				nodes[i].Kill()
			}
			if tt.held {
				l, err := testenv.Redlock(t, nodes).Obtain(t.Context(), stocklock.Name(w.prefix, id), time.Minute, nil)
				if err != nil {
					t.Fatalf("hold the lock elsewhere: %v", err)
				}
				defer l.Release(context.Background())
			}

			_, err := r.svc.PlaceOrder(t.Context(), order("c", one(id, 2)))

			au := mustAudit(t, r, id)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("PlaceOrder: %v", err)
				}
				if au.Sold != 2 || !au.Consistent() {
					t.Errorf("audit = %+v, want 2 sold, consistent", au)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("PlaceOrder = %v, want %v", err, tt.wantErr)
			}
			if errors.Is(tt.wantErr, stock.ErrUnavailable) && errors.Is(err, stock.ErrBusy) {
				t.Errorf("PlaceOrder = %v: unreachable nodes reported as busy", err)
			}
			if au.Sold != 0 || !au.Consistent() {
				t.Errorf("audit = %+v, want nothing sold", au)
			}
		})
	}
}

// TestRedlockLockerNodeRestartedEmptyMidSale sells a product through three replicas whose
// locks are Redlocks over five nodes, and restarts one node empty (no persistence) once a quarter
// of the stock is sold. The sale must go on to sell exactly the stock, with every answer
// matching the orders table, and the fencing tokens written to the product row must strictly
// increase from one write to the next: the row's fence never went backwards, and no write
// was refused for an old token (no lock was lost, so none should be).
func TestRedlockLockerNodeRestartedEmptyMidSale(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	nodes := testenv.StartRedisNodes(t, 5)
	o := replicaOptions{redlock: nodes}
	replicas := []*replica{w.replica(t, stock.DefaultDefense(), o), w.replica(t, stock.DefaultDefense(), o), w.replica(t, stock.DefaultDefense(), o)}
	const initial = 400
	id := createProduct(t, replicas[0], "redlock-restart", initial)
	logFences(t, replicas[0])

	done := make(chan loadResult, 1)
	go func() { done <- sell(t, replicas, id, 32, 800) }()
	testenv.Poll(t, time.Minute, "a quarter of the stock to sell", func() bool { return mustAudit(t, replicas[0], id).Sold >= initial/4 })
	nodes[2].Restart()
	soldAtRestart := mustAudit(t, replicas[0], id).Sold
	res := <-done

	if soldAtRestart >= initial {
		t.Fatalf("the stock was sold out (%d) when the node restarted: the restart did not hit a sale", soldAtRestart)
	}
	if len(res.otherErrors) > 0 {
		t.Fatalf("%d unexpected errors, first: %v", len(res.otherErrors), res.otherErrors[0])
	}
	au := mustAudit(t, replicas[0], id)
	if res.confirmedUnits != initial || au.Sold != initial || au.Stock != 0 || !au.Consistent() {
		t.Errorf("confirmed %d units, audit %+v; want exactly %d sold, consistent", res.confirmedUnits, au, initial)
	}
	assertOrdersMatch(t, replicas[0], id, res)
	for _, r := range replicas {
		if got := catches(t, r, stock.LayerFence); got != 0 {
			t.Errorf("fence catches = %v, want 0: a holder's token was below the row's", got)
		}
	}
	writes := fenceWrites(t, replicas[0], id)
	for i, f := range writes {
		if f.new <= f.old {
			t.Errorf("write %d of %d set the fence from %d to %d: not above", i+1, len(writes), f.old, f.new)
		}
	}
	t.Logf("%d orders confirmed; restart at %d of %d units sold; %d writes, fences %d..%d",
		res.confirmed, soldAtRestart, initial, len(writes), writes[0].new, writes[len(writes)-1].new)
}

// logFences records every change of a product's fence, in the order the writes committed:
// writes to one row wait for each other's commits, so a later one's log row comes later.
func logFences(t *testing.T, r *replica) {
	t.Helper()
	_, err := r.pool.Exec(context.Background(), `
CREATE TABLE fence_log (n bigserial PRIMARY KEY, product_id bigint NOT NULL, old_fence bigint NOT NULL, new_fence bigint NOT NULL);
CREATE FUNCTION log_fence() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO fence_log (product_id, old_fence, new_fence) VALUES (NEW.id, OLD.fence, NEW.fence);
  RETURN NULL;
END $$;
CREATE TRIGGER log_fence AFTER UPDATE OF fence ON products FOR EACH ROW EXECUTE FUNCTION log_fence();`)
	if err != nil {
		t.Fatalf("log fences: %v", err)
	}
}

type fenceWrite struct{ old, new int64 }

// fenceWrites returns what logFences recorded for the product, oldest first.
func fenceWrites(t *testing.T, r *replica, id int64) []fenceWrite {
	t.Helper()
	rows, _ := r.pool.Query(context.Background(), `SELECT old_fence, new_fence FROM fence_log WHERE product_id = $1 ORDER BY n`, id)
	writes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (fenceWrite, error) {
		var f fenceWrite
		return f, row.Scan(&f.old, &f.new)
	})
	if err != nil {
		t.Fatalf("read the fence log: %v", err)
	}
	if len(writes) == 0 {
		t.Fatal("no write changed the fence")
	}
	return writes
}
