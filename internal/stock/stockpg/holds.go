package stockpg

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// confirmHoldSQL confirms a hold that has not expired by Postgres's clock — the one condition
// that decides a confirm against an expiry or a cancel, whichever reaches the row first — and
// in the same statement takes its units off its customer's held units (customer_holds; the
// units stay bought, in customer_purchases), never below 0 (see releaseHoldsSQL). Those counts
// are locked in ascending product order, as every other writer of them locks them, so that a
// cart's confirm never waits for a sale or a release that waits for it. It returns how many
// orders it confirmed: 1 or 0.
const confirmHoldSQL = `
WITH o AS (
  UPDATE orders SET status = 'confirmed', decided_at = now()
   WHERE id = $1 AND status = 'held' AND expires_at > now()
  RETURNING id, customer_id
), q AS (
  SELECT i.product_id, o.customer_id, sum(i.quantity)::bigint AS qty
    FROM order_items i JOIN o ON o.id = i.order_id
   GROUP BY i.product_id, o.customer_id
), lk AS (
  SELECT c.product_id, c.customer_id, q.qty
    FROM customer_holds c JOIN q ON q.product_id = c.product_id AND q.customer_id = c.customer_id
   ORDER BY c.product_id
     FOR UPDATE OF c
), h AS (
  UPDATE customer_holds c SET held = greatest(c.held - lk.qty, 0)
    FROM lk WHERE c.product_id = lk.product_id AND c.customer_id = lk.customer_id
)
SELECT count(*) FROM o`

// ConfirmHold implements Store. A confirm is the payment's receipt: one acknowledged from the
// primary alone (Postgres ended its commit's wait for the synchronous standby early, syncrep.go)
// would be lost by a failover, and the hold would then expire and its units be sold again. So
// such a commit answers unavailable, outcome unknown (the client confirms again), and a hold
// found confirmed by an earlier call is answered only once a standby has it.
func (s *Store) ConfirmHold(ctx context.Context, id uuid.UUID) (stock.Order, error) {
	changed, err := s.confirmHold(ctx, id)
	if err != nil {
		return stock.Order{}, err
	}
	o, err := s.Order(ctx, id)
	if err != nil {
		return stock.Order{}, err
	}
	switch o.Status {
	case stock.OrderStatusConfirmed:
		if !changed {
			if err := s.replicated(ctx); err != nil {
				return stock.Order{}, notReplicated("confirm hold", err)
			}
		}
		return o, nil
	case stock.OrderStatusCancelled:
		return stock.Order{}, stock.ErrOrderCancelled
	}
	// Expired, or still held but past expires_at (its expiry is due): not confirmed.
	return stock.Order{}, stock.ErrHoldExpired
}

// confirmHold runs confirmHoldSQL so as to see the warning of a commit whose wait for a
// synchronous standby was ended early (writeReplicated); it reports whether it confirmed.
func (s *Store) confirmHold(ctx context.Context, id uuid.UUID) (bool, error) {
	var confirmed int
	err := writeReplicated(ctx, s.pool, "confirm hold", func(conn *pgxpool.Conn) error {
		if err := conn.QueryRow(ctx, confirmHoldSQL, id).Scan(&confirmed); err != nil {
			return dbError("confirm hold", err)
		}
		return nil
	})
	return confirmed == 1, err
}

