package stockhttp_test

import (
	"net/http"
	"testing"
)

func TestSmokeBuyOne(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "smoke", 1)
	res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders",
		Body: map[string]any{"customer_id": "c", "items": []map[string]any{{"product_id": id, "quantity": 1}}}})
	if res.Status != http.StatusCreated {
		t.Fatalf("status %d: %s", res.Status, res.Body)
	}
	if a := audit(t, in.URL, id); !a.Consistent || a.Stock != 0 || a.Sold != 1 {
		t.Fatalf("audit = %+v", a)
	}
}
