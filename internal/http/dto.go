package stockhttp

import (
	"time"

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
}

func toOrderResponse(o stock.Order) orderResponse {
	items := make([]orderItemDTO, len(o.Items))
	for i, it := range o.Items {
		items[i] = orderItemDTO{ProductID: it.ProductID, Quantity: it.Quantity}
	}
	return orderResponse{ID: o.ID.String(), CustomerID: o.CustomerID, Status: o.Status, Items: items, CreatedAt: o.CreatedAt.UTC()}
}
