// Package verdict is the SQL verdict of the load harness: what the tables must show after any
// run (Ledgers), and, for the drills, what each client was told against what Postgres holds —
// every order by its customer (Orders), every restock (in Orders), every Idempotency-Key
// (Keys) — and the stock once every replica has stopped (FinalStock). No service code is
// trusted here: only SQL.
package verdict

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Invariant is one property checked in Postgres after a sale.
type Invariant struct {
	Name   string
	OK     bool
	Detail string
}

// Ledger is one product's accounting, straight from the tables.
type Ledger struct {
	ID       int64
	SKU      string
	Stock    int64
	Received int64
	Sold     int64 // units of confirmed orders
	// Held is the units of orders still held (issue #21): taken from stock, neither confirmed
	// nor given back yet. Cancelled and expired orders' units are back in Stock.
	Held int64
}

// Ledgers checks, from the tables alone, what must hold after any run whatever the
// clients were told: no stock below zero, received = stock + held + sold for every product
// (held: units of orders still held; a cancelled or expired order's units are back in stock,
// so each went back exactly once in all), nothing sold beyond what was received, one order per
// idempotency key, and orders and items that reference what exists.
func Ledgers(ctx context.Context, pool *pgxpool.Pool) ([]Invariant, map[int64]Ledger, error) {
	var out []Invariant
	add := func(name string, ok bool, detail string, args ...any) {
		out = append(out, Invariant{Name: name, OK: ok, Detail: fmt.Sprintf(detail, args...)})
	}
	rows, _ := pool.Query(ctx, `
		SELECT p.id, p.sku, p.stock,
		       p.initial_stock + COALESCE((SELECT sum(r.quantity) FROM restocks r WHERE r.product_id = p.id), 0) AS received,
		       COALESCE((SELECT sum(i.quantity) FROM order_items i JOIN orders o ON o.id = i.order_id
		                  WHERE i.product_id = p.id AND o.status = 'confirmed'), 0) AS sold,
		       COALESCE((SELECT sum(i.quantity) FROM order_items i JOIN orders o ON o.id = i.order_id
		                  WHERE i.product_id = p.id AND o.status = 'held'), 0) AS held
		  FROM products p ORDER BY p.id`)
	ledgers, err := pgx.CollectRows(rows, pgx.RowToStructByName[Ledger])
	if err != nil {
		return nil, nil, fmt.Errorf("read products: %w", err)
	}
	byID := map[int64]Ledger{}
	negative, unbalanced, oversold := 0, 0, int64(0)
	for _, l := range ledgers {
		byID[l.ID] = l
		if l.Stock < 0 {
			negative++
		}
		if l.Received-l.Sold-l.Held != l.Stock {
			unbalanced++
		}
		oversold += max(0, l.Sold+l.Held-l.Received)
	}
	add("stock never negative", negative == 0, "%d of %d products below zero", negative, len(ledgers))
	add("conservation: received = stock + held + sold (released units back once)", unbalanced == 0, "%d of %d products off", unbalanced, len(ledgers))
	add("no oversell", oversold == 0, "%d units sold or held beyond what was received", oversold)

	var dupKeys, orphanItems, emptyOrders int64
	err = pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM (SELECT order_id FROM idempotency_keys WHERE order_id IS NOT NULL
		                              GROUP BY order_id HAVING count(*) > 1) d),
		       (SELECT count(*) FROM order_items i LEFT JOIN products p ON p.id = i.product_id WHERE p.id IS NULL),
		       (SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM order_items i WHERE i.order_id = o.id))`).
		Scan(&dupKeys, &orphanItems, &emptyOrders)
	if err != nil {
		return nil, nil, fmt.Errorf("check references: %w", err)
	}
	var keyed int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&keyed); err != nil {
		return nil, nil, fmt.Errorf("count idempotency keys: %w", err)
	}
	add("each idempotency key maps to one order, each order to at most one key", dupKeys == 0,
		"%d keys stored, %d orders under two keys", keyed, dupKeys)
	add("every order item references a product; every order has items", orphanItems == 0 && emptyOrders == 0,
		"%d orphan items, %d empty orders", orphanItems, emptyOrders)
	return out, byID, nil
}
