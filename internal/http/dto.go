package stockhttp

import (
	"time"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

type createProductRequest struct {
	SKU   string `json:"sku"`
	Name  string `json:"name"`
	Stock *int64 `json:"stock"`
}

// toNewProduct converts the request; the rules themselves are the service's.
func (r createProductRequest) toNewProduct() (stock.NewProduct, error) {
	if r.Stock == nil {
		return stock.NewProduct{}, &stock.ValidationError{Field: "stock", Reason: "is required"}
	}
	return stock.NewProduct{SKU: r.SKU, Name: r.Name, Stock: *r.Stock}, nil
}

type restockRequest struct {
	Quantity *int64 `json:"quantity"`
}

type productResponse struct {
	ID        int64     `json:"id"`
	SKU       string    `json:"sku"`
	Name      string    `json:"name"`
	Stock     int64     `json:"stock"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func toProductResponse(p stock.Product) productResponse {
	return productResponse{
		ID: p.ID, SKU: p.SKU, Name: p.Name, Stock: p.Stock, Version: p.Version,
		CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
	}
}

type auditResponse struct {
	ProductID  int64 `json:"product_id"`
	Stock      int64 `json:"stock"`
	Received   int64 `json:"received"`
	Sold       int64 `json:"sold"`
	Consistent bool  `json:"consistent"`
}

func toAuditResponse(a stock.Audit) auditResponse {
	return auditResponse{ProductID: a.ProductID, Stock: a.Stock, Received: a.Received, Sold: a.Sold, Consistent: a.Consistent()}
}

type orderItemDTO struct {
	ProductID int64 `json:"product_id"`
	Quantity  int64 `json:"quantity"`
}

type placeOrderRequest struct {
	CustomerID string         `json:"customer_id"`
	Items      []orderItemDTO `json:"items"`
}

func (r placeOrderRequest) toOrderRequest(idempotencyKey string) stock.OrderRequest {
	items := make([]stock.Item, len(r.Items))
	for i, it := range r.Items {
		items[i] = stock.Item{ProductID: it.ProductID, Quantity: it.Quantity}
	}
	return stock.OrderRequest{CustomerID: r.CustomerID, Items: items, IdempotencyKey: idempotencyKey}
}

type orderResponse struct {
	ID         string         `json:"id"`
	CustomerID string         `json:"customer_id"`
	Status     string         `json:"status"`
	Items      []orderItemDTO `json:"items"`
	CreatedAt  time.Time      `json:"created_at"`
	// Only for an order accepted for later and not confirmed (a confirmed one is an order
	// like any other): when it was decided, and why it was rejected.
	DecidedAt *time.Time    `json:"decided_at,omitempty"`
	Rejection *rejectionDTO `json:"rejection,omitempty"`
}

// rejectionDTO is why an order accepted for later was refused: the problem a synchronous order
// would have been answered with, without the envelope.
type rejectionDTO struct {
	Code      string `json:"code"`
	ProductID int64  `json:"product_id,omitempty"`
	Requested int64  `json:"requested,omitempty"`
	Available *int64 `json:"available,omitempty"`
}

// toAsyncOrderResponse shows an order accepted for later; created_at is when it was accepted.
func toAsyncOrderResponse(o async.Order) orderResponse {
	r := toOrderResponse(stock.Order{ID: o.ID, CustomerID: o.CustomerID, Status: o.Status, Items: o.Items, CreatedAt: o.AcceptedAt})
	if !o.DecidedAt.IsZero() {
		at := o.DecidedAt.UTC()
		r.DecidedAt = &at
	}
	if rej := o.Rejection; rej != nil {
		r.Rejection = &rejectionDTO{Code: rejectionCode(rej.Reason), ProductID: rej.ProductID, Requested: rej.Requested}
		if rej.Reason == async.ReasonSoldOut {
			// What was left is a figure of a refusal for want of stock only (0 included).
			available := rej.Available
			r.Rejection.Available = &available
		}
	}
	return r
}

func toOrderResponse(o stock.Order) orderResponse {
	items := make([]orderItemDTO, len(o.Items))
	for i, it := range o.Items {
		items[i] = orderItemDTO{ProductID: it.ProductID, Quantity: it.Quantity}
	}
	return orderResponse{ID: o.ID.String(), CustomerID: o.CustomerID, Status: o.Status, Items: items, CreatedAt: o.CreatedAt.UTC()}
}
