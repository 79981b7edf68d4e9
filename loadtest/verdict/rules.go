package verdict

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Rules checks the sale rules (issue #20) from the tables alone, whatever the clients were
// told:
//
//   - no order of a product was created outside its sale window — confirmed, held, or held
//     and released since (issue #21): orders.created_at (Postgres's now() in the selling
//     transaction) is neither before sale_starts_at nor at or after sale_ends_at;
//   - no customer holds more units of a product than its max_per_customer (units of held
//     orders count, issue #21; cancelled and expired ones no longer do);
//   - customer_purchases.bought, the count the selling statement keeps, equals the units the
//     customer's confirmed and held orders hold, for every customer of every product with a
//     limit.
//
// The window is the one the product has when the check runs: a window moved after orders were
// confirmed would make them look early or late, so the runs never move one.
//
// A schema without the rules (before migration 000006) has nothing to check: Rules returns no
// invariant then.
func Rules(ctx context.Context, pool *pgxpool.Pool) ([]Invariant, error) {
	var has bool
	if err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_schema = current_schema() AND table_name = 'products' AND column_name = 'max_per_customer')`).Scan(&has); err != nil {
		return nil, fmt.Errorf("look for the sale rules: %w", err)
	}
	if !has {
		return nil, nil
	}
	outside, err := findings(ctx, pool, `
		SELECT format('order %s of product %s at %s, window [%s, %s)', o.id, p.id, o.created_at,
		              coalesce(p.sale_starts_at::text, '-∞'), coalesce(p.sale_ends_at::text, '∞'))
		  FROM orders o JOIN order_items i ON i.order_id = o.id JOIN products p ON p.id = i.product_id
		 WHERE (o.created_at < p.sale_starts_at OR o.created_at >= p.sale_ends_at)
		 ORDER BY o.created_at`)
	if err != nil {
		return nil, fmt.Errorf("orders outside the window: %w", err)
	}
	over, err := findings(ctx, pool, `
		SELECT format('customer %s holds %s units of product %s, limit %s', s.customer_id, s.units, p.id, p.max_per_customer)
		  FROM (SELECT i.product_id, o.customer_id, sum(i.quantity) AS units
		          FROM orders o JOIN order_items i ON i.order_id = o.id
		         WHERE o.status IN ('confirmed', 'held') GROUP BY i.product_id, o.customer_id) s
		  JOIN products p ON p.id = s.product_id
		 WHERE s.units > p.max_per_customer
		 ORDER BY p.id, s.customer_id`)
	if err != nil {
		return nil, fmt.Errorf("customers over the limit: %w", err)
	}
	var limited, holders int64
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM products WHERE max_per_customer IS NOT NULL),
		(SELECT count(*) FROM customer_purchases c JOIN products p ON p.id = c.product_id WHERE p.max_per_customer IS NOT NULL)`).
		Scan(&limited, &holders); err != nil {
		return nil, fmt.Errorf("count limited products: %w", err)
	}
	counted, err := findings(ctx, pool, `
		WITH sold AS (
		    SELECT i.product_id, o.customer_id, sum(i.quantity)::bigint AS units
		      FROM orders o JOIN order_items i ON i.order_id = o.id JOIN products p ON p.id = i.product_id
		     WHERE o.status IN ('confirmed', 'held') AND p.max_per_customer IS NOT NULL
		     GROUP BY i.product_id, o.customer_id),
		counted AS (
		    SELECT c.product_id, c.customer_id, c.bought
		      FROM customer_purchases c JOIN products p ON p.id = c.product_id
		     WHERE p.max_per_customer IS NOT NULL)
		SELECT format('customer %s, product %s: bought %s, confirmed and held orders hold %s',
		              coalesce(s.customer_id, c.customer_id), coalesce(s.product_id, c.product_id),
		              coalesce(c.bought, 0), coalesce(s.units, 0))
		  FROM sold s FULL JOIN counted c ON c.product_id = s.product_id AND c.customer_id = s.customer_id
		 WHERE coalesce(s.units, 0) <> coalesce(c.bought, 0)`)
	if err != nil {
		return nil, fmt.Errorf("reconcile customer_purchases: %w", err)
	}
	return []Invariant{
		{Name: "no order confirmed outside its sale window (Postgres's clock)", OK: len(outside) == 0,
			Detail: summarise(len(outside), "orders outside the window", outside)},
		{Name: "no customer above the limit", OK: len(over) == 0,
			Detail: summarise(len(over), "customers above the limit", over)},
		{Name: "customer_purchases.bought = the customer's held + confirmed units", OK: len(counted) == 0,
			Detail: fmt.Sprintf("%d products with a limit, %d customers counted; ", limited, holders) + summarise(len(counted), "counts off", counted)},
	}, nil
}

// findings runs a query whose rows are one text each, a finding.
func findings(ctx context.Context, pool *pgxpool.Pool, sql string) ([]string, error) {
	rows, _ := pool.Query(ctx, sql)
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// summarise counts findings and names the first few.
func summarise(n int, what string, found []string) string {
	s := fmt.Sprintf("%d %s", n, what)
	if n == 0 {
		return s
	}
	ex := found[:min(len(found), maxFindings)]
	s += ": " + strings.Join(ex, " | ")
	if n > len(ex) {
		s += fmt.Sprintf(" | and %d more", n-len(ex))
	}
	return s
}
