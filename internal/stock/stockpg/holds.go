package stockpg

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// confirmHoldSQL confirms hold $1 if it is customer $2's (any customer's when $2 is empty)
// and has not expired by Postgres's clock — the one condition that decides a confirm against an
// expiry or a cancel, whichever reaches the row first — and in the same statement takes its
// units off its customer's held units (customer_holds; the units stay bought, in
// customer_purchases), never below 0 (see releaseHoldsSQL). Those counts are locked in
// ascending product order, as every other writer of them locks them, so that a cart's confirm
// never waits for a sale or a release that waits for it. It returns the order confirmed, as
// orderSQL does, or no row when it confirmed none.
const confirmHoldSQL = `
WITH o AS (
  UPDATE orders SET status = 'confirmed', decided_at = now()
   WHERE id = $1 AND status = 'held' AND expires_at > now() AND ($2 = '' OR customer_id = $2)
  RETURNING id, customer_id, status, created_at, expires_at, decided_at
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
SELECT o.customer_id, o.status, o.created_at, o.expires_at, o.decided_at, ` + orderItemsSQL + `
  FROM o`

// ConfirmHold implements Store: one statement (confirmHoldSQL) when it confirms, and one more
// (the order's read) only to tell why it did not. A confirm is the payment's receipt: one
// acknowledged from the primary alone (Postgres ended its commit's wait for the synchronous
// standby early, syncrep.go) would be lost by a failover, and the hold would then expire and
// its units be sold again. So such a commit answers unavailable, outcome unknown (the client
// confirms again), and a hold found confirmed by an earlier call is answered only once a
// standby has it.
func (s *Store) ConfirmHold(ctx context.Context, id uuid.UUID, customer string) (stock.Order, bool, error) {
	o := stock.Order{ID: id}
	err := writeReplicated(ctx, s.pool, "confirm hold", func(conn *pgxpool.Conn) error {
		return scanOrder(conn.QueryRow(ctx, confirmHoldSQL, id, customer), &o)
	})
	switch {
	case err == nil:
		return o, true, nil
	case !errors.Is(err, pgx.ErrNoRows):
		if errors.Is(err, stock.ErrUnavailable) {
			return stock.Order{}, false, err
		}
		return stock.Order{}, false, dbError("confirm hold", err)
	}
	// Not confirmed: tell why from the order as it stands.
	o, err = s.Order(ctx, id)
	switch {
	case err != nil:
		return stock.Order{}, false, err
	case customer != "" && o.CustomerID != customer:
		return stock.Order{}, false, stock.ErrOrderNotFound
	case o.Status == stock.OrderStatusConfirmed:
		if err := s.replicated(ctx); err != nil {
			return stock.Order{}, false, notReplicated("confirm hold", err)
		}
		return o, false, nil
	case o.Status == stock.OrderStatusCancelled:
		return stock.Order{}, false, stock.ErrOrderCancelled
	}
	// Expired, or still held but past expires_at (its expiry is due): not confirmed.
	return stock.Order{}, false, stock.ErrHoldExpired
}

// cancelHoldSQL cancels hold $1 if it is customer $2's (any customer's when $2 is empty) and
// still held, and in the same statement gives its units back as releaseHoldsSQL does, having
// first locked its products $3 in ascending id order (lk, which the order's read waits for:
// an InitPlan), as a release and a cart's write do. The order's row is read with FOR UPDATE
// (cur), which in READ COMMITTED waits for a confirm or an expiry deciding it meanwhile and
// returns the row as that left it: the update is conditioned on that row, so the one statement
// both decides the cancel and says, when it did not, what did. It returns the order as it
// stands (no row: none, or another customer's), whether it cancelled it, and the products
// raised, as productColumns reads them, in JSON.
const cancelHoldSQL = `
WITH lk AS MATERIALIZED (
  SELECT id FROM products WHERE id = ANY($3) ORDER BY id FOR UPDATE
), cur AS MATERIALIZED (
  SELECT id, customer_id, status, created_at, expires_at, decided_at FROM orders
   WHERE id = $1 AND ($2 = '' OR customer_id = $2) AND (SELECT count(*) FROM lk) >= 0
     FOR UPDATE
), r AS (
  UPDATE orders o SET status = 'cancelled', decided_at = now()
    FROM cur WHERE o.id = cur.id AND cur.status = 'held'
  RETURNING o.id, o.customer_id, o.status, o.decided_at
)` + giveBackSQL + `
SELECT o.customer_id, coalesce(r.status, o.status), o.created_at, o.expires_at, coalesce(r.decided_at, o.decided_at), ` + orderItemsSQL + `,
       r.id IS NOT NULL, (SELECT coalesce(json_agg(p ORDER BY p.id), '[]') FROM p)
  FROM cur o LEFT JOIN r ON true`

