package stockhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestPublicLeavesOutAdminAndMetrics checks the API a public listener serves: the admin routes
// and /metrics do not exist there, even with the right token, and everything else does.
func TestPublicLeavesOutAdminAndMetrics(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	public := httptest.NewServer(in.API.Public())
	t.Cleanup(public.Close)
	id := createProduct(t, in.URL, "public-routes", 5)
	product := "/v1/products/" + itoa(id)

	for _, tt := range []struct{ method, path string }{
		{http.MethodPost, "/v1/products"},
		{http.MethodPost, product + "/restock"},
		{http.MethodGet, product + "/audit"},
		{http.MethodPatch, product + "/sale"},
		{http.MethodPost, product + "/sale/end"},
		{http.MethodGet, "/metrics"},
		{http.MethodHead, "/metrics"},
	} {
		// One body for every route, so it is a valid request for none of them.
		res := call(t, request{Method: tt.method, URL: public.URL + tt.path, Header: adminHeader(),
			Body: map[string]any{"sku": "x", "name": "x", "stock": 1, "quantity": 1}, Invalid: true})
		if tt.method == http.MethodHead {
			if res.Status != http.StatusNotFound {
				t.Errorf("HEAD %s on the public API: status %d, want 404", tt.path, res.Status)
			}
			continue
		}
		wantProblem(t, res, "not-found", tt.path)
	}

	for _, path := range []string{"/healthz", "/readyz", product, "/problems/sold-out"} {
		if res := call(t, request{Method: http.MethodGet, URL: public.URL + path}); res.Status != http.StatusOK {
			t.Errorf("GET %s on the public API: status %d, want 200: %s", path, res.Status, res.Body)
		}
	}
	res := call(t, request{Method: http.MethodPost, URL: public.URL + "/v1/orders",
		Body: map[string]any{"customer_id": "public", "items": []map[string]any{{"product_id": id, "quantity": 2}}}})
	if res.Status != http.StatusCreated {
		t.Fatalf("order on the public API: status %d: %s", res.Status, res.Body)
	}
	if got := audit(t, in.URL, id); got.Stock != 3 || !got.Consistent {
		t.Errorf("audit after the order = %+v, want 3 left, consistent", got)
	}

	// The full API still has everything, and its metrics saw the public requests too: both
	// listeners serve one Server.
	metrics := call(t, request{Method: http.MethodGet, URL: in.URL + "/metrics", Header: adminHeader()})
	if metrics.Status != http.StatusOK || !strings.Contains(string(metrics.Body), `stocksvc_http_requests_total{code="201",method="POST",route="/v1/orders"}`) {
		t.Errorf("GET /metrics on the full API: status %d, want 200 counting the public order:\n%.2000s", metrics.Status, metrics.Body)
	}
}

// TestMetricsWhereAdminsAre: /metrics is no public read (a scrape runs Postgres queries). On
// the only listener (ServeHTTP) it needs the admin token, as the admin routes do; on a
// listener of operators (Admin) it answers without one while the admin routes still need it;
// on the public listener (Public) it does not exist.
func TestMetricsWhereAdminsAre(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	admin := httptest.NewServer(in.API.Admin())
	t.Cleanup(admin.Close)
	public := httptest.NewServer(in.API.Public())
	t.Cleanup(public.Close)
	wrong := map[string]string{"Authorization": "Bearer not-" + adminToken}

	for _, method := range []string{http.MethodGet, http.MethodHead} {
		for _, header := range []map[string]string{nil, wrong} {
			res := call(t, request{Method: method, URL: in.URL + "/metrics", Header: header})
			if res.Status != http.StatusUnauthorized || res.Header.Get("WWW-Authenticate") != `Bearer realm="stocksvc admin"` {
				t.Errorf("%s /metrics on the only listener with %v: status %d, WWW-Authenticate %q; want 401 asking for the admin token",
					method, header, res.Status, res.Header.Get("WWW-Authenticate"))
			}
		}
		if res := call(t, request{Method: method, URL: in.URL + "/metrics", Header: adminHeader()}); res.Status != http.StatusOK {
			t.Errorf("%s /metrics on the only listener with the admin token: status %d, want 200", method, res.Status)
		}
		if res := call(t, request{Method: method, URL: admin.URL + "/metrics"}); res.Status != http.StatusOK {
			t.Errorf("%s /metrics on the admin listener without a token: status %d, want 200", method, res.Status)
		}
		if res := call(t, request{Method: method, URL: public.URL + "/metrics", Header: adminHeader()}); res.Status != http.StatusNotFound {
			t.Errorf("%s /metrics on the public listener: status %d, want 404", method, res.Status)
		}
	}
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/metrics"}), "unauthorized", "/metrics")
	// The admin listener leaves only /metrics open.
	wantProblem(t, call(t, request{Method: http.MethodPost, URL: admin.URL + "/v1/products",
		Body: map[string]any{"sku": "x", "name": "x", "stock": 1}, Invalid: true}), "unauthorized", "/v1/products")

	// Without an admin token the admin routes are off, and /metrics on the only listener with them.
	off := newFakeInstance(t, fakeOptions{adminToken: "-"})
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: off.URL + "/metrics"}), "admin-disabled", "/metrics")
}
