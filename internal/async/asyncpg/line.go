package asyncpg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// The service's advisory locks, and how their keys are kept apart. A product id is a positive
// bigint (an identity column; the API refuses any other), all 64 bits of which must count, or
// two products that agree in the low 32 bits would share a lock: a drain of one would make
// the other's jobs end, believing its line in hand.
//   - A line's lock (a session lock, held while the line is drained: the line's claim;
//     lineLockKey) has one bigint key, the product id's bitwise complement: negative for every
//     product. The other bigint keys taken on the service's database are all non-negative:
//     golang-migrate's lock (a uint32 from the database's name), River's migration lock
//     (migrations.riverLockID), River's own (riverLockPrefix), the audit's recount
//     (stockpg's auditLockKey) and the line's advance locks (linepg's advanceLockKey, under a
//     prefix of their own).
//   - A product's accept lock (a transaction lock, ordering the groups that accept its orders;
//     acceptLockSQL) has two int4 keys, the id's high and low halves, a space of its own:
//     Postgres never takes a lock with two int4 keys as one with a bigint key, nor the other way
//     round, and nothing else here takes two-key locks.
//
// The line lock serves order and economy, not safety: two drains of one line would decide the
// same orders, and the second would replay the first's records.

// riverLockPrefix is the first 32 bits of any advisory lock key River takes (River's
// AdvisoryLockPrefix): positive, so its keys are too. River takes advisory locks only for a
// kind of unique job this service does not use; should it ever, they are clear of the line
// locks' negative keys.
const riverLockPrefix = 0x5707c5

// lineLockKey returns the bigint key of product's line lock: its bitwise complement, -1-product.
func lineLockKey(product int64) int64 { return ^product }

// LineLockKeys returns how pg_locks shows product's line lock (an advisory lock with one bigint
// key): classid is the key's high 32 bits, objid its low 32 bits, and objsubid 1. Operators and
// the load harness use it to find which session — which replica — drains a line.
func LineLockKeys(product int64) (classID, objID uint32, objSubID int16) {
	k := uint64(lineLockKey(product))
	return uint32(k >> 32), uint32(k), 1
}

// acceptLockKeys returns the two int4 keys of products' accept locks, each product once.
func acceptLockKeys(products []int64) (hi, lo []int32) {
	for _, id := range distinct(products) {
		hi, lo = append(hi, int32(id>>32)), append(lo, int32(id))
	}
	return hi, lo
}

// lockLineSQL takes a line's lock if it is free and then gives the session a lease: Postgres
// ends a session idle for longer than idle_session_timeout, and its advisory locks with it. A
// drain reads each round's orders on this session, so a working drain renews the lease every
// round; a holder that stops working without dying — a paused process keeps its TCP
// connection, and the kernel answers keepalives for it — loses the line after the lease, and
// the next job takes it over. A dead holder loses it at once, with its connection.
const lockLineSQL = `
SELECT CASE WHEN pg_try_advisory_lock($1::bigint) THEN set_config('idle_session_timeout', $2, false) IS NOT NULL ELSE false END`

// unlockLineSQL lets go of the line and takes the lease off the session, which goes back to
// the pool.
const unlockLineSQL = `SELECT pg_advisory_unlock($1::bigint), set_config('idle_session_timeout', '0', false)`

// lineSQL reads the front of a product's line.
const lineSQL = `
SELECT id, customer_id, product_ids, quantities
  FROM async_orders
 WHERE product_id = $1 AND status = 'pending'
 ORDER BY seq
 LIMIT $2`

// ClaimLine implements async.Store: the line's lock, on a pool connection of its own, with the
// lease on its session (lockLineSQL).
func (s *Store) ClaimLine(ctx context.Context, product int64, lease time.Duration) (async.Line, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, storeError("acquire a connection for the line lock", err)
	}
	key := lineLockKey(product)
	var got bool
	if err := conn.QueryRow(ctx, lockLineSQL, key, fmt.Sprint(lease.Milliseconds())).Scan(&got); err != nil {
		conn.Release()
		return nil, storeError("lock line", err)
	}
	if !got {
		conn.Release()
		return nil, nil
	}
	return &line{conn: conn, product: product, key: key}, nil
}

// Waiting implements async.Store.
func (s *Store) Waiting(ctx context.Context, product int64) (bool, error) {
	front, err := readLine(ctx, s.pool, product, 1)
	return len(front) > 0, err
}

// querier is a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// readLine reads the front of product's line through q, at most limit orders.
func readLine(ctx context.Context, q querier, product int64, limit int) ([]stock.Accepted, error) {
	rows, _ := q.Query(ctx, lineSQL, product, limit)
	var out []stock.Accepted
	var ids, qtys []int64
	var o stock.Accepted
	_, err := pgx.ForEachRow(rows, []any{&o.ID, &o.CustomerID, &ids, &qtys}, func() error {
		out = append(out, stock.Accepted{ID: o.ID, CustomerID: o.CustomerID, Items: joinItems(ids, qtys)})
		return nil
	})
	if err != nil {
		return nil, storeError("read line", err)
	}
	return out, nil
}

// line is a held advisory lock on a product's line, on the pool connection that took it.
type line struct {
	conn    *pgxpool.Conn // nil once released
	product int64
	key     int64
}

var _ async.Line = (*line)(nil)

// Front reads the line on the lock's own session, whose lease each read renews.
func (l *line) Front(ctx context.Context, limit int) ([]stock.Accepted, error) {
	return readLine(ctx, l.conn, l.product, limit)
}

// Release lets go of the line. A connection whose unlock failed is closed, never returned to
// the pool still holding the lock (closing it lets go of the lock too).
func (l *line) Release() {
	if l.conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := l.conn.Exec(ctx, unlockLineSQL, l.key); err != nil {
		_ = l.conn.Conn().Close(ctx)
	}
	l.conn.Release()
	l.conn = nil
}