// productJSON is a product as giveBackSQL returns it: productColumns' names, in JSON. Its
// fields are stock.Product's, so that the conversion fails to compile when they part.
type productJSON struct {
	ID                 int64         `json:"id"`
	SKU                string        `json:"sku"`
	Name               string        `json:"name"`
	Stock              int64         `json:"stock"`
	Version            int64         `json:"version"`
	CreatedAt          time.Time     `json:"created_at"`
	UpdatedAt          time.Time     `json:"updated_at"`
	SaleStartsAt       *time.Time    `json:"sale_starts_at"`
	SaleEndsAt         *time.Time    `json:"sale_ends_at"`
	MaxPerCustomer     int64         `json:"max_per_customer"`
	HoldFor            time.Duration `json:"hold_for"`
	MaxHeldPerCustomer int64         `json:"max_held_per_customer"`
	LineAdmit          int64         `json:"line_admit"`
	LineAdmissionFor   time.Duration `json:"line_admission_for"`
}

// fromJSON converts products as a statement returned them in JSON.
func fromJSON(raised []productJSON) []stock.Product {
	ps := make([]stock.Product, len(raised))
	for i, p := range raised {
		ps[i] = stock.Product(p)
	}
	return ps
}

// CancelHold implements Store: one statement (cancelHoldSQL). A cancel Postgres committed
// without its synchronous standby is not acknowledged (writeReplicated): the cancel so answered
// is retried, and finds the hold ended once a standby has it (Service.Cancel asks Replicated).
func (s *Store) CancelHold(ctx context.Context, id uuid.UUID, customer string, products []int64) (stock.Cancel, error) {
	c := stock.Cancel{Order: stock.Order{ID: id}}
	var raised []productJSON
	err := writeReplicated(ctx, s.pool, "cancel hold", func(conn *pgxpool.Conn) error {
		return scanOrder(conn.QueryRow(ctx, cancelHoldSQL, id, customer, products), &c.Order, &c.Cancelled, &raised)
	})
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return stock.Cancel{}, stock.ErrOrderNotFound
	case errors.Is(err, stock.ErrUnavailable):
		return stock.Cancel{}, err
	case err != nil:
		return stock.Cancel{}, dbError("cancel hold", err)
	}
	c.Products = fromJSON(raised)
	return c, nil
}

// lockProductsSQL takes the products' rows in ascending id order before a release raises
// them, as a cart's write does: releases and carts never wait for each other in a cycle.
const lockProductsSQL = `SELECT id FROM products WHERE id = ANY($1) ORDER BY id FOR UPDATE`

// giveBackSQL gives the units of the holds that CTE r (id, customer_id) ended back, in the
// statement that ends them: to the products' stock (the version moves, so a batch decided from
// before is refused and reads again) and to the customers' counts, what they bought and what
// they hold. Its CTE p is the products raised, as productColumns reads them.
//
// The held counts are locked in ascending (product, customer) order, as the statement that
// sells takes them, and a confirm, so that none of them waits for another in a cycle. A held
// count never goes below 0: a hold written by a replica from before customer_holds (a rolling
// upgrade across migration 12) was never counted, and its release must not fail for it.
const giveBackSQL = `, it AS (
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
  RETURNING ` + productColumns + `
)`

// releaseHoldsSQL ends the holds among $1 that are still held — cancelled, or with $2,
// expired once expires_at has passed — and in the same statement gives their units back
// (giveBackSQL). A hold already ended is not matched, so its units are never given back twice.
// It returns the products raised (in JSON, as productJSON), the holds it ended and each one's
// lag (expires_at to now).
const releaseHoldsSQL = `
WITH r AS (
  UPDATE orders SET status = CASE WHEN $2 THEN 'expired' ELSE 'cancelled' END, decided_at = now()
   WHERE id = ANY($1) AND status = 'held' AND (NOT $2 OR expires_at <= now())
  RETURNING id, customer_id, extract(epoch FROM now() - expires_at)::float8 AS lag
)` + giveBackSQL + `
SELECT (SELECT coalesce(json_agg(p ORDER BY p.id), '[]') FROM p), (SELECT coalesce(array_agg(r.id), '{}') FROM r),
       (SELECT coalesce(array_agg(r.lag), '{}') FROM r), (SELECT coalesce(sum(qty), 0)::bigint FROM it)`

// ReleaseHolds implements Store: the expiries' release (a cancel is CancelHold's one
// statement). A release Postgres committed without its synchronous standby is not acknowledged
// (inTx): the expiry so answered fails, and is done again by its job's retry or the sweep,
// which find the hold ended.
func (s *Store) ReleaseHolds(ctx context.Context, ids []uuid.UUID, products []int64, expire bool) (stock.Released, error) {
	rel := stock.Released{Lag: map[uuid.UUID]time.Duration{}}
	err := s.inTx(ctx, "release holds", func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, lockProductsSQL, products); err != nil {
			return dbError("lock products", err)
		}
		var (
			raised   []productJSON
			released []uuid.UUID
			lags     []float64
		)
		if err := tx.QueryRow(ctx, releaseHoldsSQL, ids, expire).Scan(&raised, &released, &lags, &rel.Units); err != nil {
			return dbError("release holds", err)
		}
		rel.Products = fromJSON(raised)
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
