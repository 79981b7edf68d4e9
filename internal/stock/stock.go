package stock

import (
	"time"

	"github.com/google/uuid"
)

// Product is something for sale and the stock left of it.
type Product struct {
	ID        int64
	SKU       string
	Name      string
	Stock     int64
	Version   int64
	CreatedAt time.Time
	UpdatedAt time.Time
}

// NewProduct describes a product to create.
type NewProduct struct {
	SKU   string
	Name  string
	Stock int64
}

// Item is one line of an order: a product and how many units of it.
type Item struct {
	ProductID int64
	Quantity  int64
}

// OrderStatusConfirmed is the status of every order that exists: an order is only written once
// its stock has been taken.
const OrderStatusConfirmed = "confirmed"

// Order is a confirmed purchase.
type Order struct {
	ID         uuid.UUID
	CustomerID string
	Status     string
	Items      []Item
	CreatedAt  time.Time
}

// OrderRequest asks for an order. Items are bought all or nothing.
type OrderRequest struct {
	CustomerID string
	Items      []Item
	// IdempotencyKey, when not empty, makes retries of the same request safe: the first outcome
	// is stored and replayed instead of buying again.
	IdempotencyKey string
}

// OrderResult is the outcome of a successful PlaceOrder.
type OrderResult struct {
	// Order is the confirmed order; empty when Accepted is set.
	Order Order
	// Replayed is true when the outcome is that of an earlier request with the same
	// idempotency key, returned again: the order it created, or the order it was accepted as.
	Replayed bool
	// Accepted, when not nil, is the order accepted for later (asynchronously) with the
	// request's idempotency key: that order is the key's outcome, whatever it has become
	// since, and nothing was bought now. Replayed is then true and Order empty.
	Accepted *uuid.UUID
}

// RestockRequest asks for stock to be added to a product.
type RestockRequest struct {
	ProductID int64
	Quantity  int64
	// IdempotencyKey, when not empty, makes retries safe: the first restock is stored with the
	// key and returned again, instead of adding the stock once per attempt.
	IdempotencyKey string
}

// RestockResult is the outcome of a successful Restock.
type RestockResult struct {
	// Product is the product as the restock left it.
	Product Product
	// Replayed is true when an earlier request with the same idempotency key did the restock.
	Replayed bool
}

// Audit accounts for a product's stock: everything received must be either sold or still there.
type Audit struct {
	ProductID int64
	Stock     int64
	// Received is the initial stock plus every restock.
	Received int64
	// Sold is the sum of the quantities of all confirmed orders.
	Sold int64
}

// Consistent reports whether the stock is fully accounted for and not negative.
func (a Audit) Consistent() bool {
	return a.Received-a.Sold == a.Stock && a.Stock >= 0
}
