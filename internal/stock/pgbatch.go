package stock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// The purchase path's SQL. A batch costs two round trips to Postgres, whatever its size: one
// read (levelsSQL) and one write (commitSQL), a single statement in an implicit transaction —
// no BEGIN, no COMMIT round trip. Every array is a parameter of a fixed statement, so each is
// prepared once per connection, for every batch size. The batch's idempotency keys are checked
// by the write itself (the records' primary key): only a batch whose write meets a stored key
// reads the records (recordsSQL) and is decided again.

// levelsSQL reads the rows a batch decides from.
const levelsSQL = `SELECT id, stock, version, fence FROM products WHERE id = ANY($1)`

// recordsSQL reads the stored outcomes of a batch's idempotency keys, with the orders they
// confirmed, so that a replay needs no further query.
const recordsSQL = `
SELECT k.key, k.fingerprint, k.order_id, k.async_order_id, k.product_id, k.requested, k.available, o.customer_id, o.created_at,
       ARRAY(SELECT i.product_id FROM order_items i WHERE i.order_id = k.order_id ORDER BY i.product_id),
       ARRAY(SELECT i.quantity FROM order_items i WHERE i.order_id = k.order_id ORDER BY i.product_id)
  FROM idempotency_keys k LEFT JOIN orders o ON o.id = k.order_id
 WHERE k.key = ANY($1)`

// commitSQL writes a whole batch in one statement. The decrement (decrementSQL: one conditional
// UPDATE per product, of the batch's summed quantity) runs first; the orders, their items and the
// idempotency records are inserted only if every product's decrement matched its row, so a
// refused decrement writes nothing at all. Records are inserted in key order: two batches that
// share keys then meet on the first shared key and never wait for each other in a cycle.
//
// The statement is the orders' INSERT, returning one row per order written: as many rows as
// orders means committed; none, for a batch that confirmed some, means refused. Its command tag
// says INSERT, like any write, to whatever watches the protocol (the fault drills do).
func commitSQL(d Defense) string {
	return `
WITH d AS (
  SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
             AS d(id, qty, read_stock, read_version, fence)
), u AS (
  ` + decrementSQL(d) + `
  RETURNING p.id
), ok AS (
  SELECT count(*) = cardinality($1::bigint[]) AS ok FROM u
), i AS (
  INSERT INTO order_items (order_id, product_id, quantity)
  SELECT x.order_id, x.product_id, x.quantity
    FROM unnest($8::uuid[], $9::bigint[], $10::bigint[]) AS x(order_id, product_id, quantity), ok WHERE ok.ok
), k AS (
  INSERT INTO idempotency_keys (key, fingerprint, outcome, order_id, product_id, requested, available)
  SELECT x.key, x.fingerprint, x.outcome, x.order_id, x.product_id, x.requested, x.available
    FROM unnest($11::text[], $12::bytea[], $13::text[], $14::uuid[], $15::bigint[], $16::bigint[], $17::bigint[])
         AS x(key, fingerprint, outcome, order_id, product_id, requested, available), ok
   WHERE ok.ok
   ORDER BY x.key
)
INSERT INTO orders (id, customer_id, status, created_at)
SELECT x.id, x.customer_id, 'confirmed', now()
  FROM unnest($6::uuid[], $7::text[]) AS x(id, customer_id), ok WHERE ok.ok
RETURNING created_at`
}

