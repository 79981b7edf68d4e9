package stockhttp_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
)

// Contract: orders of several products are bought all or nothing, and list their items by
// product id.

func TestCartSoldOutSellsNothing(t *testing.T) {
	t.Parallel()
	needsServers(t) // its cases start replicas of their own
	tests := []struct {
		name string
		// items builds the cart from the plentiful and the short product.
		items func(plenty, short int64) []orderItem
	}{
		{name: "short product listed second", items: func(plenty, short int64) []orderItem {
			return []orderItem{{plenty, 2}, {short, 2}}
		}},
		{name: "short product listed first", items: func(plenty, short int64) []orderItem {
			return []orderItem{{short, 2}, {plenty, 2}}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := newInstance(t, instanceOptions{})
			// The short product has the higher id, so it is written second: the first
			// product's decrement must be rolled back.
			plenty := createProduct(t, in.URL, "plenty", 10)
			short := createProduct(t, in.URL, "short", 1)

			res := postOrder(t, in.URL, newOrder("c", tt.items(plenty, short)...), nil)
			p := wantProblem(t, res, "sold-out", "/v1/orders")
			if p.ProductID != short || p.Requested != 2 || p.Available == nil || *p.Available != 1 {
				t.Errorf("sold-out names product %d, requested %d, available %v; want product %d, requested 2, available 1",
					p.ProductID, p.Requested, p.Available, short)
			}
			wantUntouched(t, in.URL, plenty, 10)
			wantUntouched(t, in.URL, short, 1)
			for _, id := range []int64{plenty, short} {
				if got := getProduct(t, in.URL, id); got.Version != 0 {
					t.Errorf("product %d version = %d, want 0: nothing was written", id, got.Version)
				}
			}
		})
	}
}

func TestCartDecrementsEveryProduct(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	a := createProduct(t, in.URL, "cart-a", 10)
	b := createProduct(t, in.URL, "cart-b", 10)
	c := createProduct(t, in.URL, "cart-c", 10)

	// Listed out of order; the answer lists them by product id.
	res := postOrder(t, in.URL, newOrder("cart-customer", orderItem{c, 3}, orderItem{a, 1}, orderItem{b, 2}), nil)
	var got orderBody
	wantJSON(t, res, http.StatusCreated, &got)
	wantItems := []orderItem{{a, 1}, {b, 2}, {c, 3}}
	if diff := cmp.Diff(got.Items, wantItems); diff != "" {
		t.Errorf("items mismatch (-got +want):\n%s", diff)
	}

	// GET lists them the same way.
	var fetched orderBody
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + res.Header.Get("Location")}), http.StatusOK, &fetched)
	if diff := cmp.Diff(fetched, got); diff != "" {
		t.Errorf("GET order mismatch (-got +want):\n%s", diff)
	}

	for _, w := range wantItems {
		want := auditBody{ProductID: w.ProductID, Stock: 10 - w.Quantity, Received: 10, Sold: w.Quantity, Consistent: true}
		if got := audit(t, in.URL, w.ProductID); got != want {
			t.Errorf("audit of product %d = %+v, want %+v", w.ProductID, got, want)
		}
	}
}

func TestCartBusyTakesNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	in := c.start(t, instanceOptions{lockWait: 100 * time.Millisecond})
	a := createProduct(t, in.URL, "busy-a", 5)
	b := createProduct(t, in.URL, "busy-b", 5)

	// Only the second product is contended; the whole cart waits and then gives up.
	holdLock(t, in, stocklock.Name(c.prefix, b), nil)
	res := postOrder(t, in.URL, newOrder("c", orderItem{a, 1}, orderItem{b, 1}), nil)
	wantProblem(t, res, "busy", "/v1/orders")
	wantRetryAfter(t, res)
	wantUntouched(t, in.URL, a, 5)
	wantUntouched(t, in.URL, b, 5)

	// The first product's lock was given back: it can be bought alone at once.
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{a, 1}), nil), http.StatusCreated, nil)
}
