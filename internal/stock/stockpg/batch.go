package stockpg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// The purchase path's SQL. A batch costs two round trips to Postgres, whatever its size: one
// read (levelsSQL) and one write (commitSQL), a single statement in an implicit transaction —
// no BEGIN, no COMMIT round trip. Every array is a parameter of a fixed statement, so each is
// prepared once per connection, for every batch size. The batch's idempotency keys are checked
// by the write itself (the records' primary key), so the hot path never reads them. A write
// that refuses nobody for want of stock may leave out the orders whose key another request
// stored: it runs as commitSQL, and only if that fails on a stored key, as commitSkippingSQL,
// which claims its keys first and leaves those orders out (Commit says when each runs), so a
// retry that lands in a batch costs that batch one statement at most, not a new decision.
// Only a write that cannot leave an order out — it also stores refusals — fails on a stored
// key, and its batch then reads the records (recordsSQL) and is decided again.

// levelsSQL reads the rows a batch decides from, with the sale rules, Postgres's clock (the one
// the decrement checks the window against), — for a product with a limit per customer — the
// units each of the batch's customers ($2) bought of it, and — for a product sold with a hold,
// or any product of a cart (several ids), which is held when one of its products is — the
// units each of them has in held orders of it.
const levelsSQL = `
SELECT p.id, p.stock, p.version, p.fence, p.sale_starts_at, p.sale_ends_at, coalesce(p.max_per_customer, 0),
       coalesce(p.hold_for_seconds, 0), p.max_held_per_customer, now(), b.customers, b.bought, h.customers, h.held
  FROM products p
  LEFT JOIN LATERAL (
    SELECT array_agg(c.customer_id) AS customers, array_agg(c.bought) AS bought
      FROM customer_purchases c
     WHERE p.max_per_customer IS NOT NULL AND c.product_id = p.id AND c.customer_id = ANY($2)
  ) b ON true
  LEFT JOIN LATERAL (
    SELECT array_agg(c.customer_id) AS customers, array_agg(c.held) AS held
      FROM customer_holds c
     WHERE (p.hold_for_seconds IS NOT NULL OR cardinality($1::bigint[]) > 1)
       AND c.product_id = p.id AND c.customer_id = ANY($2) AND c.held > 0
  ) h ON true
 WHERE p.id = ANY($1)`

// recordsSQL reads the stored outcomes of a batch's idempotency keys — each ($1, $2) a
// customer and a key of theirs, one probe of the primary key — with the orders they confirmed,
// so that a replay needs no further query.
const recordsSQL = `
SELECT k.customer_id, k.key, k.fingerprint, k.outcome, k.order_id, k.async_order_id, k.product_id, k.requested, k.available,
       o.customer_id, o.created_at, o.status, o.expires_at, o.decided_at,
       ARRAY(SELECT i.product_id FROM order_items i WHERE i.order_id = k.order_id ORDER BY i.product_id),
       ARRAY(SELECT i.quantity FROM order_items i WHERE i.order_id = k.order_id ORDER BY i.product_id)
  FROM unnest($1::text[], $2::text[]) AS q(customer_id, key)
  JOIN idempotency_keys k ON k.customer_id = q.customer_id AND k.key = q.key
  LEFT JOIN orders o ON o.id = k.order_id`

// productionDecrement is the batch's UPDATE (the u step of commitSQL), over the rows d(id, qty,
// read_stock, read_version, fence): one decrement per product, of the batch's summed quantity,
// relative (stock = stock - qty, so that the CHECK (stock >= 0) backstop stays armed), under
// every condition of the defense: the row is the one the batch read (version), the stock
// suffices (guard), and no newer lock holder has written (fence); and the sale is open now, by
// Postgres's clock (saleOpen). It is the only decrement the production store runs; demo.go
// builds the demonstration modes' weaker ones.
const productionDecrement = `UPDATE products p
     SET stock = p.stock - d.qty, version = p.version + 1, updated_at = now(), fence = d.fence
    FROM d
   WHERE p.id = d.id AND p.version = d.read_version AND p.stock >= d.qty AND p.fence <= d.fence
     AND ` + saleOpen

// saleOpen is the sale window, checked against now() — the time of the transaction that sells,
// which also stamps its orders' created_at — so that no replica's clock decides when a sale
// opens or ends. Every store's decrement carries it, demonstration or not: it is a rule of the
// product, not a layer a demonstration takes away.
const saleOpen = `(p.sale_starts_at IS NULL OR p.sale_starts_at <= now()) AND (p.sale_ends_at IS NULL OR now() < p.sale_ends_at)`