// lockRowsSQL takes a cart's product rows in ascending id order before its write, so that
// carts never deadlock in Postgres even when no Redis lock orders them (the demonstration
// modes without the lock layer).
const lockRowsSQL = `SELECT id FROM products WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// The outcome column of idempotency_keys.
const (
	recordConfirmed = "confirmed"
	recordSoldOut   = "sold_out"
)

// lookupTimeout bounds the query that finds out whether a commit whose reply was lost happened.
const lookupTimeout = 2 * time.Second

// Snapshot implements Store. The levels are one cached statement; the records, when asked
// for, a second query planned anew each time (pgx.QueryExecModeCacheDescribe): a cached plan
// made while idempotency_keys was nearly empty scans the whole table for each key once it has
// grown, and a new deployment's first sale is exactly when that happens. The purchase path asks
// for records only once a write has met a stored key, so the hot path never runs it.
func (s *PGStore) Snapshot(ctx context.Context, ids []int64, keys []string) (Snapshot, error) {
	snap := Snapshot{Levels: make(map[int64]Level, len(ids)), Records: map[string]IdempotencyRecord{}}
	rows, _ := s.pool.Query(ctx, levelsSQL, ids)
	var id int64
	var l Level
	_, err := pgx.ForEachRow(rows, []any{&id, &l.Stock, &l.Version, &l.Fence}, func() error {
		snap.Levels[id] = l
		return nil
	})
	if err != nil {
		return Snapshot{}, dbError("read stock", err)
	}
	if len(keys) == 0 {
		return snap, nil
	}
	rows, _ = s.pool.Query(ctx, recordsSQL, pgx.QueryExecModeCacheDescribe, keys)
	defer rows.Close()
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return Snapshot{}, err
		}
		snap.Records[rec.Key] = rec
	}
	if err := rows.Err(); err != nil {
		return Snapshot{}, dbError("read idempotency records", err)
	}
	return snap, nil
}

func scanRecord(rows pgx.Rows) (IdempotencyRecord, error) {
	var (
		rec                             IdempotencyRecord
		orderID, acceptedID             *uuid.UUID
		productID, requested, available *int64
		customerID                      *string
		createdAt                       *time.Time
		itemProducts, itemQuantities    []int64
	)
	err := rows.Scan(&rec.Key, &rec.Fingerprint, &orderID, &acceptedID, &productID, &requested, &available,
		&customerID, &createdAt, &itemProducts, &itemQuantities)
	if err != nil {
		return IdempotencyRecord{}, err
	}
	if acceptedID != nil {
		rec.Accepted = acceptedID
		return rec, nil
	}
	if orderID == nil {
		rec.SoldOut = &SoldOutError{ProductID: deref(productID), Requested: deref(requested), Available: deref(available)}
		return rec, nil
	}
	if customerID == nil || createdAt == nil || len(itemProducts) != len(itemQuantities) {
		return IdempotencyRecord{}, fmt.Errorf("idempotency record %q names order %s, which is incomplete", rec.Key, orderID)
	}
	o := Order{ID: *orderID, CustomerID: *customerID, Status: OrderStatusConfirmed, CreatedAt: *createdAt,
		Items: make([]Item, len(itemProducts))}
	for i := range itemProducts {
		o.Items[i] = Item{ProductID: itemProducts[i], Quantity: itemQuantities[i]}
	}
	rec.Order = &o
	return rec, nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// Commit implements Store.
func (s *PGStore) Commit(ctx context.Context, w Write) (time.Time, error) {
	args := commitArgs(w)
	var (
		ok  bool
		at  time.Time
		err error
	)
	if len(w.Decrements) > 1 {
		ok, at, err = s.commitCart(ctx, w, args)
	} else {
		ok, at, err = writeBatch(ctx, s.pool, w, args)
	}
	var pgErr *pgconn.PgError
	switch {
	case err == nil && !ok:
		return time.Time{}, fmt.Errorf("%w: a decrement matched no row", ErrConflict)
	case err == nil:
		return at, nil
	case constraintViolated(err, "23514", "products_stock_nonnegative"):
		return time.Time{}, &CaughtError{Layer: LayerCheck, ProductID: checkedProduct(w), Err: fmt.Errorf("%w: %w", ErrConflict, err)}
	case constraintViolated(err, "23505", "idempotency_keys_pkey"):
		return time.Time{}, fmt.Errorf("%w: an idempotency key was stored meanwhile: %w", ErrConflict, err)
	case errors.As(err, &pgErr), pgconn.SafeToRetry(err):
		// Postgres refused the statement, or it was never sent: nothing was written.
		return time.Time{}, dbError("commit batch", err)
	}
	// The reply was lost (a broken connection, a deadline): the batch may have committed.
	return s.findCommit(ctx, w, err)
}

// commitCart writes a batch over several products in an explicit transaction: a decrement that
// matches no row must undo those that matched, which one statement alone cannot do.
func (s *PGStore) commitCart(ctx context.Context, w Write, args []any) (ok bool, at time.Time, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, time.Time{}, err
	}
	defer func() {
		if err != nil || !ok {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	ids := make([]int64, len(w.Decrements))
	for i, d := range w.Decrements {
		ids[i] = d.ProductID
	}
	if _, err := tx.Exec(ctx, lockRowsSQL, ids); err != nil {
		return false, time.Time{}, err
	}
	if ok, at, err = writeBatch(ctx, tx, w, args); err != nil || !ok {
		return ok, at, err
	}
	return true, at, tx.Commit(ctx)
}

// writeBatch runs commitSQL on q and reports whether it wrote (every order inserted; a batch of
// refusals alone always writes) and when.
func writeBatch(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, w Write, args []any) (ok bool, at time.Time, err error) {
	rows, _ := q.Query(ctx, commitSQL(w.Defense), args...)
	written := 0
	_, err = pgx.ForEachRow(rows, []any{&at}, func() error {
		written++
		return nil
	})
	if err != nil {
		return false, time.Time{}, err
	}
	if len(w.Orders) == 0 {
		return true, time.Now(), nil
	}
	return written == len(w.Orders), at, nil
}

// findCommit finds out whether a batch whose commit went unanswered committed: its orders exist
// or none does, since the write is one transaction. A batch that confirmed nothing only stored
// refusals, which are true either way.
func (s *PGStore) findCommit(ctx context.Context, w Write, cause error) (time.Time, error) {
	if len(w.Orders) == 0 {
		return time.Time{}, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
	defer cancel()
	var at time.Time
	err := s.pool.QueryRow(ctx, `SELECT created_at FROM orders WHERE id = $1`, w.Orders[0].ID).Scan(&at)
	switch {
	case err == nil:
		return at, nil
	case errors.Is(err, pgx.ErrNoRows):
		// Not committed as far as Postgres can tell now. A statement still running on a
		// connection the server has not yet seen close could commit later, so this is
		// "unavailable" — retry with the same key — and never "not sold".
		return time.Time{}, fmt.Errorf("%w: commit batch: %w", ErrUnavailable, cause)
	default:
		return time.Time{}, fmt.Errorf("%w: commit batch: outcome unknown (%w), and looking it up failed: %v", ErrUnavailable, cause, err)
	}
}

// checkedProduct names the product whose CHECK refused a single-product write; for a cart,
// Postgres's error does not say which of its products it was.
func checkedProduct(w Write) int64 {
	if len(w.Decrements) == 1 {
		return w.Decrements[0].ProductID
	}
	return 0
}

// commitArgs lays w out as commitSQL's array parameters. Every slice is non-nil: pgx sends a nil
// slice as NULL, and cardinality(NULL) would make an empty decrement list look refused.
func commitArgs(w Write) []any {
	n := len(w.Decrements)
	ids, qtys, stocks, versions, fences := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, d := range w.Decrements {
		ids[i], qtys[i], stocks[i], versions[i], fences[i] = d.ProductID, d.Quantity, d.Read.Stock, d.Read.Version, d.Fence
	}
	// pgtype.UUID rather than uuid.UUID: pgx encodes it as 16 bytes directly, where a
	// uuid.UUID goes through its text form — measurable at hundreds of ids per batch.
	orderIDs, customers := make([]pgtype.UUID, len(w.Orders)), make([]string, len(w.Orders))
	itemOrders, itemProducts, itemQtys := []pgtype.UUID{}, []int64{}, []int64{}
	for i, o := range w.Orders {
		id := pgtype.UUID{Bytes: o.ID, Valid: true}
		orderIDs[i], customers[i] = id, o.CustomerID
		for _, it := range o.Items {
			itemOrders = append(itemOrders, id)
			itemProducts = append(itemProducts, it.ProductID)
			itemQtys = append(itemQtys, it.Quantity)
		}
	}
	r := len(w.Records)
	keys, fingerprints, outcomes := make([]string, r), make([][]byte, r), make([]string, r)
	recOrders := make([]pgtype.UUID, r) // not Valid: NULL, for a refusal
	recProducts, recRequested, recAvailable := make([]*int64, r), make([]*int64, r), make([]*int64, r)
	for i, rec := range w.Records {
		keys[i], fingerprints[i] = rec.Key, rec.Fingerprint
		if rec.Order != nil {
			outcomes[i], recOrders[i] = recordConfirmed, pgtype.UUID{Bytes: rec.Order.ID, Valid: true}
			continue
		}
		outcomes[i] = recordSoldOut
		recProducts[i], recRequested[i], recAvailable[i] = &rec.SoldOut.ProductID, &rec.SoldOut.Requested, &rec.SoldOut.Available
	}
	return []any{ids, qtys, stocks, versions, fences, orderIDs, customers, itemOrders, itemProducts, itemQtys,
		keys, fingerprints, outcomes, recOrders, recProducts, recRequested, recAvailable}
}
