package verdict

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Line checks a lined product's line against its sales (issue #33), from the tables alone:
//
//   - every admission accounted for stays within the units: the tickets admitted and not
//     ended otherwise (admitted now, or used) are at most the product's initial stock, as the
//     rule "never more buyers admitted than units left" gives with max_per_customer 1 and no
//     units coming back (what -opening-fair runs);
//   - nothing oversold: the units of the product's confirmed and held orders are at most its
//     initial stock;
//   - every confirmed or held order of the product is its customer's, whose ticket was
//     admitted (the line is one more layer: an order past it would show here);
//   - no ticket that left was used afterwards.
func Line(ctx context.Context, pool *pgxpool.Pool, product int64) ([]Invariant, error) {
	var initial, admitted, sold, left int64
	err := pool.QueryRow(ctx, `
		SELECT p.initial_stock,
		       (SELECT count(*) FROM line_tickets t WHERE t.product_id = p.id AND t.status IN ('admitted', 'used')),
		       COALESCE((SELECT sum(i.quantity) FROM order_items i JOIN orders o ON o.id = i.order_id
		                  WHERE i.product_id = p.id AND o.status IN ('confirmed', 'held')), 0)::bigint,
		       (SELECT count(*) FROM line_tickets t WHERE t.product_id = p.id AND t.status = 'left' AND t.used_key IS NOT NULL)
		  FROM products p WHERE p.id = $1`, product).Scan(&initial, &admitted, &sold, &left)
	if err != nil {
		return nil, fmt.Errorf("read product %d's line: %w", product, err)
	}
	unadmitted, err := findingsArgs(ctx, pool, `
		SELECT format('order %s of customer %s', o.id, o.customer_id)
		  FROM orders o JOIN order_items i ON i.order_id = o.id
		 WHERE i.product_id = $1 AND o.status IN ('confirmed', 'held')
		   AND NOT EXISTS (SELECT 1 FROM line_tickets t WHERE t.product_id = $1 AND t.customer_id = o.customer_id
		                      AND t.admitted_at IS NOT NULL)
		 ORDER BY o.created_at`, product)
	if err != nil {
		return nil, fmt.Errorf("orders without an admission: %w", err)
	}
	return []Invariant{
		{Name: "admissions within the units", OK: admitted <= initial,
			Detail: fmt.Sprintf("product %d: %d tickets admitted or used, %d units", product, admitted, initial)},
		{Name: "nothing oversold on the lined product", OK: sold <= initial,
			Detail: fmt.Sprintf("product %d: %d units sold of %d", product, sold, initial)},
		{Name: "every order of the lined product was admitted", OK: len(unadmitted) == 0,
			Detail: summarise(len(unadmitted), "orders of customers never admitted", unadmitted)},
		{Name: "no left ticket used", OK: left == 0, Detail: fmt.Sprintf("%d tickets left after their use", left)},
	}, nil
}

// Heard checks that every buyer in line heard that the units were gone within bound of the
// last unit selling: heard holds each one's delay from the sold-out moment, never counts those
// who never heard (a failure whatever the bound).
func Heard(name string, heard []time.Duration, never int, bound time.Duration) Invariant {
	worst := time.Duration(0)
	if len(heard) > 0 {
		worst = slices.Max(heard)
	}
	return Invariant{Name: name, OK: never == 0 && worst <= bound,
		Detail: fmt.Sprintf("%d buyers heard, the last %v after the last unit's order; %d never heard (bound %v)", len(heard), worst.Round(time.Millisecond), never, bound)}
}
