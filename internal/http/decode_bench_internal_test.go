package stockhttp

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// BenchmarkDecodeJSON is decodeJSON alone on the bodies the routes read: an order as clients
// send it (the one-pass path), an order that path declines (an escaped name: the general
// path), and an admin's product. Compare two builds side by side, alternating:
//
//	go test -run '^$' -bench DecodeJSON -benchmem ./internal/http/
func BenchmarkDecodeJSON(b *testing.B) {
	s := New(Config{})
	for _, tc := range []struct {
		name string
		body string
		dst  func() any
	}{
		{"order", `{"customer_id":"c42","items":[{"product_id":7,"quantity":1}]}`, func() any { return new(placeOrderRequest) }},
		{"order-general", `{"customer_id":"c42","items":[{"product_id":7,"quantit\u0079":1}]}`, func() any { return new(placeOrderRequest) }},
		{"product", `{"sku":"hot-1","name":"Hot","stock":100,"sale_starts_at":"2030-01-01T00:00:00Z","max_per_customer":2,"hold_for":600}`,
			func() any { return new(createProductRequest) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(tc.body))
				r.Header.Set("Content-Type", "application/json")
				if err := s.decodeJSON(httptest.NewRecorder(), r, tc.dst()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
