package stock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// TestIdempotencyKeyLimitCountsCharacters: the key's limit is in characters, as the API's
// documents say and every other limit counts: 255 two-byte characters are a valid key.
func TestIdempotencyKeyLimitCountsCharacters(t *testing.T) {
	t.Parallel()
	store := stocktest.NewMemStore()
	svc := newMemService(t, store, &stocktest.LocalLocker{})
	p, err := store.CreateProduct(context.Background(), stock.NewProduct{SKU: "p", Name: "p", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	req := order("c", one(p.ID, 1))
	req.IdempotencyKey = strings.Repeat("é", stock.MaxIdempotencyKeyLen)
	if _, err := svc.PlaceOrder(context.Background(), req); err != nil {
		t.Errorf("a key of %d characters (%d bytes): %v, want accepted", stock.MaxIdempotencyKeyLen, len(req.IdempotencyKey), err)
	}
	req.IdempotencyKey += "é"
	var invalid *stock.ValidationError
	if _, err := svc.PlaceOrder(context.Background(), req); !errors.As(err, &invalid) || invalid.Field != "Idempotency-Key" {
		t.Errorf("a key of %d characters: %v, want it refused", stock.MaxIdempotencyKeyLen+1, err)
	}
}
