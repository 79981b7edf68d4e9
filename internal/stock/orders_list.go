package stock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
)

// MaxOrdersPage is the most orders one page of a customer's orders holds.
const MaxOrdersPage = 100

// OrderLister lists a customer's orders. It is part of Store.
type OrderLister interface {
	// CustomerOrders returns q.CustomerID's orders, newest first (created_at, then id, both
	// descending), those strictly after q.After when it is set, in one of q.Statuses when it
	// is not empty, at most q.Limit of them
	// (q is valid: Service.CustomerOrders checks it), and where the next page starts when
	// there are more. Errors: ErrUnavailable.
	CustomerOrders(ctx context.Context, q OrdersQuery) (OrdersPage, error)
}

// OrdersQuery asks for a page of one customer's orders.
type OrdersQuery struct {
	CustomerID string
	// Limit is the most orders of the page: 1 to MaxOrdersPage.
	Limit int
	// After, when set, is where the page starts: OrdersPage.Next of the page before.
	After *OrdersCursor
	// Statuses, when not empty, lists only the orders in one of these statuses (OrderStatus*);
	// empty: every order, whatever became of it.
	Statuses []string
}

// OrdersCursor is a place in a customer's orders, newest first: the page after it starts
// with the first order older than CreatedAt, or as old with a smaller ID. Orders of one batch
// share their created_at, hence the id.
type OrdersCursor struct {
	CreatedAt time.Time
	ID        uuid.UUID
}

// OrdersPage is one page of a customer's orders.
type OrdersPage struct {
	Orders []Order
	// Next, when set, is where the next page starts; nil on the last page.
	Next *OrdersCursor
}

// orderStatuses are the statuses an order (a row of orders) can have.
var orderStatuses = []string{OrderStatusHeld, OrderStatusConfirmed, OrderStatusCancelled, OrderStatusExpired}

// CustomerOrders returns a page of a customer's orders, newest first: every order written —
// confirmed, held, cancelled, expired (an order accepted for later is one once it is decided
// and bought) — or, with q.Statuses, those in one of them. Whose orders a caller may read is
// the transport's to decide. Errors: *ValidationError (customer_id, limit, status),
// ErrUnavailable.
func (s *Service) CustomerOrders(ctx context.Context, q OrdersQuery) (OrdersPage, error) {
	if err := ValidateCustomerID(q.CustomerID); err != nil {
		return OrdersPage{}, err
	}
	if q.Limit < 1 || q.Limit > MaxOrdersPage {
		return OrdersPage{}, &ValidationError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and %d", MaxOrdersPage)}
	}
	for _, st := range q.Statuses {
		if !slices.Contains(orderStatuses, st) {
			return OrdersPage{}, &ValidationError{Field: "status", Reason: "must be held, confirmed, cancelled or expired"}
		}
	}
	return s.store.CustomerOrders(ctx, q)
}