// orderHolds is the step of a commit statement that finds, per order, the hold its products
// are sold with (the shortest of its products' hold_for_seconds, as the decremented rows hold
// them, u), NULL for an order final at once; insertOrders writes each order held for that long
// from now() — Postgres's clock, the one the expiry is judged by — or confirmed.
const (
	orderHolds = `
  SELECT itm.order_id, min(u.hold_for_seconds) AS hold FROM itm JOIN u ON u.id = itm.product_id GROUP BY itm.order_id`
	insertOrders = `INSERT INTO orders (id, customer_id, status, created_at, expires_at)
SELECT ord.id, ord.customer_id, CASE WHEN hd.hold IS NULL THEN 'confirmed' ELSE 'held' END, now(),
       now() + make_interval(secs => hd.hold)
  FROM ord LEFT JOIN hd ON hd.order_id = ord.id, ok WHERE ok.ok`
)

// limitedUnits is the step of a commit statement that counts, per product with a limit per
// customer and per customer, the units its orders take, in customer_purchases (whose CHECK
// refuses a count above the limit, failing the whole statement). The limit is the one the
// decrement's row holds (u returns it), so that Postgres alone holds the limit the product has.
// It reads the statement's orders as ord(id, customer_id) and their items as itm(order_id,
// product_id, quantity).
const limitedUnits = `
  INSERT INTO customer_purchases AS c (product_id, customer_id, bought, max_units)
  SELECT itm.product_id, ord.customer_id, sum(itm.quantity), u.max_per_customer
    FROM itm JOIN ord ON ord.id = itm.order_id JOIN u ON u.id = itm.product_id, ok
   WHERE ok.ok AND u.max_per_customer IS NOT NULL
   GROUP BY itm.product_id, ord.customer_id, u.max_per_customer
   ORDER BY 1, 2
  ON CONFLICT (product_id, customer_id) DO UPDATE SET bought = c.bought + excluded.bought, max_units = excluded.max_units`

// heldUnits is the step of a commit statement that counts, per product and customer, the units
// of its held orders (hd: an order is held when one of its products is sold with a hold, and
// all its units are then held) in customer_holds, whose CHECK refuses a count above the
// product's max_held_per_customer — the one the decrement's row holds (u returns it) — and
// fails the whole statement. It runs after hd, and reads what limitedUnits reads.
const heldUnits = `
  INSERT INTO customer_holds AS c (product_id, customer_id, held, max_held)
  SELECT itm.product_id, ord.customer_id, sum(itm.quantity), u.max_held_per_customer
    FROM itm JOIN ord ON ord.id = itm.order_id JOIN hd ON hd.order_id = itm.order_id JOIN u ON u.id = itm.product_id, ok
   WHERE ok.ok AND hd.hold IS NOT NULL
   GROUP BY itm.product_id, ord.customer_id, u.max_held_per_customer
   ORDER BY 1, 2
  ON CONFLICT (product_id, customer_id) DO UPDATE SET held = c.held + excluded.held, max_held = excluded.max_held`

// commitSQL writes a whole batch in one statement. The decrement (productionDecrement) runs first; the orders, their items and the
// idempotency records are inserted only if every product's decrement matched its row, so a
// refused decrement writes nothing at all. Records are inserted in the order of their primary
// key (customer, key): two batches that share keys then meet on the first shared key and never
// wait for each other in a cycle.
//
// The statement is the orders' INSERT, returning one row per order written: as many rows as
// orders means committed; none, for a batch that confirmed some, means refused. Its command tag
// says INSERT, like any write, to whatever watches the protocol (the fault drills do).
// commitHead and commitTail surround the decrement: commitSQL is the production statement,
// and a demonstration store puts its own decrement between them (demo.go).
const (
	commitHead = `
WITH d AS (
  SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[])
             AS d(id, qty, read_stock, read_version, fence)
), u AS (
  `
	commitTail = `
  RETURNING p.id, p.max_per_customer, p.hold_for_seconds, p.max_held_per_customer
), ok AS (
  SELECT count(*) = cardinality($1::bigint[]) AS ok FROM u
), itm AS (
  SELECT * FROM unnest($8::uuid[], $9::bigint[], $10::bigint[]) AS x(order_id, product_id, quantity)
), ord AS (
  SELECT * FROM unnest($6::uuid[], $7::text[]) AS x(id, customer_id)
), i AS (
  INSERT INTO order_items (order_id, product_id, quantity)
  SELECT itm.order_id, itm.product_id, itm.quantity FROM itm, ok WHERE ok.ok
), cp AS (` + limitedUnits + `
), hd AS (` + orderHolds + `
), ch AS (` + heldUnits + `
), k AS (
  INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, order_id, product_id, requested, available)
  SELECT x.customer_id, x.key, x.fingerprint, x.outcome, x.order_id, x.product_id, x.requested, x.available
    FROM unnest($11::text[], $12::text[], $13::bytea[], $14::text[], $15::uuid[], $16::bigint[], $17::bigint[], $18::bigint[])
         AS x(customer_id, key, fingerprint, outcome, order_id, product_id, requested, available), ok
   WHERE ok.ok
   ORDER BY x.customer_id, x.key
)
` + insertOrders + `
RETURNING id, created_at, expires_at`
	commitSQL = commitHead + productionDecrement + commitTail
)

