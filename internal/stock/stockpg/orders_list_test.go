package stockpg_test

import (
	"bytes"
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// TestCustomerOrdersContract: a customer's orders, on every store, come newest first a page at
// a time — orders of one batch (one created_at) ordered by id — each page starting after the
// cursor of the one before, with the items in product order, and no other customer's order.
func TestCustomerOrdersContract(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t).store
			ctx := context.Background()
			a, b := mustCreate(t, s, "list-a-"+uuid.NewString(), 100), mustCreate(t, s, "list-b-"+uuid.NewString(), 100)
			customer, other := "list-"+uuid.NewString(), "other-"+uuid.NewString()
			order := func(who string, items ...stock.Item) stock.Order {
				return stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: who, Status: stock.OrderStatusConfirmed, Items: items}
			}
			// Three batches: one order, then two of the customer's and one of another's
			// together (one created_at), then a cart.
			batches := [][]stock.Order{
				{order(customer, stock.Item{ProductID: a, Quantity: 1})},
				{order(customer, stock.Item{ProductID: a, Quantity: 2}), order(other, stock.Item{ProductID: a, Quantity: 1}), order(customer, stock.Item{ProductID: a, Quantity: 3})},
				{order(customer, stock.Item{ProductID: a, Quantity: 4}, stock.Item{ProductID: b, Quantity: 5})},
			}
			var want []stock.Order // the customer's, newest first
			for _, orders := range batches {
				units := map[int64]int64{}
				for _, o := range orders {
					for _, it := range o.Items {
						units[it.ProductID] += it.Quantity
					}
				}
				snap := mustSnapshot(t, s, []int64{a, b})
				var w stock.Write
				for _, id := range []int64{a, b} {
					if units[id] > 0 {
						w.Decrements = append(w.Decrements, stock.Decrement{ProductID: id, Quantity: units[id], Read: snap.Levels[id]})
					}
				}
				w.Orders = orders
				c, err := s.Commit(ctx, w)
				if err != nil {
					t.Fatalf("commit: %v", err)
				}
				var mine []stock.Order
				for _, o := range orders {
					if o.CustomerID == customer {
						o.CreatedAt = c.At
						mine = append(mine, o)
					}
				}
				// One batch's orders share their time: newest first is then the greater id first.
				if len(mine) == 2 && bytes.Compare(mine[0].ID[:], mine[1].ID[:]) < 0 {
					mine[0], mine[1] = mine[1], mine[0]
				}
				want = append(mine, want...)
			}

			var got []stock.Order
			var after *stock.OrdersCursor
			for page := 0; ; page++ {
				p, err := s.CustomerOrders(ctx, stock.OrdersQuery{CustomerID: customer, Limit: 2, After: after})
				if err != nil {
					t.Fatalf("page %d: %v", page, err)
				}
				got = append(got, p.Orders...)
				if p.Next == nil {
					// Four orders in pages of two: the second page is full and still the last,
					// so no empty page follows it.
					if page != 1 || len(p.Orders) != 2 {
						t.Errorf("last page is page %d with %d orders, want page 1 with 2", page, len(p.Orders))
					}
					break
				}
				if len(p.Orders) != 2 || page > 3 {
					t.Fatalf("page %d holds %d orders with a next page, want 2", page, len(p.Orders))
				}
				after = p.Next
			}
			sameTime := cmp.Comparer(func(x, y stock.Order) bool {
				return x.ID == y.ID && x.CustomerID == y.CustomerID && x.Status == y.Status &&
					x.CreatedAt.Equal(y.CreatedAt) && cmp.Equal(x.Items, y.Items)
			})
			if diff := cmp.Diff(got, want, sameTime); diff != "" {
				t.Errorf("orders, newest first (-got +want):\n%s", diff)
			}

			p, err := s.CustomerOrders(ctx, stock.OrdersQuery{CustomerID: "nobody-" + uuid.NewString(), Limit: 10})
			if err != nil || len(p.Orders) != 0 || p.Next != nil {
				t.Errorf("a customer without orders: %+v, %v; want an empty last page", p, err)
			}
		})
	}
}
