package stock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// TestCustomerOrdersValidates: a page is asked of the store only for a valid customer id and a
// limit within 1..MaxOrdersPage; the store's page is the answer.
func TestCustomerOrdersValidates(t *testing.T) {
	t.Parallel()
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{}, stock.Config{}, stock.NewMetrics(prometheus.NewRegistry()))
	t.Cleanup(svc.Close)
	ctx := context.Background()
	p, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: "list", Name: "list", Stock: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: "hana", Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name  string
		q     stock.OrdersQuery
		field string
	}{
		{"no customer", stock.OrdersQuery{Limit: 1}, "customer_id"},
		{"customer id too long", stock.OrdersQuery{CustomerID: strings.Repeat("h", stock.MaxCustomerIDLen+1), Limit: 1}, "customer_id"},
		{"limit 0", stock.OrdersQuery{CustomerID: "hana"}, "limit"},
		{"limit above the most", stock.OrdersQuery{CustomerID: "hana", Limit: stock.MaxOrdersPage + 1}, "limit"},
	} {
		_, err := svc.CustomerOrders(ctx, tt.q)
		if invalid, ok := errors.AsType[*stock.ValidationError](err); !ok || invalid.Field != tt.field {
			t.Errorf("%s: %v, want a *ValidationError of %s", tt.name, err, tt.field)
		}
	}
	page, err := svc.CustomerOrders(ctx, stock.OrdersQuery{CustomerID: "hana", Limit: stock.MaxOrdersPage})
	if err != nil || len(page.Orders) != 1 || page.Orders[0].CustomerID != "hana" || page.Next != nil {
		t.Fatalf("hana's orders = %+v, %v; want her one order and no next page", page, err)
	}
}
