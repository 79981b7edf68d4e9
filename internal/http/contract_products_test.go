package stockhttp_test

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Contract rows: POST /v1/products, GET /v1/products/{id}, POST /v1/products/{id}/restock,
// GET /v1/products/{id}/audit, and the admin guard on the admin routes.

func TestCreateProduct(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	before := time.Now().Add(-time.Minute)

	res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products", Header: adminHeader(),
		Body: map[string]any{"sku": "sku-1", "name": "Flash kettle", "stock": 7}})
	var got productBody
	wantJSON(t, res, http.StatusCreated, &got)

	if got.ID < 1 {
		t.Errorf("id = %d, want a positive id", got.ID)
	}
	if got.SKU != "sku-1" || got.Name != "Flash kettle" || got.Stock != 7 || got.Version != 0 {
		t.Errorf("product = %+v, want sku-1, Flash kettle, stock 7, version 0", got)
	}
	if got.CreatedAt.Before(before) || got.UpdatedAt.Before(before) {
		t.Errorf("created_at = %v, updated_at = %v, want both set to about now", got.CreatedAt, got.UpdatedAt)
	}
	wantHeader(t, res, "Location", "/v1/products/"+itoa(got.ID))

	// The Location names the product just created, as it was created.
	again := call(t, request{Method: http.MethodGet, URL: in.URL + res.Header.Get("Location")})
	wantJSON(t, again, http.StatusOK, nil)
	if string(again.Body) != string(res.Body) {
		t.Errorf("GET Location = %s, want the body of the 201: %s", again.Body, res.Body)
	}
	wantUntouched(t, in.URL, got.ID, 7)
}

func TestCreateProductZeroStock(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "empty-shelf", 0)
	if got := getProduct(t, in.URL, id); got.Stock != 0 {
		t.Errorf("stock = %d, want 0", got.Stock)
	}
}

func TestCreateProductErrors(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	createProduct(t, in.URL, "taken", 1)

	tests := []struct {
		name string
		body any
		// contentType is sent with raw (string) bodies: "" means application/json and "-"
		// means no Content-Type at all.
		contentType string
		code        string
		wantField   string
	}{
		{name: "duplicate sku", body: map[string]any{"sku": "taken", "name": "n", "stock": 1}, code: "duplicate-sku"},
		{name: "negative stock", body: map[string]any{"sku": "neg", "name": "n", "stock": -1}, code: "invalid-request", wantField: "stock"},
		{name: "stock over the limit", body: map[string]any{"sku": "huge", "name": "n", "stock": 1_000_000_001}, code: "invalid-request", wantField: "stock"},
		{name: "missing stock", body: map[string]any{"sku": "nostock", "name": "n"}, code: "invalid-request", wantField: "stock"},
		{name: "null stock", body: map[string]any{"sku": "nullstock", "name": "n", "stock": nil}, code: "invalid-request", wantField: "stock"},
		{name: "empty sku", body: map[string]any{"sku": "", "name": "n", "stock": 1}, code: "invalid-request", wantField: "sku"},
		{name: "missing sku", body: map[string]any{"name": "n", "stock": 1}, code: "invalid-request", wantField: "sku"},
		{name: "sku too long", body: map[string]any{"sku": repeat("s", 65), "name": "n", "stock": 1}, code: "invalid-request", wantField: "sku"},
		{name: "empty name", body: map[string]any{"sku": "noname", "name": "", "stock": 1}, code: "invalid-request", wantField: "name"},
		{name: "name too long", body: map[string]any{"sku": "longname", "name": repeat("n", 201), "stock": 1}, code: "invalid-request", wantField: "name"},
		{name: "NUL in sku", body: map[string]any{"sku": "nul\u0000", "name": "n", "stock": 1}, code: "invalid-request", wantField: "sku"},
		{name: "NUL in name", body: map[string]any{"sku": "nulname", "name": "a\u0000b", "stock": 1}, code: "invalid-request", wantField: "name"},
		{name: "syntax error", body: `{"sku": "x",`, code: "malformed-json"},
		{name: "stock is a string", body: `{"sku": "x", "name": "n", "stock": "7"}`, code: "malformed-json", wantField: "stock"},
		{name: "fractional stock", body: `{"sku": "x", "name": "n", "stock": 1.5}`, code: "malformed-json", wantField: "stock"},
		{name: "unknown field", body: `{"sku": "x", "name": "n", "stock": 1, "price": 3}`, code: "malformed-json", wantField: "price"},
		{name: "trailing data", body: `{"sku": "x", "name": "n", "stock": 1} {}`, code: "malformed-json"},
		{name: "empty body", body: "", code: "malformed-json"},
		{name: "null body", body: "null", code: "malformed-json"},
		{name: "blank sku", body: map[string]any{"sku": "  ", "name": "n", "stock": 1}, code: "invalid-request", wantField: "sku"},
		{name: "text/plain", body: `{"sku": "x", "name": "n", "stock": 1}`, contentType: "text/plain", code: "unsupported-media-type"},
		{name: "no content type", body: `{"sku": "x", "name": "n", "stock": 1}`, contentType: "-", code: "unsupported-media-type"},
		{name: "too large", body: `{"sku": "x", "name": "` + repeat("n", 1<<20) + `", "stock": 1}`, code: "body-too-large"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			header := adminHeader()
			switch tt.contentType {
			case "":
				header["Content-Type"] = "application/json"
			case "-":
			default:
				header["Content-Type"] = tt.contentType
			}
			// Every case but the duplicate SKU breaks the document on purpose.
			res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products", Body: tt.body, Header: header, Invalid: tt.code != "duplicate-sku"})
			p := wantProblem(t, res, tt.code, "/v1/products")
			if p.Field != tt.wantField {
				t.Errorf("field = %q, want %q", p.Field, tt.wantField)
			}
			if loc := res.Header.Get("Location"); loc != "" {
				t.Errorf("Location = %q on a refusal, want none", loc)
			}
		})
	}
}