// commitSkippingSQL writes a batch that refuses nobody for want of stock (Write.SkipStored),
// leaving out the orders whose idempotency key another request has already stored. The keys
// are claimed first (k: an upsert, which waits for a claim still being committed and finds a
// stored key through the primary key's index, whatever the table's size or plan); the orders
// written (o) are those without a key and those whose key was claimed; the decrement (d, then
// productionDecrement) takes only their units, per product, and a product left with none is not
// touched. A stored key is "updated" to itself (fingerprint = fingerprint) only so that the
// upsert returns its record: each row returned carries the stored records of the keys left
// out, so that their orders are answered without another query. (The record's created_at is
// its order's: both are now() of the transaction that wrote them.)
//
// All or nothing still holds without a separate check: a claimed key's record references its
// order, and the orders are inserted only if every decrement matched, so a refused decrement
// leaves claims whose orders do not exist, and the foreign key fails the whole statement
// (23503 on idempotency_keys_order_id_fkey, read as a refusal). A batch whose orders were all
// left out, or refused without a claim, writes nothing and returns no row.
//
// It returns the id and time of each order written; the orders missing from it were left out.
const (
	commitSkippingHead = `
WITH k AS (
  INSERT INTO idempotency_keys AS r (customer_id, key, fingerprint, outcome, order_id)
  SELECT x.customer_id, x.key, x.fingerprint, 'confirmed', x.order_id
    FROM unnest($11::text[], $12::text[], $13::bytea[], $14::uuid[]) AS x(customer_id, key, fingerprint, order_id)
   ORDER BY x.customer_id, x.key
  ON CONFLICT (customer_id, key) DO UPDATE SET fingerprint = r.fingerprint
  RETURNING r.customer_id, r.key, r.fingerprint, r.outcome, r.order_id, r.async_order_id, r.product_id, r.requested,
            r.available, r.created_at, r.xmax = 0 AS claimed
), o AS (
  SELECT x.id, x.customer_id
    FROM unnest($5::uuid[], $6::text[], $7::bool[]) AS x(id, customer_id, keyed)
   WHERE NOT x.keyed OR x.id IN (SELECT order_id FROM k WHERE claimed)
), it AS (
  SELECT x.order_id, x.product_id, x.quantity
    FROM unnest($8::uuid[], $9::bigint[], $10::bigint[]) AS x(order_id, product_id, quantity)
   WHERE x.order_id IN (SELECT id FROM o)
), d AS (
  SELECT r.id, q.qty, r.read_stock, r.read_version, r.fence
    FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[]) AS r(id, read_stock, read_version, fence)
    JOIN (SELECT product_id, sum(quantity)::bigint AS qty FROM it GROUP BY product_id) q ON q.product_id = r.id
), u AS (
  `
	commitSkippingTail = `
  RETURNING p.id, p.max_per_customer, p.hold_for_seconds, p.max_held_per_customer
), ok AS (
  SELECT count(*) = (SELECT count(*) FROM d) AS ok FROM u
), itm AS (
  SELECT * FROM it
), ord AS (
  SELECT * FROM o
), i AS (
  INSERT INTO order_items (order_id, product_id, quantity)
  SELECT it.order_id, it.product_id, it.quantity FROM it, ok WHERE ok.ok
), cp AS (` + limitedUnits + `
), hd AS (` + orderHolds + `
), ch AS (` + heldUnits + `
)
` + insertOrders + `
RETURNING id, created_at, expires_at,
  (SELECT coalesce(json_agg(json_build_object('customer_id', k.customer_id, 'key', k.key, 'fingerprint', encode(k.fingerprint, 'base64'),
          'outcome', k.outcome, 'order_id', k.order_id, 'async_order_id', k.async_order_id, 'product_id', k.product_id,
          'requested', k.requested, 'available', k.available, 'created_at', k.created_at,
          'status', so.status, 'expires_at', so.expires_at, 'decided_at', so.decided_at)), '[]')
     FROM k LEFT JOIN orders so ON so.id = k.order_id WHERE NOT k.claimed)`
	commitSkippingSQL = commitSkippingHead + productionDecrement + commitSkippingTail
)

