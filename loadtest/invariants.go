package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// invariant is one property checked in Postgres after a sale.
type invariant struct {
	name   string
	ok     bool
	detail string
}

// productLedger is one product's accounting, straight from the tables.
type productLedger struct {
	ID       int64
	SKU      string
	Stock    int64
	Received int64
	Sold     int64
}

// checkInvariants reconciles what k6 was told with what Postgres holds, using SQL only — no
// service code is trusted here. unknownAllowed says whether orders the clients never heard
// about are acceptable (a replica was killed between commit and answer).
func checkInvariants(ctx context.Context, run *saleRun, raceStock int64, unknownAllowed bool) ([]invariant, map[int64]productLedger, error) {
	out, byID, err := ledgerInvariants(ctx, run.pool)
	if err != nil {
		return nil, nil, err
	}
	add := func(name string, ok bool, detail string, args ...any) {
		out = append(out, invariant{name: name, ok: ok, detail: fmt.Sprintf(detail, args...)})
	}
	// Every order k6 was told about exists, with exactly its items.
	roles := map[int64]string{run.summary.SetupData.Hot: "hot", run.summary.SetupData.Second: "second", run.summary.SetupData.Race: "race"}
	rows, _ := run.pool.Query(ctx, `SELECT order_id, product_id, quantity FROM order_items`)
	inDB := map[uuid.UUID]map[string]int64{}
	var id uuid.UUID
	var product, qty int64
	_, err = pgx.ForEachRow(rows, []any{&id, &product, &qty}, func() error {
		if inDB[id] == nil {
			inDB[id] = map[string]int64{}
		}
		inDB[id][roles[product]] += qty
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read order items: %w", err)
	}
	missing, mismatched := 0, 0
	confirmed := map[uuid.UUID]bool{}
	for _, o := range run.orders {
		confirmed[o.id] = true
		got, ok := inDB[o.id]
		switch {
		case !ok:
			missing++
		case !sameUnits(got, o.units):
			mismatched++
		}
	}
	add("every confirmed order is in the database with its items", missing == 0 && mismatched == 0,
		"%d confirmed orders checked: %d missing, %d with other items", len(run.orders), missing, mismatched)
	unknown := 0
	for oid := range inDB {
		if !confirmed[oid] {
			unknown++
		}
	}
	if unknownAllowed {
		add("orders nobody was told about (allowed: a replica was killed)", true, "%d", unknown)
	} else {
		add("no order without a 201", unknown == 0, "%d orders in the database were never confirmed to a client", unknown)
	}

	var k6Units = map[string]float64{
		"hot":    run.summary.value("confirmed_units_hot", "count"),
		"second": run.summary.value("confirmed_units_second", "count"),
		"race":   run.summary.value("confirmed_units_race", "count"),
	}
	unitsMatch := true
	var parts []string
	for _, role := range []string{"hot", "second", "race"} {
		pid := map[string]int64{"hot": run.summary.SetupData.Hot, "second": run.summary.SetupData.Second, "race": run.summary.SetupData.Race}[role]
		db := byID[pid].Sold
		if unknownAllowed && float64(db) < k6Units[role] || !unknownAllowed && float64(db) != k6Units[role] {
			unitsMatch = false
		}
		parts = append(parts, fmt.Sprintf("%s k6 %.0f / db %d", role, k6Units[role], db))
	}
	add("k6's confirmed units = units sold in the database", unitsMatch, "%s", strings.Join(parts, "; "))

	if raceStock > 0 && run.summary.SetupData.Race != 0 {
		r := byID[run.summary.SetupData.Race]
		add("exact race: every unit sold, none more", r.Sold == raceStock && r.Stock == 0, "%d of %d sold, %d left", r.Sold, raceStock, r.Stock)
	}

	return out, byID, nil
}

// ledgerInvariants checks, from the tables alone, what must hold after any run whatever the
// clients were told: no stock below zero, received − sold = stock for every product, nothing
// sold beyond what was received, one order per idempotency key, and orders and items that
// reference what exists.
func ledgerInvariants(ctx context.Context, pool *pgxpool.Pool) ([]invariant, map[int64]productLedger, error) {
	var out []invariant
	add := func(name string, ok bool, detail string, args ...any) {
		out = append(out, invariant{name: name, ok: ok, detail: fmt.Sprintf(detail, args...)})
	}
	rows, _ := pool.Query(ctx, `
		SELECT p.id, p.sku, p.stock,
		       p.initial_stock + COALESCE((SELECT sum(r.quantity) FROM restocks r WHERE r.product_id = p.id), 0) AS received,
		       COALESCE((SELECT sum(i.quantity) FROM order_items i JOIN orders o ON o.id = i.order_id
		                  WHERE i.product_id = p.id AND o.status = 'confirmed'), 0) AS sold
		  FROM products p ORDER BY p.id`)
	ledgers, err := pgx.CollectRows(rows, pgx.RowToStructByName[productLedger])
	if err != nil {
		return nil, nil, fmt.Errorf("read products: %w", err)
	}
	byID := map[int64]productLedger{}
	negative, unbalanced, oversold := 0, 0, int64(0)
	for _, l := range ledgers {
		byID[l.ID] = l
		if l.Stock < 0 {
			negative++
		}
		if l.Received-l.Sold != l.Stock {
			unbalanced++
		}
		oversold += max(0, l.Sold-l.Received)
	}
	add("stock never negative", negative == 0, "%d of %d products below zero", negative, len(ledgers))
	add("conservation: received - sold = stock", unbalanced == 0, "%d of %d products off", unbalanced, len(ledgers))
	add("no oversell", oversold == 0, "%d units sold beyond what was received", oversold)

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

func sameUnits(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}
