package async

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// insertCartSQL accepts a cart (in no product's line: product_id stays NULL).
const insertCartSQL = `
INSERT INTO async_orders (id, customer_id, product_ids, quantities)
VALUES ($1, $2, $3, $4)
RETURNING accepted_at`

// claimKeySQL records a client's Idempotency-Key as belonging to the accepted order, unless
// the key already has an outcome (then nothing is written and no row returned).
const claimKeySQL = `
INSERT INTO idempotency_keys (key, fingerprint, outcome, async_order_id, product_id)
VALUES ($1, $2, 'accepted', $3, $4)
ON CONFLICT (key) DO NOTHING
RETURNING key`

// keyRecordSQL reads what a key already holds.
const keyRecordSQL = `
SELECT fingerprint, outcome, order_id, async_order_id, product_id, requested, available
  FROM idempotency_keys WHERE key = $1`

// lineSQL reads the front of a product's line.
const lineSQL = `
SELECT id, customer_id, product_ids, quantities
  FROM async_orders
 WHERE product_id = $1 AND status = 'pending'
 ORDER BY seq
 LIMIT $2`

// orderSQL reads an accepted order and, while it is pending, the decision the purchase path
// may already have stored for it (a replica can stop between the commit and the copy).
const orderSQL = `
SELECT a.id, a.customer_id, a.product_ids, a.quantities, a.status, a.reason, a.rejected_product,
       a.requested, a.available, a.accepted_at, a.decided_at,
       k.outcome, k.product_id, k.requested, k.available, k.created_at
  FROM async_orders a
  LEFT JOIN idempotency_keys k ON a.status = 'pending' AND k.key = $2
 WHERE a.id = $1`

// storeRefusalsSQL stores the refusals the purchase path answered without storing (it stores
// those of a batch that also sells; a batch refused whole from a read stores them at best), so
// that every decision is a record before it is copied. A key that has a record keeps it.
const storeRefusalsSQL = `
INSERT INTO idempotency_keys (key, fingerprint, outcome, product_id, requested, available)
SELECT * FROM unnest($1::text[], $2::bytea[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[])
ON CONFLICT (key) DO NOTHING`

// copyDecisionsSQL copies each order's decision — its key's record — into the order, once, and
// returns the orders it decided with how long each waited (on Postgres's clock, the same one
// that stamped its acceptance).
const copyDecisionsSQL = `
UPDATE async_orders a
   SET status = CASE k.outcome WHEN 'confirmed' THEN 'confirmed' ELSE 'rejected' END,
       reason = CASE k.outcome WHEN 'confirmed' THEN NULL ELSE 'sold-out' END,
       rejected_product = k.product_id, requested = k.requested, available = k.available,
       decided_at = greatest(k.created_at, a.accepted_at)
  FROM idempotency_keys k
 WHERE a.id = ANY($1) AND a.status = 'pending' AND k.key = $2 || a.id::text
RETURNING a.status, extract(epoch FROM a.decided_at - a.accepted_at)::float8`

// rejectSQL rejects orders whose refusal is not an idempotency record (a product that went
// missing, a rule that changed): there is nothing to replay, so the order row is the decision.
const rejectSQL = `
UPDATE async_orders
   SET status = 'rejected', reason = $2, decided_at = greatest(now(), accepted_at)
 WHERE id = $1 AND status = 'pending'
RETURNING extract(epoch FROM decided_at - accepted_at)::float8`

// failSQL counts a failed attempt to decide an order, and rejects it (reason internal) at the
// attempt that reaches the cap ($2). An order whose decision is a record after all is left to
// be copied: the record is the truth. The error is kept for operators.
const failSQL = `
UPDATE async_orders a
   SET attempts = a.attempts + 1,
       last_error = left($3, 2000),
       status = CASE WHEN a.attempts + 1 >= $2 THEN 'rejected' ELSE 'pending' END,
       reason = CASE WHEN a.attempts + 1 >= $2 THEN 'internal' END,
       decided_at = CASE WHEN a.attempts + 1 >= $2 THEN greatest(now(), a.accepted_at) END
 WHERE a.id = $1 AND a.status = 'pending'
   AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.key = $4)
RETURNING a.status, a.attempts, extract(epoch FROM coalesce(a.decided_at, a.accepted_at) - a.accepted_at)::float8`

