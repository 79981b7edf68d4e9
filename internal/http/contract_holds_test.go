package stockhttp_test

import (
	"net/http"
	"testing"
	"time"
)

// The contract of holds: an order of a product sold with a hold is held until confirmed or
// cancelled; both are idempotent, and the wrong one after the other is a 409.
func TestHoldsContract(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	p := createRuledProduct(t, in.URL, "holds", 3, map[string]any{"hold_for": 600})
	type heldBody struct {
		orderBody
		ExpiresAt *time.Time `json:"expires_at"`
	}
	place := func(customer string) heldBody {
		t.Helper()
		res := postOrder(t, in.URL, newOrder(customer, orderItem{p.ID, 1}), nil)
		var o heldBody
		wantJSON(t, res, http.StatusCreated, &o)
		if o.Status != "held" || o.ExpiresAt == nil || o.ExpiresAt.Sub(o.CreatedAt) != 600*time.Second {
			t.Fatalf("order %+v, want held for 600 s", o)
		}
		return o
	}
	post := func(id, action string, invalid bool) response {
		t.Helper()
		return call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders/" + id + "/" + action, Invalid: invalid})
	}
	paid := place("hal")
	for range 2 {
		var o orderBody
		wantJSON(t, post(paid.ID, "confirm", false), http.StatusOK, &o)
		if o.Status != "confirmed" || o.DecidedAt == nil {
			t.Fatalf("confirmed %+v", o)
		}
	}
	wantProblem(t, post(paid.ID, "cancel", true), "order-confirmed", "/v1/orders/"+paid.ID+"/cancel")

	gaveUp := place("ida")
	for range 2 {
		var o orderBody
		wantJSON(t, post(gaveUp.ID, "cancel", false), http.StatusOK, &o)
		if o.Status != "cancelled" {
			t.Fatalf("cancelled %+v", o)
		}
	}
	wantProblem(t, post(gaveUp.ID, "confirm", true), "order-cancelled", "/v1/orders/"+gaveUp.ID+"/confirm")
	wantProblem(t, post("01a20ad4-d303-71a0-bf99-7bb0941bdf33", "confirm", true), "order-not-found", "/v1/orders/01a20ad4-d303-71a0-bf99-7bb0941bdf33/confirm")

	a := audit(t, in.URL, p.ID)
	if a.Stock != 2 || a.Sold != 1 {
		t.Errorf("audit %+v, want 1 sold and the cancelled unit back: 2 in stock", a)
	}
}
