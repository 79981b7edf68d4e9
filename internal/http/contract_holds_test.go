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

// TestHoldForCeiling: a hold lasts at most an hour (issue #31), on creation and on a change of
// the sale; longer is refused, naming hold_for, and changes nothing.
func TestHoldForCeiling(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	p := createRuledProduct(t, in.URL, "hour", 3, map[string]any{"hold_for": 3600})
	for name, body := range map[string]map[string]any{
		"create": {"sku": "day", "name": "day", "stock": 3, "hold_for": 3601},
		"change": {"hold_for": 86400},
	} {
		t.Run(name, func(t *testing.T) {
			req := request{Method: http.MethodPost, URL: in.URL + "/v1/products", Header: adminHeader(), Body: body, Invalid: true}
			path := "/v1/products"
			if name == "change" {
				path = "/v1/products/" + itoa(p.ID) + "/sale"
				req.Method, req.URL = http.MethodPatch, in.URL+path
			}
			if prob := wantProblem(t, call(t, req), "invalid-request", path); prob.Field != "hold_for" {
				t.Errorf("field = %q, want hold_for", prob.Field)
			}
		})
	}
	res := postOrder(t, in.URL, newOrder("ann", orderItem{p.ID, 1}), nil)
	var o struct {
		orderBody
		ExpiresAt *time.Time `json:"expires_at"`
	}
	wantJSON(t, res, http.StatusCreated, &o)
	if o.ExpiresAt == nil || o.ExpiresAt.Sub(o.CreatedAt) != time.Hour {
		t.Errorf("order %+v, want held for the hour the product still has", o)
	}
}

// TestHoldLimitContract: max_held_per_customer (issue #31) — its default when not given (the
// limit, else STOCKSVC_MAX_QUANTITY), set and put back by PATCH, refused below 1 — and the
// hold-limit refusal, which stores nothing under the Idempotency-Key: once a hold ends, the
// same request is held.
func TestHoldLimitContract(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{maxQuantity: 4})
	patch := func(id int64, body map[string]any) productBody {
		t.Helper()
		var p productBody
		wantJSON(t, call(t, request{Method: http.MethodPatch, URL: in.URL + "/v1/products/" + itoa(id) + "/sale", Header: adminHeader(), Body: body}), http.StatusOK, &p)
		return p
	}
	for _, tc := range []struct {
		sku   string
		rules map[string]any
		want  int64
	}{
		{"cap-default", map[string]any{"hold_for": 600}, 4},
		{"cap-limit", map[string]any{"hold_for": 600, "max_per_customer": 3}, 3},
		{"cap-given", map[string]any{"hold_for": 600, "max_per_customer": 3, "max_held_per_customer": 2}, 2},
		{"cap-null", map[string]any{"max_held_per_customer": nil}, 4},
	} {
		p := createRuledProduct(t, in.URL, tc.sku, 5, tc.rules)
		if p.MaxHeldPerCustomer != tc.want || getProduct(t, in.URL, p.ID).MaxHeldPerCustomer != tc.want {
			t.Errorf("%s: max_held_per_customer %d, want %d, created and read", tc.sku, p.MaxHeldPerCustomer, tc.want)
		}
	}
	res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products", Header: adminHeader(), Invalid: true,
		Body: map[string]any{"sku": "cap-zero", "name": "zero", "stock": 1, "max_held_per_customer": 0}})
	if prob := wantProblem(t, res, "invalid-request", "/v1/products"); prob.Field != "max_held_per_customer" {
		t.Errorf("field = %q, want max_held_per_customer", prob.Field)
	}

	p := createRuledProduct(t, in.URL, "cap-patched", 10, map[string]any{"hold_for": 600})
	for _, step := range []struct {
		body map[string]any
		want int64
	}{
		{map[string]any{"max_held_per_customer": 2}, 2},
		{map[string]any{"sale_ends_at": time.Now().Add(time.Hour)}, 2},
		{map[string]any{"max_per_customer": 6}, 6}, // the default follows the limit
		{map[string]any{"max_held_per_customer": 3}, 3},
		{map[string]any{"max_held_per_customer": nil}, 6},
		{map[string]any{"max_per_customer": nil, "max_held_per_customer": 2}, 2},
	} {
		if got := patch(p.ID, step.body); got.MaxHeldPerCustomer != step.want {
			t.Errorf("PATCH %v: max_held_per_customer %d, want %d", step.body, got.MaxHeldPerCustomer, step.want)
		}
	}

	var first orderBody
	wantJSON(t, postOrder(t, in.URL, newOrder("hoa", orderItem{p.ID, 2}), nil), http.StatusCreated, &first)
	key := map[string]string{"Idempotency-Key": "cap-" + first.ID}
	prob := wantProblem(t, postOrder(t, in.URL, newOrder("hoa", orderItem{p.ID, 1}), key), "hold-limit", "/v1/orders")
	if prob.ProductID != p.ID || prob.MaxHeldPerCustomer != 2 || prob.Held == nil || *prob.Held != 2 || prob.Requested != 1 {
		t.Errorf("problem %+v, want the product, cap 2, 2 held, 1 requested", prob)
	}
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders/" + first.ID + "/cancel"}), http.StatusOK, nil)
	res = postOrder(t, in.URL, newOrder("hoa", orderItem{p.ID, 1}), key)
	wantJSON(t, res, http.StatusCreated, nil)
	if res.Header.Get("Idempotent-Replayed") != "" {
		t.Errorf("the retry after the cancel was replayed: a hold-limit refusal must not be stored")
	}
}