// staleSQL finds what waits without being drained: the lines whose front is older than $1, and
// the carts older than $2 (a cart's own job retries it long before that).
const staleSQL = `
SELECT DISTINCT product_id, NULL::uuid FROM async_orders
 WHERE status = 'pending' AND product_id IS NOT NULL AND accepted_at < now() - $1::interval
UNION ALL
SELECT NULL, id FROM async_orders
 WHERE status = 'pending' AND product_id IS NULL AND accepted_at < now() - $2::interval
 LIMIT 1000`

const pendingCountSQL = `SELECT count(*) FROM async_orders WHERE status = 'pending'`

// oldestPendingSQL returns how long the front of each line has waited, longest first, the
// carts counting as one line: one pass over the pending orders, as the count above.
const oldestPendingSQL = `
SELECT coalesce(product_id::text, 'cart'), greatest(extract(epoch FROM now() - min(accepted_at)), 0)::float8
  FROM async_orders
 WHERE status = 'pending'
 GROUP BY product_id
 ORDER BY 2 DESC
 LIMIT $1`

type pgStore struct {
	pool *pgxpool.Pool
}

func dbError(op string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %w", stock.ErrUnavailable, op, err)
}

// keyRecord is what an Idempotency-Key held when an order tried to claim it.
type keyRecord struct {
	fingerprint []byte
	outcome     string
	orderID     *uuid.UUID
	asyncID     *uuid.UUID
	productID   *int64
	requested   *int64
	available   *int64
}

// rowQuerier is a pool or a transaction.
type rowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (s *pgStore) keyRecord(ctx context.Context, q rowQuerier, key string) (keyRecord, error) {
	var r keyRecord
	err := q.QueryRow(ctx, keyRecordSQL, key).Scan(&r.fingerprint, &r.outcome, &r.orderID, &r.asyncID, &r.productID, &r.requested, &r.available)
	if err != nil {
		return keyRecord{}, dbError("read idempotency record", err)
	}
	return r, nil
}

func splitItems(items []stock.Item) (ids, qtys []int64) {
	ids, qtys = make([]int64, len(items)), make([]int64, len(items))
	for i, it := range items {
		ids[i], qtys[i] = it.ProductID, it.Quantity
	}
	return ids, qtys
}

func joinItems(ids, qtys []int64) []stock.Item {
	items := make([]stock.Item, len(ids))
	for i := range ids {
		items[i] = stock.Item{ProductID: ids[i], Quantity: qtys[i]}
	}
	return items
}

// missingProduct returns the first of ids that is not a product.
func missingProduct(ctx context.Context, tx pgx.Tx, ids []int64) (int64, bool, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM products WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, false, dbError("look up products", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, false, dbError("look up products", err)
	}
	for _, id := range ids {
		if !slices.Contains(found, id) {
			return id, true, nil
		}
	}
	return 0, false, nil
}

