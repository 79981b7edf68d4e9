package stock

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestStockLeftKeepsSoldOutAtZero: a product that leaves the on-sale listing sold out stays in
// stocksvc_product_stock at 0 until its sale ends, and the series stay within their bound.
func TestStockLeftKeepsSoldOutAtZero(t *testing.T) {
	now := time.Date(2026, 11, 28, 21, 0, 0, 0, time.UTC)
	ended, later := now.Add(-time.Second), now.Add(time.Hour)
	last := []Product{{ID: 1, Stock: 3}, {ID: 2, Stock: 1, SaleEndsAt: &later}, {ID: 3, Stock: 2, SaleEndsAt: &ended}}
	on := []Product{{ID: 1, Stock: 2}, {ID: 4, Stock: 9}}
	got := stockLeft(last, on, now)
	want := []Product{{ID: 1, Stock: 2}, {ID: 2, Stock: 0, SaleEndsAt: &later}, {ID: 4, Stock: 9}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("stock left (-want +got):\n%s", diff)
	}

	var many []Product
	for id := range int64(stockGaugeProducts + 5) {
		many = append(many, Product{ID: id + 10, Stock: 1})
	}
	got = stockLeft([]Product{{ID: 5}}, many, now)
	if len(got) != stockGaugeProducts || got[0].ID != 5 || got[len(got)-1].ID != int64(10+stockGaugeProducts-2) {
		t.Errorf("bounded: %d products, %d to %d; want %d, the lowest ids", len(got), got[0].ID, got[len(got)-1].ID, stockGaugeProducts)
	}
}
