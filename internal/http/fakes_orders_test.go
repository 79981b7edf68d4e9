package stockhttp_test

import (
	"context"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// CustomerOrders answers from the in-memory store, as the other fakeService methods do.
func (f *fakeService) CustomerOrders(ctx context.Context, q stock.OrdersQuery) (stock.OrdersPage, error) {
	if f.err != nil {
		return stock.OrdersPage{}, f.err
	}
	return f.svc.CustomerOrders(ctx, q)
}