// lockRowsSQL takes a cart's product rows in ascending id order before its write, so that
// carts never deadlock in Postgres even when no Redis lock orders them (the demonstration
// modes without the lock layer).
const lockRowsSQL = `SELECT id FROM products WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// The outcome column of idempotency_keys.
const (
	recordConfirmed = "confirmed"
	recordSoldOut   = "sold_out"
	// recordFailed is the decision of an order accepted for later given up after failed
	// attempts (Accepted.Fail): stock.ErrGivenUp.
	recordFailed = "failed"
)

// lookupTimeout bounds the query that finds out whether a commit whose reply was lost happened.
const lookupTimeout = 2 * time.Second

// Snapshot implements Store. The levels are one cached statement; the records, when asked for,
// are read as Records reads them.
func (s *Store) Snapshot(ctx context.Context, ids []int64, keys []stock.RecordKey, customers []string) (stock.Snapshot, error) {
	snap := stock.Snapshot{Levels: make(map[int64]stock.Level, len(ids))}
	if customers == nil {
		customers = []string{} // NULL would match nobody too, but an empty array is what is meant
	}
	rows, _ := s.pool.Query(ctx, levelsSQL, ids, customers)
	var (
		id               int64
		l                stock.Level
		startsAt, endsAt *time.Time
		holdFor          int64 // seconds
		bought, held     []int64
		boughtBy, heldBy []string
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &l.Stock, &l.Version, &l.Fence, &startsAt, &endsAt, &l.Sale.MaxPerCustomer,
		&holdFor, &l.Sale.MaxHeldPerCustomer, &snap.Now, &boughtBy, &bought, &heldBy, &held}, func() error {
		lv := l
		lv.Sale.StartsAt, lv.Sale.EndsAt, lv.Sale.HoldFor = startsAt, endsAt, time.Duration(holdFor)*time.Second
		lv.Bought, lv.Held = byCustomer(boughtBy, bought), byCustomer(heldBy, held)
		snap.Levels[id] = lv
		return nil
	})
	if err != nil {
		return stock.Snapshot{}, dbError("read stock", err)
	}
	if snap.Records, err = s.Records(ctx, keys); err != nil {
		return stock.Snapshot{}, err
	}
	return snap, nil
}

// byCustomer pairs customers with their counts; nil when there are none.
func byCustomer(customers []string, counts []int64) map[string]int64 {
	if len(customers) == 0 {
		return nil
	}
	m := make(map[string]int64, len(customers))
	for i, c := range customers {
		m[c] = counts[i]
	}
	return m
}

// Records implements Store, with a query planned anew each time (pgx.QueryExecModeCacheDescribe):
// a cached plan made while idempotency_keys was nearly empty scans the whole table for each key
// once it has grown, and a new deployment's first sale is exactly when that happens. The
// purchase path asks for records only once a write has met a stored key, or a batch has failed
// and its keyed orders must not be refused while their keys have an outcome, so the hot path
// never runs it.
func (s *Store) Records(ctx context.Context, keys []stock.RecordKey) (map[stock.RecordKey]stock.IdempotencyRecord, error) {
	records := map[stock.RecordKey]stock.IdempotencyRecord{}
	if len(keys) == 0 {
		return records, nil
	}
	customers, names := make([]string, len(keys)), make([]string, len(keys))
	for i, k := range keys {
		customers[i], names[i] = k.CustomerID, k.Key
	}
	rows, _ := s.pool.Query(ctx, recordsSQL, pgx.QueryExecModeCacheDescribe, customers, names)
	defer rows.Close()
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		records[rec.RecordKey] = rec
	}
	if err := rows.Err(); err != nil {
		return nil, dbError("read idempotency records", err)
	}
	// A key's order — confirmed, or accepted for later — is shown to its client again: only
	// once a synchronous standby has it (see replicated), which it has unless its commit's
	// wait was ended early.
	for _, rec := range records {
		if rec.Order != nil || rec.Accepted != nil {
			if err := s.replicated(ctx); err != nil {
				return nil, notReplicated("read idempotency records", err)
			}
			break
		}
	}
	return records, nil
}

func scanRecord(rows pgx.Rows) (stock.IdempotencyRecord, error) {
	var (
		rec                             stock.IdempotencyRecord
		outcome                         string
		orderID, acceptedID             *uuid.UUID
		productID, requested, available *int64
		customerID                      *string
		createdAt                       *time.Time
		itemProducts, itemQuantities    []int64
	)
	var status *string
	var expiresAt, decidedAt *time.Time
	err := rows.Scan(&rec.CustomerID, &rec.Key, &rec.Fingerprint, &outcome, &orderID, &acceptedID, &productID, &requested, &available,
		&customerID, &createdAt, &status, &expiresAt, &decidedAt, &itemProducts, &itemQuantities)
	if err != nil {
		return stock.IdempotencyRecord{}, err
	}
	if outcome == recordFailed {
		rec.GivenUp = true
		return rec, nil
	}
	if acceptedID != nil {
		rec.Accepted = acceptedID
		return rec, nil
	}
	if orderID == nil {
		rec.SoldOut = &stock.SoldOutError{ProductID: deref(productID), Requested: deref(requested), Available: deref(available)}
		return rec, nil
	}
	if customerID == nil || createdAt == nil || status == nil || len(itemProducts) != len(itemQuantities) {
		return stock.IdempotencyRecord{}, fmt.Errorf("idempotency record %q names order %s, which is incomplete", rec.Key, orderID)
	}
	o := stock.Order{ID: *orderID, CustomerID: *customerID, Status: *status, CreatedAt: *createdAt,
		ExpiresAt: expiresAt, DecidedAt: decidedAt, Items: make([]stock.Item, len(itemProducts))}
	for i := range itemProducts {
		o.Items[i] = stock.Item{ProductID: itemProducts[i], Quantity: itemQuantities[i]}
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

// skipAfterStored is how many writes that may leave orders out go straight to
// commitSkippingSQL after one found a key stored (see Commit).
const skipAfterStored = 256

// Commit implements Store. A write that may leave out the orders whose key another request
// stored (w.SkipStored) is first sent as the all-or-nothing commitSQL, which costs Postgres
// about a tenth less per order than commitSkippingSQL (BenchmarkCommitBatch: no speculative
// insertion of the keys, no joins to find the orders claimed), and which fails, having written
// nothing, on a key stored meanwhile; only then is it sent again as commitSkippingSQL. Retries
// come in bursts (a client's timeout, a balancer's failover), so after a key found stored the
// next skipAfterStored such writes go straight to commitSkippingSQL, and a retry storm pays
// one failed statement per skipAfterStored batches, not one per batch (and one more round
// trip: pgx forgets a statement that failed, so commitSQL is prepared again).
func (s *Store) Commit(ctx context.Context, w stock.Write) (stock.Committed, error) {
	if !w.SkipStored {
		return s.commitWrite(ctx, w)
	}
	if s.skipping.Load() > 0 {
		s.skipping.Add(-1)
		return s.commitWrite(ctx, w)
	}
	whole := w
	whole.SkipStored = false
	c, err := s.commitWrite(ctx, whole)
	if !constraintViolated(err, "23505", "idempotency_keys_pkey") {
		return c, err
	}
	s.skipping.Store(skipAfterStored)
	return s.commitWrite(ctx, w)
}

// commitWrite runs w as one write statement: commitSkippingSQL when w.SkipStored, else
// commitSQL.
func (s *Store) commitWrite(ctx context.Context, w stock.Write) (stock.Committed, error) {
	sql, args := s.commit, commitArgs(w)
	if w.SkipStored {
		sql, args = s.commitSkipping, commitSkippingArgs(w)
	}
	var (
		res batchResult
		err error
	)
	if len(w.Decrements) > 1 {
		res, err = s.commitCart(ctx, w, sql, args)
	} else {
		res, err = s.commitOne(ctx, w, sql, args)
	}
	var pgErr *pgconn.PgError
	switch {
	case err == nil:
		return s.committed(w, res)
	case constraintViolated(err, "23514", "products_stock_nonnegative"):
		return stock.Committed{}, &stock.CaughtError{Layer: stock.LayerCheck, ProductID: checkedProduct(w), Err: fmt.Errorf("%w: %w", stock.ErrConflict, err)}
	case constraintViolated(err, "23514", "customer_purchases_within_limit"):
		// Only a write decided without the limit (its check off, a demonstration) gets here.
		return stock.Committed{}, &stock.CaughtError{Layer: stock.LayerLimit, ProductID: checkedProduct(w), Err: fmt.Errorf("%w: %w", stock.ErrConflict, err)}
	case constraintViolated(err, "23514", "customer_holds_within_limit"):
		// As for the limit: only a write decided without the cap gets here.
		return stock.Committed{}, &stock.CaughtError{Layer: stock.LayerHoldLimit, ProductID: checkedProduct(w), Err: fmt.Errorf("%w: %w", stock.ErrConflict, err)}
	case constraintViolated(err, "23505", "idempotency_keys_pkey"):
		return stock.Committed{}, fmt.Errorf("%w: an idempotency key was stored meanwhile: %w", stock.ErrConflict, err)
	case constraintViolated(err, "23503", "idempotency_keys_order_id_fkey"):
		// commitSkippingSQL's claims outlived orders that a refused decrement kept out.
		return stock.Committed{}, &stock.RefusedError{Conditions: s.conditions, Reason: "a decrement matched no row"}
	case errors.As(err, &pgErr), pgconn.SafeToRetry(err):
		// Postgres refused the statement, or it was never sent: nothing was written.
		return stock.Committed{}, dbError("commit batch", err)
	}
	// The reply was lost (a broken connection, a deadline): the batch may have committed.
	return s.findCommit(ctx, w, err)
}

// committed reads what a write that ran without error did: every order written, or — with
// w.SkipStored — some left out. A write that confirmed orders and wrote none of them was
// refused (or, with w.SkipStored, left them all out): either way nothing was written.
func (s *Store) committed(w stock.Write, res batchResult) (stock.Committed, error) {
	if len(w.Orders) == 0 {
		return stock.Committed{At: time.Now()}, nil
	}
	if len(res.written) == 0 {
		return stock.Committed{}, &stock.RefusedError{Conditions: s.conditions, Reason: "a decrement matched no row, or every order's key was stored meanwhile"}
	}
	c := stock.Committed{}
	for _, o := range w.Orders {
		at, ok := res.written[o.ID]
		if !ok {
			c.Skipped = append(c.Skipped, o.ID)
			continue
		}
		c.At = at
		if expires, held := res.holds[o.ID]; held {
			if c.Holds == nil {
				c.Holds = map[uuid.UUID]time.Time{}
			}
			c.Holds[o.ID] = expires
		}
	}
	if len(c.Skipped) > 0 && !w.SkipStored {
		return stock.Committed{}, fmt.Errorf("stock: commit wrote %d of %d orders of an all-or-nothing write", len(res.written), len(w.Orders))
	}
	if len(c.Skipped) > 0 && len(res.stored) > 0 {
		// Best effort: a record this cannot read is read again by its own query.
		c.Stored, _ = parseStored(res.stored)
	}
	return c, nil
}

// storedJSON is one record as commitSkippingSQL returns those of the keys it left out.
type storedJSON struct {
	CustomerID   string     `json:"customer_id"`
	Key          string     `json:"key"`
	Fingerprint  []byte     `json:"fingerprint"` // base64, as encoding/json reads []byte
	Outcome      string     `json:"outcome"`
	OrderID      *uuid.UUID `json:"order_id"`
	AsyncOrderID *uuid.UUID `json:"async_order_id"`
	ProductID    *int64     `json:"product_id"`
	Requested    *int64     `json:"requested"`
	Available    *int64     `json:"available"`
	CreatedAt    time.Time  `json:"created_at"`
	// The order's state now: a hold may have been confirmed, cancelled or expired since.
	Status    string     `json:"status"`
	ExpiresAt *time.Time `json:"expires_at"`
	DecidedAt *time.Time `json:"decided_at"`
}

// parseStored reads the records commitSkippingSQL returned (see Committed.Stored for what a
// confirmed order's record holds).
func parseStored(raw []byte) (map[stock.RecordKey]stock.IdempotencyRecord, error) {
	var list []storedJSON
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, fmt.Errorf("read the stored records a write returned: %w", err)
	}
	records := make(map[stock.RecordKey]stock.IdempotencyRecord, len(list))
	for _, r := range list {
		rec := stock.IdempotencyRecord{RecordKey: stock.RecordKey{CustomerID: r.CustomerID, Key: r.Key}, Fingerprint: r.Fingerprint}
		switch {
		case r.Outcome == recordFailed:
			rec.GivenUp = true
		case r.AsyncOrderID != nil:
			rec.Accepted = r.AsyncOrderID
		case r.OrderID == nil:
			rec.SoldOut = &stock.SoldOutError{ProductID: deref(r.ProductID), Requested: deref(r.Requested), Available: deref(r.Available)}
		default:
			rec.Order = &stock.Order{ID: *r.OrderID, Status: r.Status, CreatedAt: r.CreatedAt, ExpiresAt: r.ExpiresAt, DecidedAt: r.DecidedAt}
			if rec.Order.Status == "" {
				rec.Order.Status = stock.OrderStatusConfirmed
			}
		}
		records[rec.RecordKey] = rec
	}
	return records, nil
}

// commitCart writes a batch over several products in an explicit transaction: a decrement that
// matches no row must undo those that matched, which one statement alone cannot do.
func (s *Store) commitCart(ctx context.Context, w stock.Write, sql string, args []any) (res batchResult, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return batchResult{}, err
	}
	// Nothing written (a refused decrement) must not be committed either: the statement may
	// have written part of it.
	refused := func() bool { return len(w.Orders) > 0 && len(res.written) == 0 }
	defer func() {
		if err != nil || refused() {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	ids := make([]int64, len(w.Decrements))
	for i, d := range w.Decrements {
		ids[i] = d.ProductID
	}
	if _, err := tx.Exec(ctx, lockRowsSQL, ids); err != nil {
		return batchResult{}, err
	}
	if res, err = writeBatch(ctx, tx, sql, w.SkipStored, args); err != nil || refused() {
		return res, err
	}
	cancelledSyncWait(tx.Conn().PgConn())
	if err := tx.Commit(ctx); err != nil {
		return res, err
	}
	if cancelledSyncWait(tx.Conn().PgConn()) {
		return batchResult{}, errNotReplicated // looked up, as a commit whose answer was lost
	}
	return res, nil
}

// commitOne runs a single product's write, one statement, on a connection of its own, so as
// to know whether Postgres ended its commit's wait for a synchronous standby early: such a
// commit is treated as one whose answer was lost (errNotReplicated), and looked up.
func (s *Store) commitOne(ctx context.Context, w stock.Write, sql string, args []any) (batchResult, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return batchResult{}, err
	}
	defer conn.Release()
	cancelledSyncWait(conn.Conn().PgConn())
	res, err := writeBatch(ctx, conn, sql, w.SkipStored, args)
	if err == nil && cancelledSyncWait(conn.Conn().PgConn()) {
		return batchResult{}, errNotReplicated
	}
	return res, err
}

// batchResult is what a commit statement returned: the orders it wrote, with their time, and
// (commitSkippingSQL) the records of the keys it left out, as JSON.
type batchResult struct {
	written map[uuid.UUID]time.Time
	holds   map[uuid.UUID]time.Time // expires_at of the orders written held
	stored  []byte
}

// writeBatch runs a commit statement on q; skipping says it is commitSkippingSQL.
func writeBatch(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, sql string, skipping bool, args []any) (batchResult, error) {
	rows, _ := q.Query(ctx, sql, args...)
	res := batchResult{written: map[uuid.UUID]time.Time{}}
	var (
		id      uuid.UUID
		at      time.Time
		expires *time.Time
		stored  []byte
	)
	dest := []any{&id, &at, &expires}
	if skipping {
		dest = append(dest, &stored)
	}
	_, err := pgx.ForEachRow(rows, dest, func() error {
		res.written[id] = at
		if expires != nil {
			if res.holds == nil {
				res.holds = map[uuid.UUID]time.Time{}
			}
			res.holds[id] = *expires
		}
		if skipping && res.stored == nil {
			res.stored = bytes.Clone(stored) // the same on every row
		}
		return nil
	})
	if err != nil {
		return batchResult{}, err
	}
	return res, nil
}

// findCommitSQL finds which of a batch's orders exist. Planned anew each time, like recordsSQL:
// it runs rarely, and a plan cached while orders was small would scan it.
const findCommitSQL = `SELECT id, created_at, expires_at FROM orders WHERE id = ANY($1)`

// findCommit finds out whether a batch whose commit went unanswered committed: its orders
// exist or none does, since the write is one transaction (with w.SkipStored, those that exist
// are the ones written). A batch that confirmed nothing only stored refusals, which are true
// either way.
func (s *Store) findCommit(ctx context.Context, w stock.Write, cause error) (stock.Committed, error) {
	if len(w.Orders) == 0 {
		return stock.Committed{At: time.Now()}, nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
	defer cancel()
	ids := make([]uuid.UUID, len(w.Orders))
	for i, o := range w.Orders {
		ids[i] = o.ID
	}
	rows, _ := s.pool.Query(ctx, findCommitSQL, pgx.QueryExecModeCacheDescribe, ids)
	found := batchResult{written: map[uuid.UUID]time.Time{}}
	var id uuid.UUID
	var at time.Time
	var expires *time.Time
	_, err := pgx.ForEachRow(rows, []any{&id, &at, &expires}, func() error {
		found.written[id] = at
		if expires != nil {
			if found.holds == nil {
				found.holds = map[uuid.UUID]time.Time{}
			}
			found.holds[id] = *expires
		}
		return nil
	})
	switch {
	case err != nil:
		return stock.Committed{}, fmt.Errorf("%w: %w: commit batch (%w), and looking it up failed: %v", stock.ErrUnavailable, stock.ErrOutcomeUnknown, cause, err)
	case len(found.written) == 0:
		// Not committed as far as Postgres can tell now. A statement still running on a
		// connection the server has not yet seen close could commit later, so this is
		// "unavailable" — retry with the same key — and never "not sold".
		return stock.Committed{}, fmt.Errorf("%w: %w: commit batch: %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown, cause)
	}
	// Found: on this primary, at least. A commit whose wait for its synchronous standby was
	// ended early is visible here too, and a failover would lose it: confirm the orders only
	// once a standby has them.
	if err := s.replicated(ctx); err != nil {
		return stock.Committed{}, fmt.Errorf("%w: %w: commit batch (%w): found, but %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown, cause, notReplicated("look it up", err))
	}
	return s.committed(w, found)
}

// checkedProduct names the product whose CHECK refused a single-product write; for a cart,
// Postgres's error does not say which of its products it was.
func checkedProduct(w stock.Write) int64 {
	if len(w.Decrements) == 1 {
		return w.Decrements[0].ProductID
	}
	return 0
}

// commitArgs lays w out as commitSQL's array parameters. Every slice is non-nil: pgx sends a nil
// slice as NULL, and cardinality(NULL) would make an empty decrement list look refused.
func commitArgs(w stock.Write) []any {
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
	recCustomers, keys, fingerprints, outcomes := make([]string, r), make([]string, r), make([][]byte, r), make([]string, r)
	recOrders := make([]pgtype.UUID, r) // not Valid: NULL, for a refusal
	recProducts, recRequested, recAvailable := make([]*int64, r), make([]*int64, r), make([]*int64, r)
	for i, rec := range w.Records {
		recCustomers[i], keys[i], fingerprints[i] = rec.CustomerID, rec.Key, rec.Fingerprint
		if rec.Order != nil {
			outcomes[i], recOrders[i] = recordConfirmed, pgtype.UUID{Bytes: rec.Order.ID, Valid: true}
			continue
		}
		outcomes[i] = recordSoldOut
		recProducts[i], recRequested[i], recAvailable[i] = &rec.SoldOut.ProductID, &rec.SoldOut.Requested, &rec.SoldOut.Available
	}
	return []any{ids, qtys, stocks, versions, fences, orderIDs, customers, itemOrders, itemProducts, itemQtys,
		recCustomers, keys, fingerprints, outcomes, recOrders, recProducts, recRequested, recAvailable}
}

// commitSkippingArgs lays w out as commitSkippingSQL's array parameters (every slice non-nil,
// as for commitArgs). Its records are all confirmed orders: a write with refusals never skips.
func commitSkippingArgs(w stock.Write) []any {
	n := len(w.Decrements)
	ids, stocks, versions, fences := make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for i, d := range w.Decrements {
		ids[i], stocks[i], versions[i], fences[i] = d.ProductID, d.Read.Stock, d.Read.Version, d.Fence
	}
	r := len(w.Records)
	recCustomers, keys, fingerprints, recOrders := make([]string, r), make([]string, r), make([][]byte, r), make([]pgtype.UUID, r)
	keyed := make(map[uuid.UUID]bool, r)
	for i, rec := range w.Records {
		recCustomers[i], keys[i], fingerprints[i] = rec.CustomerID, rec.Key, rec.Fingerprint
		recOrders[i] = pgtype.UUID{Bytes: rec.Order.ID, Valid: true}
		keyed[rec.Order.ID] = true
	}
	orderIDs, customers, orderKeyed := make([]pgtype.UUID, len(w.Orders)), make([]string, len(w.Orders)), make([]bool, len(w.Orders))
	itemOrders, itemProducts, itemQtys := []pgtype.UUID{}, []int64{}, []int64{}
	for i, o := range w.Orders {
		id := pgtype.UUID{Bytes: o.ID, Valid: true}
		orderIDs[i], customers[i], orderKeyed[i] = id, o.CustomerID, keyed[o.ID]
		for _, it := range o.Items {
			itemOrders = append(itemOrders, id)
			itemProducts = append(itemProducts, it.ProductID)
			itemQtys = append(itemQtys, it.Quantity)
		}
	}
	return []any{ids, stocks, versions, fences, orderIDs, customers, orderKeyed, itemOrders, itemProducts, itemQtys,
		recCustomers, keys, fingerprints, recOrders}
}