// pending is an order at the front of its line.
type pending struct {
	id         uuid.UUID
	customerID string
	items      []stock.Item
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// line reads the front of product's line through q.
func (s *pgStore) line(ctx context.Context, q querier, productID int64, limit int) ([]pending, error) {
	rows, err := q.Query(ctx, lineSQL, productID, limit)
	if err != nil {
		return nil, dbError("read line", err)
	}
	var out []pending
	var ids, qtys []int64
	var p pending
	_, err = pgx.ForEachRow(rows, []any{&p.id, &p.customerID, &ids, &qtys}, func() error {
		out = append(out, pending{id: p.id, customerID: p.customerID, items: joinItems(ids, qtys)})
		return nil
	})
	if err != nil {
		return nil, dbError("read line", err)
	}
	return out, nil
}

func (s *pgStore) order(ctx context.Context, id uuid.UUID) (Order, error) {
	var (
		o                                Order
		ids, qtys                        []int64
		reason, kOutcome                 *string
		rProduct, rRequested, rAvailable *int64
		kProduct, kRequested, kAvailable *int64
		decidedAt, kCreated              *time.Time
	)
	err := s.pool.QueryRow(ctx, orderSQL, id, stock.AcceptedKey(id)).Scan(&o.ID, &o.CustomerID, &ids, &qtys, &o.Status,
		&reason, &rProduct, &rRequested, &rAvailable, &o.AcceptedAt, &decidedAt,
		&kOutcome, &kProduct, &kRequested, &kAvailable, &kCreated)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, stock.ErrOrderNotFound
	}
	if err != nil {
		return Order{}, dbError("read accepted order", err)
	}
	o.Items = joinItems(ids, qtys)
	o.copied = o.Status != StatusPending
	if decidedAt != nil {
		o.DecidedAt = *decidedAt
	}
	if reason != nil {
		o.Rejection = &Rejection{Reason: Reason(*reason), ProductID: deref(rProduct), Requested: deref(rRequested), Available: deref(rAvailable)}
	}
	// Decided, not yet copied: the record is the decision.
	if o.Status == StatusPending && kOutcome != nil {
		o.DecidedAt = *kCreated
		if *kOutcome == "confirmed" {
			o.Status = StatusConfirmed
		} else {
			o.Status = StatusRejected
			o.Rejection = &Rejection{Reason: ReasonSoldOut, ProductID: deref(kProduct), Requested: deref(kRequested), Available: deref(kAvailable)}
		}
	}
	return o, nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// decided is one order's decision as copied.
type decided struct {
	status string
	waited time.Duration
}

// record makes the decisions of orders final: refusals the purchase path did not store are
// stored, and every order with a record gets its decision copied. Orders whose decision is no
// record (rejects) are rejected with their reason. It returns what was decided by this call.
func (s *pgStore) record(ctx context.Context, orders []pending, decisions []stock.Decision, rejects map[uuid.UUID]Reason) ([]decided, error) {
	var keys, outcomes []string
	var fingerprints [][]byte
	var products, requested, available []int64
	ids := make([]uuid.UUID, 0, len(orders))
	for i, o := range orders {
		d := decisions[i]
		if _, ok := rejects[o.id]; ok {
			continue
		}
		if soldOut, ok := errors.AsType[*stock.SoldOutError](d.Err); ok {
			keys = append(keys, stock.AcceptedKey(o.id))
			fingerprints = append(fingerprints, stock.Fingerprint(o.customerID, o.items))
			outcomes = append(outcomes, "sold_out")
			products, requested, available = append(products, soldOut.ProductID), append(requested, soldOut.Requested), append(available, soldOut.Available)
		}
		// Every order's record is copied if it has one, decided by this round or not: an
		// order that failed may have been decided by an earlier round whose copy was lost.
		ids = append(ids, o.id)
	}
	var out []decided
	if len(ids) > 0 {
		b := &pgx.Batch{}
		if len(keys) > 0 {
			b.Queue(storeRefusalsSQL, keys, fingerprints, outcomes, products, requested, available)
		}
		b.Queue(copyDecisionsSQL, ids, stock.AcceptedKeyPrefix).
			Query(func(rows pgx.Rows) error {
				var d decided
				var secs float64
				_, err := pgx.ForEachRow(rows, []any{&d.status, &secs}, func() error {
					d.waited = time.Duration(secs * float64(time.Second))
					out = append(out, d)
					return nil
				})
				return err
			})
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return nil, dbError("record decisions", err)
		}
	}
	for id, code := range rejects {
		var secs float64
		err := s.pool.QueryRow(ctx, rejectSQL, id, code).Scan(&secs)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return out, dbError("reject order", err)
		}
		out = append(out, decided{status: StatusRejected, waited: time.Duration(secs * float64(time.Second))})
	}
	return out, nil
}

// failure is what counting a failed attempt did: the order's status ("" when the order was
// no longer pending, or had a record), its attempts, and, when rejected, how long it waited.
type failure struct {
	status   string
	attempts int
	waited   time.Duration
}

// fail counts a failed attempt to decide order id, rejecting it at the attempt that reaches
// maxAttempts.
func (s *pgStore) fail(ctx context.Context, id uuid.UUID, maxAttempts int, cause string) (failure, error) {
	var f failure
	var secs float64
	err := s.pool.QueryRow(ctx, failSQL, id, maxAttempts, cause, stock.AcceptedKey(id)).Scan(&f.status, &f.attempts, &secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return failure{}, nil
	}
	if err != nil {
		return failure{}, dbError("count a failed attempt", err)
	}
	f.waited = time.Duration(secs * float64(time.Second))
	return f, nil
}

// stale returns the products whose line waits undrained and the carts that wait undecided.
func (s *pgStore) stale(ctx context.Context, line, cart time.Duration) ([]int64, []uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, staleSQL, line, cart)
	if err != nil {
		return nil, nil, dbError("find stale lines", err)
	}
	var products []int64
	var carts []uuid.UUID
	var product *int64
	var cartID *uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&product, &cartID}, func() error {
		if product != nil {
			products = append(products, *product)
		} else if cartID != nil {
			carts = append(carts, *cartID)
		}
		return nil
	})
	if err != nil {
		return nil, nil, dbError("find stale lines", err)
	}
	return products, carts, nil
}