func TestGetProduct(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "get-me", 3)

	got := getProduct(t, in.URL, id)
	if got.ID != id || got.SKU != "get-me" || got.Name != "Product get-me" || got.Stock != 3 || got.Version != 0 {
		t.Errorf("product = %+v, want id %d, sku get-me, stock 3, version 0", got, id)
	}
	if got.CreatedAt.IsZero() || got.UpdatedAt.IsZero() {
		t.Errorf("created_at = %v, updated_at = %v, want both set", got.CreatedAt, got.UpdatedAt)
	}
}

// TestGetProductFreshness: a read says how fresh it is — Cache-Status (RFC 9211) and Age —
// and reflects an order the same replica has answered.
func TestGetProductFreshness(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "fresh", 3)
	path := in.URL + "/v1/products/" + itoa(id)

	first := call(t, request{Method: http.MethodGet, URL: path})
	wantJSON(t, first, http.StatusOK, nil)
	wantHeader(t, first, "Cache-Status", "stocksvc; fwd=miss")
	wantHeader(t, first, "Age", "0")
	second := call(t, request{Method: http.MethodGet, URL: path})
	wantHeader(t, second, "Cache-Status", "stocksvc; hit")
	if age, err := strconv.Atoi(second.Header.Get("Age")); err != nil || age < 0 {
		t.Errorf("Age %q: want whole seconds", second.Header.Get("Age"))
	}

	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 2}), nil), http.StatusCreated, nil)
	if got := getProduct(t, in.URL, id); got.Stock != 1 || got.Version != 1 {
		t.Errorf("read after the order's 201: stock %d at version %d, want 1 at version 1", got.Stock, got.Version)
	}
}

// TestGetProductWithoutRedis: a replica whose Redis is down still answers product reads, from
// Postgres, while orders get 503.
func TestGetProductWithoutRedis(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	healthy := c.start(t, instanceOptions{})
	id := createProduct(t, healthy.URL, "no-redis", 4)
	broken := c.start(t, instanceOptions{redisURL: "redis://" + deadEndpoint(t) + "/0"})

	res := call(t, request{Method: http.MethodGet, URL: broken.URL + "/v1/products/" + itoa(id)})
	wantJSON(t, res, http.StatusOK, nil)
	wantHeader(t, res, "Cache-Status", "stocksvc; fwd=miss")
	if got := res.JSON(t)["stock"]; got != float64(4) {
		t.Errorf("stock = %v, want 4", got)
	}
	wantProblem(t, postOrder(t, broken.URL, newOrder("c", orderItem{id, 1}), nil), "unavailable", "/v1/orders")
}

func TestGetProductNotFound(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "exists", 1)

	tests := []struct {
		name          string
		id            string
		wantProductID int64
	}{
		{name: "no such product", id: itoa(id + 1000), wantProductID: id + 1000},
		{name: "not a number", id: "abc"},
		{name: "zero", id: "0"},
		{name: "negative", id: "-1"},
		{name: "fraction", id: "1.5"},
		{name: "overflows int64", id: "99999999999999999999"},
		{name: "leading zero", id: "0" + itoa(id)},
		{name: "plus sign", id: "+" + itoa(id)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := "/v1/products/" + tt.id
			// An id that is not a product id in its one form breaks the document's pattern.
			p := wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + path, Header: adminHeader(), Invalid: tt.wantProductID == 0}), "product-not-found", path)
			if p.ProductID != tt.wantProductID {
				t.Errorf("product_id = %d, want %d", p.ProductID, tt.wantProductID)
			}
		})
	}
}

