package stockhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// The replica's own work per request, with the database and Redis out of the picture (an
// in-memory store, an in-process lock): what an order costs above GET /healthz, the floor of
// any request. Compare the two in one run:
//
//	go test -run '^$' -bench . -benchmem ./internal/http/
//
// The network, the balancer, Postgres and Redis are measured by go run -C loadtest . -throughput.

func benchServer(b *testing.B) (*stockhttp.Server, int64) {
	b.Helper()
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{}, stock.Config{}, nil)
	b.Cleanup(svc.Close)
	p, err := svc.CreateProduct(context.Background(), stock.NewProduct{SKU: "hot", Name: "hot", Stock: stock.MaxStock})
	if err != nil {
		b.Fatal(err)
	}
	return stockhttp.New(stockhttp.Config{Service: svc, Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))}), p.ID
}

func BenchmarkHealthz(b *testing.B) {
	srv, _ := benchServer(b)
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if w.Code != http.StatusOK {
				b.Errorf("status %d", w.Code)
				return
			}
		}
	})
}

func BenchmarkPlaceOrder(b *testing.B) {
	srv, id := benchServer(b)
	var n atomic.Int64
	// Many buyers at once, as in a sale: the product's queue then has orders to batch, and
	// ns/op is the cost of an order rather than the wait for its batch.
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := fmt.Sprintf(`{"customer_id":"c%d","items":[{"product_id":%d,"quantity":1}]}`, n.Add(1), id)
			r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			r.Header.Set("Idempotency-Key", uuid.NewString())
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if w.Code != http.StatusCreated {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}

// soldOutViews is a stock.Views that knows every product to be sold out: the cost of a refusal
// answered from a view, with Redis out of the picture as the store is.
type soldOutViews struct{}

func (soldOutViews) Product(context.Context, int64) (stock.ProductView, error) {
	return stock.ProductView{}, stock.ErrUnavailable
}
func (soldOutViews) Refusal(context.Context, int64) stock.Refusal {
	return stock.Refusal{SoldOut: true, Version: 1}
}
func (soldOutViews) Committed(int64, int64, int64, time.Time) {}
func (soldOutViews) Raise(context.Context, int64) (func(*stock.Product), error) {
	return func(*stock.Product) {}, nil
}
func (soldOutViews) Created(int64) {}

func BenchmarkSoldOutFromView(b *testing.B) {
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{},
		stock.Config{Views: soldOutViews{}}, nil)
	b.Cleanup(svc.Close)
	srv := stockhttp.New(stockhttp.Config{Service: svc, Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	var n atomic.Int64
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := fmt.Sprintf(`{"customer_id":"c%d","items":[{"product_id":7,"quantity":1}]}`, n.Add(1))
			r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if w.Code != http.StatusConflict {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}