// lockProductsSQL takes the products' rows in ascending id order before a release raises
// them, as a cart's write does: releases and carts never wait for each other in a cycle.
const lockProductsSQL = `SELECT id FROM products WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// releaseHoldsSQL ends the holds among $1 that are still held — cancelled, or with $2,
// expired once expires_at has passed — and in the same statement gives their units back: to
// the products' stock (the version moves, so a batch decided from before is refused and reads
// again) and to the customers' counts, what they bought and what they hold. A hold already
// ended is not matched, so its units are never given back twice. It returns the products
// raised, the holds it ended and each one's lag (expires_at to now).
//
// The held counts are locked in ascending (product, customer) order, as the statement that
// sells takes them, and a confirm, so that none of them waits for another in a cycle. A held
// count never goes below 0: a hold written by a replica from before customer_holds (a rolling
// upgrade across migration 12) was never counted, and its release must not fail for it.
const releaseHoldsSQL = `
WITH r AS (
  UPDATE orders SET status = CASE WHEN $2 THEN 'expired' ELSE 'cancelled' END, decided_at = now()
   WHERE id = ANY($1) AND status = 'held' AND (NOT $2 OR expires_at <= now())
  RETURNING id, customer_id, extract(epoch FROM now() - expires_at)::float8 AS lag
), it AS (
  SELECT i.product_id, r.customer_id, sum(i.quantity)::bigint AS qty
    FROM order_items i JOIN r ON r.id = i.order_id
   GROUP BY i.product_id, r.customer_id
), c AS (
  UPDATE customer_purchases c SET bought = c.bought - it.qty
    FROM it WHERE c.product_id = it.product_id AND c.customer_id = it.customer_id
), hl AS (
  SELECT c.product_id, c.customer_id, it.qty
    FROM customer_holds c JOIN it ON it.product_id = c.product_id AND it.customer_id = c.customer_id
   ORDER BY c.product_id, c.customer_id
     FOR UPDATE OF c
), h AS (
  UPDATE customer_holds c SET held = greatest(c.held - hl.qty, 0)
    FROM hl WHERE c.product_id = hl.product_id AND c.customer_id = hl.customer_id
), p AS (
  UPDATE products p SET stock = p.stock + q.qty, version = p.version + 1, updated_at = now()
    FROM (SELECT product_id, sum(qty)::bigint AS qty FROM it GROUP BY product_id) q
   WHERE p.id = q.product_id
  RETURNING p.id
)
SELECT (SELECT coalesce(array_agg(p.id), '{}') FROM p), (SELECT coalesce(array_agg(r.id), '{}') FROM r),
       (SELECT coalesce(array_agg(r.lag), '{}') FROM r), (SELECT coalesce(sum(qty), 0)::bigint FROM it)`

// ReleaseHolds implements Store. A release Postgres committed without its synchronous standby
// is not acknowledged (inTx): a cancel so answered is retried, and finds the hold ended once a
// standby has it (Service.Cancel asks Replicated).
func (s *Store) ReleaseHolds(ctx context.Context, ids []uuid.UUID, products []int64, expire bool) (stock.Released, error) {
	rel := stock.Released{Lag: map[uuid.UUID]time.Duration{}}
	err := s.inTx(ctx, "release holds", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockProductsSQL, products); err != nil {
			return dbError("lock products", err)
		}
		var (
			raised   []int64
			released []uuid.UUID
			lags     []float64
		)
		if err := tx.QueryRow(ctx, releaseHoldsSQL, ids, expire).Scan(&raised, &released, &lags, &rel.Units); err != nil {
			return dbError("release holds", err)
		}
		if len(raised) > 0 {
			rows, _ := tx.Query(ctx, `SELECT `+productColumns+` FROM products WHERE id = ANY($1)`, raised)
			var err error
			if rel.Products, err = pgx.CollectRows(rows, pgx.RowToStructByName[stock.Product]); err != nil {
				return dbError("read released products", err)
			}
		}
		for i, id := range released {
			rel.Lag[id] = time.Duration(lags[i] * float64(time.Second))
		}
		return nil
	})
	if err != nil {
		return stock.Released{}, err
	}
	return rel, nil
}

// DueHolds implements Store.
func (s *Store) DueHolds(ctx context.Context, among []uuid.UUID, grace time.Duration, limit int) (map[uuid.UUID][]int64, error) {
	rows, _ := s.pool.Query(ctx, `
		SELECT o.id, ARRAY(SELECT i.product_id FROM order_items i WHERE i.order_id = o.id ORDER BY i.product_id)
		  FROM orders o
		 WHERE o.status = 'held' AND o.expires_at <= now() - $1::interval AND ($3::uuid[] IS NULL OR o.id = ANY($3))
		 ORDER BY o.expires_at
		 LIMIT $2`, grace, limit, among)
	due := map[uuid.UUID][]int64{}
	var id uuid.UUID
	var products []int64
	_, err := pgx.ForEachRow(rows, []any{&id, &products}, func() error {
		due[id] = products
		return nil
	})
	if err != nil {
		return nil, dbError("due holds", err)
	}
	return due, nil
}

// OpenHolds counts the orders held now, across the cluster: one range of the partial index
// orders_holds_due_idx (migration 8). Errors: the query's.
func OpenHolds(ctx context.Context, q RowQuerier) (int64, error) {
	var n int64
	if err := q.QueryRow(ctx, `SELECT count(*) FROM orders WHERE status = 'held'`).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}

// holdingSQL says whether any order of product $1 is held now: a probe of the held orders'
// partial index (orders_holds_due_idx), then their items.
const holdingSQL = `
SELECT EXISTS (SELECT 1 FROM orders o JOIN order_items i ON i.order_id = o.id
                WHERE o.status = 'held' AND i.product_id = $1)`

// Holding reports whether units of product id are held now, and may come back to its stock
// (package line tells a sold-out line so). Errors: stock.ErrUnavailable.
func (s *Store) Holding(ctx context.Context, id int64) (bool, error) {
	var held bool
	if err := s.pool.QueryRow(ctx, holdingSQL, id).Scan(&held); err != nil {
		return false, dbError("holding", err)
	}
	return held, nil
}