func TestRestock(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "restock-me", 2)
	before := getProduct(t, in.URL, id)

	res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products/" + itoa(id) + "/restock",
		Header: adminHeader(), Body: map[string]any{"quantity": 5}})
	var got productBody
	wantJSON(t, res, http.StatusOK, &got)
	if got.ID != id || got.Stock != 7 || got.Version != before.Version+1 {
		t.Errorf("restocked product = %+v, want id %d, stock 7, version %d", got, id, before.Version+1)
	}
	if got.UpdatedAt.Before(before.UpdatedAt) {
		t.Errorf("updated_at = %v, want at or after %v", got.UpdatedAt, before.UpdatedAt)
	}
	if got.CreatedAt != before.CreatedAt {
		t.Errorf("created_at = %v, want it unchanged: %v", got.CreatedAt, before.CreatedAt)
	}
	if g := getProduct(t, in.URL, id); g != got {
		t.Errorf("GET after restock = %+v, want %+v", g, got)
	}
	want := auditBody{ProductID: id, Stock: 7, Received: 7, Sold: 0, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v", a, want)
	}
}

// TestRestockIdempotencyKey: a restock sent again with its Idempotency-Key — its answer lost,
// say — is answered with the first one, byte for byte, and adds nothing; the same key on another
// restock is 422; an empty key is 422.
func TestRestockIdempotencyKey(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "restock-key", 2)
	path := in.URL + "/v1/products/" + itoa(id) + "/restock"
	header := adminHeader()
	header["Idempotency-Key"] = "restock-1"
	header["X-Request-ID"] = "restock-replay" // the same id on both calls: the bodies compare whole

	first := call(t, request{Method: http.MethodPost, URL: path, Header: header, Body: map[string]any{"quantity": 5}})
	wantJSON(t, first, http.StatusOK, nil)
	wantHeader(t, first, "Idempotent-Replayed", "")
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil), http.StatusCreated, nil)

	again := call(t, request{Method: http.MethodPost, URL: path, Header: header, Body: map[string]any{"quantity": 5}})
	wantJSON(t, again, http.StatusOK, nil)
	wantHeader(t, again, "Idempotent-Replayed", "true")
	if string(again.Body) != string(first.Body) {
		t.Errorf("replayed restock = %s, want the first answer: %s", again.Body, first.Body)
	}
	if a := audit(t, in.URL, id); a.Received != 7 || a.Stock != 6 {
		t.Errorf("audit = %+v, want 7 received (the restock once) and 6 left", a)
	}
	other := call(t, request{Method: http.MethodPost, URL: path, Header: header, Body: map[string]any{"quantity": 6}})
	wantProblem(t, other, "idempotency-key-reused", "/v1/products/"+itoa(id)+"/restock")
	header["Idempotency-Key"] = ""
	empty := call(t, request{Method: http.MethodPost, URL: path, Header: header, Body: map[string]any{"quantity": 1}, Invalid: true})
	wantProblem(t, empty, "invalid-request", "/v1/products/"+itoa(id)+"/restock")
}

func TestRestockErrors(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "restock-errors", 4)

	tests := []struct {
		name          string
		id            string
		body          any
		header        map[string]string
		code          string
		wantField     string
		wantProductID int64
	}{
		{name: "zero quantity", id: itoa(id), body: map[string]any{"quantity": 0}, code: "invalid-request", wantField: "quantity"},
		{name: "negative quantity", id: itoa(id), body: map[string]any{"quantity": -3}, code: "invalid-request", wantField: "quantity"},
		{name: "missing quantity", id: itoa(id), body: map[string]any{}, code: "invalid-request", wantField: "quantity"},
		{name: "no such product", id: itoa(id + 1000), body: map[string]any{"quantity": 1}, code: "product-not-found", wantProductID: id + 1000},
		{name: "id not a number", id: "abc", body: map[string]any{"quantity": 1}, code: "product-not-found"},
		{name: "quantity is a string", id: itoa(id), body: `{"quantity": "1"}`, header: map[string]string{"Content-Type": "application/json"}, code: "malformed-json", wantField: "quantity"},
		{name: "unknown field", id: itoa(id), body: `{"quantity": 1, "why": "x"}`, header: map[string]string{"Content-Type": "application/json"}, code: "malformed-json", wantField: "why"},
		{name: "text/plain", id: itoa(id), body: `{"quantity": 1}`, header: map[string]string{"Content-Type": "text/plain"}, code: "unsupported-media-type"},
	}
	// The group returns when its parallel cases have finished, so the check below sees them all.
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				header := adminHeader()
				for k, v := range tt.header {
					header[k] = v
				}
				path := "/v1/products/" + tt.id + "/restock"
				// Every case but a well-formed id of no product breaks the document on purpose.
				invalid := tt.code != "product-not-found" || tt.wantProductID == 0
				p := wantProblem(t, call(t, request{Method: http.MethodPost, URL: in.URL + path, Body: tt.body, Header: header, Invalid: invalid}), tt.code, path)
				if p.Field != tt.wantField {
					t.Errorf("field = %q, want %q", p.Field, tt.wantField)
				}
				if p.ProductID != tt.wantProductID {
					t.Errorf("product_id = %d, want %d", p.ProductID, tt.wantProductID)
				}
			})
		}
	})
	wantUntouched(t, in.URL, id, 4)
}

