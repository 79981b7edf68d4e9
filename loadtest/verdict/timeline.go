package verdict

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/report"
)

// StockLine reads a product's stock over time from the tables, for the run's report page: its
// initial stock, then every order that took units (at the order's created_at, the start of the
// transaction that took them), every hold cancelled or expired that gave them back (at its
// decided_at), and every restock (at its created_at), on the run's clock, whose zero is start.
// Moments before the start (the product's creation) are put at 0.
func StockLine(ctx context.Context, pool *pgxpool.Pool, product int64, name string, start time.Time) (report.Line, error) {
	rows, _ := pool.Query(ctx, `
		SELECT at, sum(delta)::bigint FROM (
		        SELECT created_at AS at, initial_stock AS delta FROM products WHERE id = $1
		  UNION ALL
		        SELECT created_at, quantity FROM restocks WHERE product_id = $1
		  UNION ALL
		        SELECT o.created_at, -i.quantity FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = $1
		  UNION ALL
		        SELECT o.decided_at, i.quantity FROM orders o JOIN order_items i ON i.order_id = o.id
		         WHERE i.product_id = $1 AND o.status IN ('cancelled', 'expired')
		) moves GROUP BY at ORDER BY at`, product)
	line := report.Line{Name: name}
	var at time.Time
	var delta, stock int64
	_, err := pgx.ForEachRow(rows, []any{&at, &delta}, func() error {
		stock += delta
		line.Points = append(line.Points, report.Point{At: max(0, at.Sub(start)), Value: float64(stock)})
		return nil
	})
	if err != nil {
		return report.Line{}, fmt.Errorf("read the stock of product %d over time: %w", product, err)
	}
	return line, nil
}

// Checks are the invariants as the report page lists them.
func Checks(invs []Invariant) []report.Check {
	out := make([]report.Check, 0, len(invs))
	for _, inv := range invs {
		out = append(out, report.Check{Name: inv.Name, OK: inv.OK, Detail: inv.Detail})
	}
	return out
}
