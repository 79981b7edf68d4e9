package stockhttp_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestListOrdersByStatus: GET /v1/orders lists every order of the customer, whatever became of
// it, and status= keeps those of the statuses it names (issue #34, item 4: the list said
// confirmed only and was not).
func TestListOrdersByStatus(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	held := createRuledProduct(t, in.URL, "list-held", 5, map[string]any{"hold_for": 600})
	now := createProduct(t, in.URL, "list-now", 5)
	place := func(id int64) orderBody {
		t.Helper()
		var o orderBody
		wantJSON(t, postOrder(t, in.URL, newOrder("lou", orderItem{id, 1}), nil), http.StatusCreated, &o)
		return o
	}
	bought, kept, dropped := place(now), place(held.ID), place(held.ID)
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders/" + dropped.ID + "/cancel"}), http.StatusOK, &orderBody{})

	statuses := func(query string) string {
		t.Helper()
		var got []string
		for _, o := range listOrders(t, in.URL+"/v1/orders?customer_id=lou"+query, nil).Items {
			got = append(got, o.ID[:8]+"="+o.Status)
		}
		return strings.Join(got, " ")
	}
	all := dropped.ID[:8] + "=cancelled " + kept.ID[:8] + "=held " + bought.ID[:8] + "=confirmed"
	for _, tt := range []struct{ query, want string }{
		{"", all},
		{"&status=confirmed", bought.ID[:8] + "=confirmed"},
		{"&status=held,cancelled", dropped.ID[:8] + "=cancelled " + kept.ID[:8] + "=held"},
		{"&status=held&status=confirmed", kept.ID[:8] + "=held " + bought.ID[:8] + "=confirmed"},
		{"&status=expired", ""},
	} {
		if got := statuses(tt.query); got != tt.want {
			t.Errorf("orders%s = %q, want %q", tt.query, got, tt.want)
		}
	}
	p := wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders?customer_id=lou&status=pending", Invalid: true}), "invalid-request", "/v1/orders")
	if p.Field != "status" {
		t.Errorf("field = %q, want status", p.Field)
	}
}
