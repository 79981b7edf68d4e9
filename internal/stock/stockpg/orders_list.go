package stockpg

import (
	"context"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// customerOrdersSQL is a page of $1's orders, newest first, strictly after the cursor ($2, $3)
// — for the first page, a cursor after every order ('infinity') — at most $4 of them, each
// with its items in product order. The row comparison on (created_at, id) is one range of
// orders_customer_created_idx (migration 000007), so a page costs the same on the first and
// the thousandth; the items are one lookup per order on order_items' primary key. $5, when not
// null, keeps the orders in those statuses: a filter on the range's rows, which walks past the
// others (a customer's orders are few: the limits and the cap on holds keep them so).
const customerOrdersSQL = `
SELECT o.id, o.customer_id, o.status, o.created_at, o.expires_at, o.decided_at,
       array_agg(i.product_id ORDER BY i.product_id) AS product_ids,
       array_agg(i.quantity ORDER BY i.product_id) AS quantities
FROM (
    SELECT id, customer_id, status, created_at, expires_at, decided_at FROM orders
    WHERE customer_id = $1 AND (created_at, id) < ($2, $3) AND ($5::text[] IS NULL OR status = ANY ($5))
    ORDER BY created_at DESC, id DESC
    LIMIT $4
) o
JOIN order_items i ON i.order_id = o.id
GROUP BY o.id, o.customer_id, o.status, o.created_at, o.expires_at, o.decided_at
ORDER BY o.created_at DESC, o.id DESC`

// lastID is the greatest uuid: with 'infinity', a cursor after every order.
var lastID = uuid.UUID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// CustomerOrders implements stock.Store. It reads one more order than the page holds, to
// know whether there is a next page.
func (s *Store) CustomerOrders(ctx context.Context, q stock.OrdersQuery) (stock.OrdersPage, error) {
	at := pgtype.Timestamptz{InfinityModifier: pgtype.Infinity, Valid: true}
	id := lastID
	if q.After != nil {
		at, id = pgtype.Timestamptz{Time: q.After.CreatedAt, Valid: true}, q.After.ID
	}
	rows, _ := s.pool.Query(ctx, customerOrdersSQL, q.CustomerID, at, pgtype.UUID{Bytes: id, Valid: true}, q.Limit+1, statuses(q.Statuses))
	type row struct {
		ID         uuid.UUID
		CustomerID string
		Status     string
		CreatedAt  time.Time
		ExpiresAt  *time.Time
		DecidedAt  *time.Time
		ProductIDs []int64
		Quantities []int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByName[row])
	if err != nil {
		return stock.OrdersPage{}, dbError("list customer orders", err)
	}
	var page stock.OrdersPage
	if len(got) > q.Limit {
		got = got[:q.Limit]
		last := got[len(got)-1]
		page.Next = &stock.OrdersCursor{CreatedAt: last.CreatedAt, ID: last.ID}
	}
	page.Orders = make([]stock.Order, len(got))
	for i, r := range got {
		items := make([]stock.Item, len(r.ProductIDs))
		for j := range items {
			items[j] = stock.Item{ProductID: r.ProductIDs[j], Quantity: r.Quantities[j]}
		}
		page.Orders[i] = stock.Order{ID: r.ID, CustomerID: r.CustomerID, Status: r.Status, Items: items, CreatedAt: r.CreatedAt,
			ExpiresAt: r.ExpiresAt, DecidedAt: r.DecidedAt}
	}
	return page, nil
}

// statuses is the filter $5 of customerOrdersSQL: null for every status.
func statuses(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
