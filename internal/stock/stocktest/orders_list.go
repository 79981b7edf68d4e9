package stocktest

import (
	"bytes"
	"context"
	"slices"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// CustomerOrders implements stock.Store: the customer's orders, newest first, as the Postgres
// store orders them (created_at, then the id's bytes, both descending).
func (m *MemStore) CustomerOrders(_ context.Context, q stock.OrdersQuery) (stock.OrdersPage, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var all []stock.Order
	for _, o := range m.orders {
		if o.CustomerID == q.CustomerID && (q.After == nil || before(o, *q.After)) &&
			(len(q.Statuses) == 0 || slices.Contains(q.Statuses, o.Status)) {
			all = append(all, o)
		}
	}
	slices.SortFunc(all, func(a, b stock.Order) int {
		if c := b.CreatedAt.Compare(a.CreatedAt); c != 0 {
			return c
		}
		return bytes.Compare(b.ID[:], a.ID[:])
	})
	var page stock.OrdersPage
	if len(all) > q.Limit {
		last := all[q.Limit-1]
		page.Next = &stock.OrdersCursor{CreatedAt: last.CreatedAt, ID: last.ID}
		all = all[:q.Limit]
	}
	page.Orders = all
	return page, nil
}

// before reports whether o comes after the cursor c in newest-first order.
func before(o stock.Order, c stock.OrdersCursor) bool {
	if !o.CreatedAt.Equal(c.CreatedAt) {
		return o.CreatedAt.Before(c.CreatedAt)
	}
	return bytes.Compare(o.ID[:], c.ID[:]) < 0
}