func TestAudit(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "audited", 5)
	wantJSON(t, postOrder(t, in.URL, newOrder("c1", orderItem{id, 2}), nil), http.StatusCreated, nil)
	wantJSON(t, postOrder(t, in.URL, newOrder("c2", orderItem{id, 1}), nil), http.StatusCreated, nil)
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products/" + itoa(id) + "/restock",
		Header: adminHeader(), Body: map[string]any{"quantity": 10}}), http.StatusOK, nil)

	res := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/products/" + itoa(id) + "/audit", Header: adminHeader()})
	var got auditBody
	wantJSON(t, res, http.StatusOK, &got)
	want := auditBody{ProductID: id, Stock: 12, Received: 15, Sold: 3, Consistent: true}
	if got != want {
		t.Errorf("audit = %+v, want %+v", got, want)
	}
	// Exactly the documented members, no more.
	if keys := res.JSON(t); len(keys) != 6 {
		t.Errorf("audit has %d members, want 6: %s", len(keys), res.Body)
	}
}

func TestAuditNotFound(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	tests := []struct {
		name          string
		id            string
		wantProductID int64
	}{
		{name: "no such product", id: "4242", wantProductID: 4242},
		{name: "not a number", id: "x1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := "/v1/products/" + tt.id + "/audit"
			// An id that is not a product id in its one form breaks the document's pattern.
			p := wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + path, Header: adminHeader(), Invalid: tt.wantProductID == 0}), "product-not-found", path)
			if p.ProductID != tt.wantProductID {
				t.Errorf("product_id = %d, want %d", p.ProductID, tt.wantProductID)
			}
		})
	}
}

func TestAdminUnauthorized(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "guarded", 3)

	routes := []struct {
		name string
		path string
		body map[string]any
	}{
		{name: "create", path: "/v1/products", body: map[string]any{"sku": "sneaky", "name": "n", "stock": 1}},
		{name: "restock", path: "/v1/products/" + itoa(id) + "/restock", body: map[string]any{"quantity": 100}},
	}
	auths := []struct {
		name      string
		header    map[string]string
		malformed bool // no bearer token at all: breaks the document's security requirement
	}{
		{name: "no authorization", header: nil, malformed: true},
		{name: "wrong token", header: map[string]string{"Authorization": "Bearer not-the-token"}},
		{name: "token prefix", header: map[string]string{"Authorization": "Bearer " + adminToken[:len(adminToken)-1]}},
		{name: "empty bearer", header: map[string]string{"Authorization": "Bearer "}, malformed: true},
		{name: "basic scheme", header: map[string]string{"Authorization": "Basic " + adminToken}, malformed: true},
		{name: "bare token", header: map[string]string{"Authorization": adminToken}, malformed: true},
	}
	t.Run("cases", func(t *testing.T) {
		for _, rt := range routes {
			for _, a := range auths {
				t.Run(rt.name+"/"+a.name, func(t *testing.T) {
					t.Parallel()
					res := call(t, request{Method: http.MethodPost, URL: in.URL + rt.path, Body: rt.body, Header: a.header, Invalid: a.malformed})
					wantProblem(t, res, "unauthorized", rt.path)
					if got := res.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer ") {
						t.Errorf("WWW-Authenticate = %q, want a Bearer challenge", got)
					}
				})
			}
		}
	})
	// Nothing the refused requests asked for happened: no restock, and the SKU is still free.
	wantUntouched(t, in.URL, id, 3)
	createProduct(t, in.URL, "sneaky", 1)
}

func TestAdminDisabled(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{adminToken: "-"})

	tests := []struct {
		name   string
		path   string
		body   map[string]any
		header map[string]string
	}{
		{name: "create without token", path: "/v1/products", body: map[string]any{"sku": "a", "name": "n", "stock": 1}},
		{name: "create with a token", path: "/v1/products", body: map[string]any{"sku": "a", "name": "n", "stock": 1}, header: adminHeader()},
		{name: "restock with a token", path: "/v1/products/1/restock", body: map[string]any{"quantity": 1}, header: adminHeader()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// Without a token the request breaks the document's security requirement.
			res := call(t, request{Method: http.MethodPost, URL: in.URL + tt.path, Body: tt.body, Header: tt.header, Invalid: tt.header == nil})
			wantProblem(t, res, "admin-disabled", tt.path)
		})
	}
}
