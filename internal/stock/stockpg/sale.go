package stockpg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// updateSaleSQL changes a product's sale rules: $2/$3/$4 set the window's start, its end and the
// limit when not NULL; $5/$6/$7 clear them; $8 ends the sale now (Postgres's clock, read when
// the row is written: clock_timestamp, not now(), the transaction's start — a sale that held
// the row while this waited for it committed first, and its orders, stamped with its own
// now(), must fall inside the window this leaves); $9 sets
// the hold (seconds), $10 clears it (orders already held keep theirs); $11 sets the cap on a
// customer's held units, and $12, when above 0, puts it back to its default: the limit as this
// leaves it, else $12 (stock.SaleChange); $13 and $14 set the line (admit, admission seconds:
// both or neither), $15 removes it. The version moves, so that a batch decided from the rules
// before is refused by its version check and decided again.
const updateSaleSQL = `
UPDATE products
   SET sale_starts_at   = CASE WHEN $5 THEN NULL ELSE coalesce($2, sale_starts_at) END,
       sale_ends_at     = CASE WHEN $8 THEN clock_timestamp() WHEN $6 THEN NULL ELSE coalesce($3, sale_ends_at) END,
       max_per_customer = CASE WHEN $7 THEN NULL ELSE coalesce($4, max_per_customer) END,
       hold_for_seconds = CASE WHEN $10 THEN NULL ELSE coalesce($9, hold_for_seconds) END,
       max_held_per_customer = CASE
         WHEN $11::bigint IS NOT NULL THEN $11
         WHEN $12 > 0 THEN coalesce(CASE WHEN $7 THEN NULL ELSE coalesce($4, max_per_customer) END, $12)
         ELSE max_held_per_customer END,
       line_admit       = CASE WHEN $15 THEN NULL ELSE coalesce($13, line_admit) END,
       line_admission_seconds = CASE WHEN $15 THEN NULL ELSE coalesce($14, line_admission_seconds) END,
       version = version + 1, updated_at = now()
 WHERE id = $1
RETURNING ` + productColumns

// forgetCountsSQL and recountLimitSQL count again, from the orders, what each customer bought of product $1, whose
// limit is now $2: customer_purchases is kept only while a product has a limit, so a limit set
// (or changed) starts from the truth — the units of orders confirmed or held, not those of
// holds cancelled or expired, which went back. A customer already above the new limit keeps
// what they have (max_units is their count) and can buy no more.
const (
	forgetCountsSQL = `DELETE FROM customer_purchases WHERE product_id = $1`
	recountLimitSQL = `
INSERT INTO customer_purchases (product_id, customer_id, bought, max_units)
SELECT $1, o.customer_id, sum(i.quantity), greatest($2::bigint, sum(i.quantity))
  FROM order_items i JOIN orders o ON o.id = i.order_id
 WHERE i.product_id = $1 AND o.status IN ('confirmed', 'held')
 GROUP BY o.customer_id`
)

// UpdateSale implements Store, in one transaction: the rules and, when a limit is set, the
// counts it is checked against.
func (s *Store) UpdateSale(ctx context.Context, id int64, c stock.SaleChange) (stock.Product, error) {
	var p stock.Product
	err := s.inTx(ctx, "update sale", func(tx pgx.Tx) error {
		var holdFor, admit, admission *int64
		if c.HoldFor != nil {
			secs := int64(*c.HoldFor / time.Second)
			holdFor = &secs
		}
		if c.Line != nil {
			secs := int64(c.Line.AdmissionFor / time.Second)
			admit, admission = &c.Line.Admit, &secs
		}
		rows, _ := tx.Query(ctx, updateSaleSQL, id, c.StartsAt, c.EndsAt, c.MaxPerCustomer,
			c.ClearStartsAt, c.ClearEndsAt, c.ClearMaxPerCustomer, c.EndNow, holdFor, c.ClearHoldFor, c.MaxHeldPerCustomer, c.DefaultMaxHeld,
			admit, admission, c.ClearLine)
		var err error
		p, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[stock.Product])
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return &stock.ProductNotFoundError{ProductID: id}
		case refusedRule(err) != nil:
			return refusedRule(err)
		case err != nil:
			return dbError("update sale", err)
		}
		if c.MaxPerCustomer == nil {
			return nil
		}
		if _, err := tx.Exec(ctx, forgetCountsSQL, id); err != nil {
			return dbError("forget what customers bought", err)
		}
		if _, err := tx.Exec(ctx, recountLimitSQL, id, p.MaxPerCustomer); err != nil {
			return dbError("count what customers bought", err)
		}
		return nil
	})
	return p, err
}

// productsSQL lists products by id after $1, at most $2; with $3, only those on sale now or
// later by Postgres's clock, with stock left.
const productsSQL = `
SELECT ` + productColumns + `
  FROM products
 WHERE id > $1
   AND (NOT $3 OR (stock > 0 AND (sale_ends_at IS NULL OR now() < sale_ends_at)))
 ORDER BY id
 LIMIT $2`

// Products implements Store.
func (s *Store) Products(ctx context.Context, after int64, limit int, onSale bool) ([]stock.Product, error) {
	rows, _ := s.pool.Query(ctx, productsSQL, after, limit, onSale)
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[stock.Product])
	if err != nil {
		return nil, dbError("list products", err)
	}
	return list, nil
}
