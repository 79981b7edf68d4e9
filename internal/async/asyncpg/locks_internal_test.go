package asyncpg

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// Two products whose ids agree in their low 32 bits have locks of their own: a drain of one
// does not hold the other's line, a group accepting one does not wait for the other's, and
// LineLockKeys finds each line's holder in pg_locks.
func TestLocksUseTheWholeProductID(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	a, b := int64(1)<<32|7, int64(2)<<32|7
	for _, id := range []int64{a, b} {
		if _, err := s.pool.Exec(ctx, `INSERT INTO products (id, sku, name, stock, initial_stock)
			OVERRIDING SYSTEM VALUE VALUES ($1, $2, 'p', 1, 1)`, id, "SKU-"+uuid.NewString()); err != nil {
			t.Fatalf("insert product %d: %v", id, err)
		}
	}

	held := map[int64]*line{}
	for _, id := range []int64{a, b} {
		l, err := s.ClaimLine(ctx, id, time.Minute)
		if err != nil || l == nil {
			t.Fatalf("claim line %d: %v, %v; want it free", id, l, err)
		}
		t.Cleanup(l.Release)
		held[id] = l.(*line)
	}
	for id, l := range held {
		classID, objID, objSubID := LineLockKeys(id)
		var pid uint32
		err := s.pool.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = $1 AND objid = $2 AND objsubid = $3`, classID, objID, objSubID).Scan(&pid)
		if want := l.conn.Conn().PgConn().PID(); err != nil || pid != want {
			t.Errorf("line %d's holder by LineLockKeys: pid %d, %v; want %d", id, pid, err, want)
		}
	}

	// A's accept lock held by a group under way (and a's line lock by a drain): a group of b,
	// and one of a once a's group is done, are accepted. The deadline only keeps a failing
	// test from hanging.
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	hi, lo := acceptLockKeys([]int64{a})
	if _, err := tx.Exec(ctx, acceptLockSQL, hi, lo); err != nil {
		t.Fatalf("hold a's accept lock: %v", err)
	}
	accept := func(product int64) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		o := async.NewOrder{ID: uuid.Must(uuid.NewV7()), Request: stock.Prepared{CustomerID: "c", Items: []stock.Item{{ProductID: product, Quantity: 1}}}}
		out, err := s.Accept(actx, []async.NewOrder{o})
		if err != nil || out[0].State != async.Accepted {
			t.Errorf("accept an order of %d: %+v, %v; want it accepted", product, out, err)
		}
	}
	accept(b)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	accept(a)
}
