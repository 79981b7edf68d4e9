package stockhttp_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
)

// Contract rows: POST /v1/orders and GET /v1/orders/{id}.

func TestPlaceOrder(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "order-me", 5)
	before := time.Now().Add(-time.Minute)

	res := postOrder(t, in.URL, newOrder("customer-1", orderItem{id, 2}), nil)
	var got orderBody
	wantJSON(t, res, http.StatusCreated, &got)

	orderID, err := uuid.Parse(got.ID)
	if err != nil {
		t.Errorf("id = %q, want a UUID: %v", got.ID, err)
	}
	want := orderBody{ID: got.ID, CustomerID: "customer-1", Status: "confirmed", Items: []orderItem{{id, 2}}, CreatedAt: got.CreatedAt}
	if diff := cmp.Diff(got, want); diff != "" {
		t.Errorf("order mismatch (-got +want):\n%s", diff)
	}
	if got.CreatedAt.Before(before) {
		t.Errorf("created_at = %v, want about now", got.CreatedAt)
	}
	wantHeader(t, res, "Location", "/v1/orders/"+orderID.String())
	if v := res.Header.Get("Idempotent-Replayed"); v != "" {
		t.Errorf("Idempotent-Replayed = %q on a first request, want none", v)
	}

	// The Location names the order, byte for byte as it was confirmed.
	again := call(t, request{Method: http.MethodGet, URL: in.URL + res.Header.Get("Location")})
	wantJSON(t, again, http.StatusOK, nil)
	if string(again.Body) != string(res.Body) {
		t.Errorf("GET Location = %s, want the body of the 201: %s", again.Body, res.Body)
	}
	want2 := auditBody{ProductID: id, Stock: 3, Received: 5, Sold: 2, Consistent: true}
	if a := audit(t, in.URL, id); a != want2 {
		t.Errorf("audit = %+v, want %+v", a, want2)
	}
}

func TestPlaceOrderAtTheLimits(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	// Each product has room for every case, which run at the same time.
	ids := make([]int64, 20)
	for i := range ids {
		ids[i] = createProduct(t, in.URL, "limit-"+itoa(int64(i)), 20)
	}
	twenty := make([]orderItem, len(ids))
	for i, id := range ids {
		twenty[i] = orderItem{id, 1}
	}

	tests := []struct {
		name string
		body orderRequest
	}{
		{name: "20 items", body: newOrder("c", twenty...)},
		{name: "quantity 10", body: newOrder("c", orderItem{ids[0], 10})},
		{name: "customer id of 64 characters", body: newOrder(repeat("c", 64), orderItem{ids[1], 1})},
		{name: "multibyte customer id of 64 characters", body: newOrder(repeat("é", 64), orderItem{ids[2], 1})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got orderBody
			wantJSON(t, postOrder(t, in.URL, tt.body, nil), http.StatusCreated, &got)
			if got.CustomerID != tt.body.CustomerID || len(got.Items) != len(tt.body.Items) {
				t.Errorf("order = %+v, want customer %q with %d items", got, tt.body.CustomerID, len(tt.body.Items))
			}
		})
	}
}

func TestPlaceOrderInvalid(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	a := createProduct(t, in.URL, "invalid-a", 100)
	b := createProduct(t, in.URL, "invalid-b", 100)
	many := make([]orderItem, 21)
	for i := range many {
		many[i] = orderItem{int64(i + 1), 1}
	}

	tests := []struct {
		name      string
		body      any
		wantField string
		altField  string // also acceptable: either occurrence of a duplicate may be named
	}{
		{name: "no items", body: newOrder("c"), wantField: "items"},
		{name: "empty items", body: map[string]any{"customer_id": "c", "items": []any{}}, wantField: "items"},
		{name: "21 items", body: newOrder("c", many...), wantField: "items"},
		{name: "duplicate product", body: newOrder("c", orderItem{a, 1}, orderItem{b, 1}, orderItem{a, 2}), wantField: "items[0].product_id", altField: "items[2].product_id"},
		{name: "quantity zero", body: newOrder("c", orderItem{a, 0}), wantField: "items[0].quantity"},
		{name: "negative quantity", body: newOrder("c", orderItem{a, -1}), wantField: "items[0].quantity"},
		{name: "quantity over the default max", body: newOrder("c", orderItem{a, 1}, orderItem{b, 11}), wantField: "items[1].quantity"},
		{name: "missing quantity", body: map[string]any{"customer_id": "c", "items": []any{map[string]any{"product_id": a}}}, wantField: "items[0].quantity"},
		{name: "product id zero", body: newOrder("c", orderItem{0, 1}), wantField: "items[0].product_id"},
		{name: "empty customer id", body: newOrder("", orderItem{a, 1}), wantField: "customer_id"},
		{name: "missing customer id", body: map[string]any{"items": []any{map[string]any{"product_id": a, "quantity": 1}}}, wantField: "customer_id"},
		{name: "customer id of 65 characters", body: newOrder(repeat("c", 65), orderItem{a, 1}), wantField: "customer_id"},
		{name: "NUL in customer id", body: newOrder("a\u0000b", orderItem{a, 1}), wantField: "customer_id"},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: tt.body, Invalid: true})
				p := wantProblem(t, res, "invalid-request", "/v1/orders")
				if p.Field != tt.wantField && (tt.altField == "" || p.Field != tt.altField) {
					t.Errorf("field = %q, want %q", p.Field, tt.wantField)
				}
				if loc := res.Header.Get("Location"); loc != "" {
					t.Errorf("Location = %q on a refusal, want none", loc)
				}
			})
		}
	})
	wantUntouched(t, in.URL, a, 100)
	wantUntouched(t, in.URL, b, 100)
}

func TestPlaceOrderMaxQuantityOption(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{maxQuantity: 3})
	id := createProduct(t, in.URL, "max-3", 10)

	p := wantProblem(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 4}), nil), "invalid-request", "/v1/orders")
	if p.Field != "items[0].quantity" {
		t.Errorf("field = %q, want items[0].quantity", p.Field)
	}
	if !strings.Contains(p.Detail, "3") {
		t.Errorf("detail = %q, want it to name the limit 3", p.Detail)
	}
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 3}), nil), http.StatusCreated, nil)
	want := auditBody{ProductID: id, Stock: 7, Received: 10, Sold: 3, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v", a, want)
	}
}

func TestPlaceOrderMalformed(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "malformed", 10)
	valid := `{"customer_id": "c", "items": [{"product_id": ` + itoa(id) + `, "quantity": 1}]}`

	tests := []struct {
		name      string
		body      string
		wantField string
	}{
		{name: "syntax error", body: `{"customer_id": "c", "items": [}`},
		{name: "cut short", body: `{"customer_id": "c", "items": [{"product_id": 1`},
		{name: "customer id is a number", body: `{"customer_id": 7, "items": []}`, wantField: "customer_id"},
		{name: "items is an object", body: `{"customer_id": "c", "items": {}}`, wantField: "items"},
		{name: "quantity is a string", body: `{"customer_id": "c", "items": [{"product_id": 1, "quantity": "1"}]}`, wantField: "items.quantity"},
		{name: "fractional quantity", body: `{"customer_id": "c", "items": [{"product_id": 1, "quantity": 1.5}]}`, wantField: "items.quantity"},
		{name: "body is an array", body: `[` + valid + `]`},
		{name: "body is a string", body: `"order"`},
		{name: "body is null", body: `null`},
		{name: "body is null with spaces", body: ` null `},
		{name: "unknown field", body: `{"customer_id": "c", "coupon": "FREE", "items": []}`, wantField: "coupon"},
		{name: "unknown item field", body: `{"customer_id": "c", "items": [{"product_id": 1, "quantity": 1, "price": 0}]}`, wantField: "items.price"},
		{name: "trailing object", body: valid + `{}`},
		{name: "trailing garbage", body: valid + ` x`},
		{name: "empty body", body: ``},
		{name: "only whitespace", body: " \n\t "},
		{name: "duplicate field", body: `{"customer_id": "c", "customer_id": "d", "items": [{"product_id": ` + itoa(id) + `, "quantity": 1}]}`, wantField: "customer_id"},
		{name: "duplicate item field", body: `{"customer_id": "c", "items": [{"product_id": ` + itoa(id) + `, "quantity": 1, "quantity": 1000}]}`, wantField: "items.quantity"},
		{name: "invalid UTF-8", body: `{"customer_id": "c` + "\xff" + `", "items": [{"product_id": ` + itoa(id) + `, "quantity": 1}]}`},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: tt.body,
					Header: map[string]string{"Content-Type": "application/json"}, Invalid: true})
				p := wantProblem(t, res, "malformed-json", "/v1/orders")
				if p.Field != tt.wantField {
					t.Errorf("field = %q, want %q", p.Field, tt.wantField)
				}
			})
		}
	})
	wantUntouched(t, in.URL, id, 10)

	// The same body, well formed, is accepted: the refusals above were about the syntax.
	wantJSON(t, postOrder(t, in.URL, valid+"\n", map[string]string{"Content-Type": "application/json"}), http.StatusCreated, nil)
}

func TestPlaceOrderMediaType(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "media", 10)
	body := `{"customer_id": "c", "items": [{"product_id": ` + itoa(id) + `, "quantity": 1}]}`

	tests := []struct {
		name        string
		contentType string // "-" sends none
		wantStatus  int
	}{
		{name: "json", contentType: "application/json", wantStatus: http.StatusCreated},
		{name: "json with charset", contentType: "application/json; charset=utf-8", wantStatus: http.StatusCreated},
		{name: "json with upper-case charset", contentType: "application/json;charset=UTF-8", wantStatus: http.StatusCreated},
		{name: "json in latin-1", contentType: "application/json;charset=iso-8859-1", wantStatus: http.StatusUnsupportedMediaType},
		{name: "text/plain", contentType: "text/plain", wantStatus: http.StatusUnsupportedMediaType},
		{name: "form", contentType: "application/x-www-form-urlencoded", wantStatus: http.StatusUnsupportedMediaType},
		{name: "json suffix", contentType: "application/problem+json", wantStatus: http.StatusUnsupportedMediaType},
		{name: "unparsable", contentType: "application/json;;", wantStatus: http.StatusUnsupportedMediaType},
		{name: "none", contentType: "-", wantStatus: http.StatusUnsupportedMediaType},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				header := map[string]string{}
				if tt.contentType != "-" {
					header["Content-Type"] = tt.contentType
				}
				res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: body, Header: header,
					Invalid: tt.wantStatus != http.StatusCreated})
				if tt.wantStatus == http.StatusCreated {
					wantJSON(t, res, http.StatusCreated, nil)
					return
				}
				wantProblem(t, res, "unsupported-media-type", "/v1/orders")
			})
		}
	})
	// Exactly the three accepted requests sold.
	if a := audit(t, in.URL, id); a.Sold != 3 || !a.Consistent {
		t.Errorf("audit = %+v, want 3 sold", a)
	}
}

func TestPlaceOrderBodyTooLarge(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "large", 10)
	const limit = 1 << 20
	valid := `{"customer_id": "c", "items": [{"product_id": ` + itoa(id) + `, "quantity": 1}]}`
	padded := func(n int) string { return valid + repeat(" ", n-len(valid)) }
	oversized := `{"customer_id": "` + repeat("c", limit) + `", "items": []}`

	tests := []struct {
		name    string
		body    string
		chunked bool // no Content-Length: the limit must be found while reading
		wantOK  bool
	}{
		{name: "exactly the limit", body: padded(limit), wantOK: true},
		{name: "one byte over", body: padded(limit + 1)},
		{name: "oversized field", body: oversized},
		{name: "chunked, exactly the limit", body: padded(limit), chunked: true, wantOK: true},
		{name: "chunked, one byte over", body: padded(limit + 1), chunked: true},
		{name: "chunked, oversized field", body: oversized, chunked: true},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				var res response
				if tt.chunked {
					res = postChunked(t, in.URL+"/v1/orders", tt.body)
				} else {
					res = call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: tt.body,
						Header: map[string]string{"Content-Type": "application/json"}, Invalid: !tt.wantOK})
				}
				if tt.wantOK {
					wantJSON(t, res, http.StatusCreated, nil)
					return
				}
				wantProblem(t, res, "body-too-large", "/v1/orders")
			})
		}
	})
	if a := audit(t, in.URL, id); a.Sold != 2 || !a.Consistent {
		t.Errorf("audit = %+v, want the 2 bodies within the limit sold", a)
	}
}

// postChunked posts body as JSON without a Content-Length, so that it is sent chunked.
func postChunked(t testing.TB, url, body string) response {
	t.Helper()
	// A reader of unknown length; strings.Reader would give its length away.
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, io.MultiReader(strings.NewReader(body)))
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("read response: %v", err)
	}
	got := response{Status: res.StatusCode, Header: res.Header, Body: raw}
	// Only the response is held to the document: some of these bodies are over the limit.
	wantContract(t, request{Method: http.MethodPost, URL: url, Invalid: true}, req.Header, got)
	return got
}

func TestPlaceOrderSoldOut(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "scarce", 2)

	res := postOrder(t, in.URL, newOrder("c", orderItem{id, 3}), nil)
	p := wantProblem(t, res, "sold-out", "/v1/orders")
	if p.ProductID != id || p.Requested != 3 || p.Available == nil || *p.Available != 2 {
		t.Errorf("sold-out names product %d, requested %d, available %v; want product %d, requested 3, available 2",
			p.ProductID, p.Requested, p.Available, id)
	}
	if loc := res.Header.Get("Location"); loc != "" {
		t.Errorf("Location = %q on a refusal, want none", loc)
	}
	wantUntouched(t, in.URL, id, 2)

	// Selling out exactly works, and then nothing is left to sell.
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 2}), nil), http.StatusCreated, nil)
	p = wantProblem(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil), "sold-out", "/v1/orders")
	if p.ProductID != id || p.Available == nil || *p.Available != 0 {
		t.Errorf("sold-out names product %d, available %v; want product %d, available 0", p.ProductID, p.Available, id)
	}
	want := auditBody{ProductID: id, Stock: 0, Received: 2, Sold: 2, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v", a, want)
	}
}

func TestPlaceOrderProductNotFound(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "real", 5)
	missing := id + 1000

	tests := []struct {
		name  string
		items []orderItem
	}{
		{name: "alone", items: []orderItem{{missing, 1}}},
		{name: "in a cart", items: []orderItem{{id, 1}, {missing, 1}}},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				p := wantProblem(t, postOrder(t, in.URL, newOrder("c", tt.items...), nil), "product-not-found", "/v1/orders")
				if p.ProductID != missing {
					t.Errorf("product_id = %d, want %d", p.ProductID, missing)
				}
			})
		}
	})
	wantUntouched(t, in.URL, id, 5)
}

func TestPlaceOrderBusy(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	in := c.start(t, instanceOptions{lockWait: 100 * time.Millisecond})
	id := createProduct(t, in.URL, "contended", 5)
	release := holdLock(t, in, stocklock.Name(c.prefix, id), nil)

	res := postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil)
	wantProblem(t, res, "busy", "/v1/orders")
	wantRetryAfter(t, res)
	wantUntouched(t, in.URL, id, 5)

	// Once the holder lets go, the same order goes through.
	release()
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil), http.StatusCreated, nil)
	want := auditBody{ProductID: id, Stock: 4, Received: 5, Sold: 1, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v", a, want)
	}
}

func TestPlaceOrderUnavailable(t *testing.T) {
	t.Parallel()
	needsServers(t) // its cases start replicas of their own
	tests := []struct {
		name   string
		broken func(t *testing.T, o *instanceOptions)
	}{
		{name: "redis down", broken: func(t *testing.T, o *instanceOptions) {
			o.redisURL = "redis://" + deadEndpoint(t) + "/0"
		}},
		{name: "postgres down", broken: func(t *testing.T, o *instanceOptions) {
			o.databaseURL = "postgres://postgres@" + deadEndpoint(t) + "/postgres?sslmode=disable&connect_timeout=2"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := newCluster(t)
			healthy := c.start(t, instanceOptions{})
			id := createProduct(t, healthy.URL, "unreachable", 5)
			var o instanceOptions
			tt.broken(t, &o)
			broken := c.start(t, o)

			for _, key := range []string{"", "retry-me"} {
				header := map[string]string{}
				if key != "" {
					header["Idempotency-Key"] = key
				}
				res := postOrder(t, broken.URL, newOrder("c", orderItem{id, 1}), header)
				p := wantProblem(t, res, "unavailable", "/v1/orders")
				wantRetryAfter(t, res)
				// The advice to retry with the same key goes to those who sent one.
				if advised := strings.Contains(p.Detail, "Idempotency-Key"); advised != (key != "") {
					t.Errorf("detail %q with Idempotency-Key %q: mentions the key = %v", p.Detail, key, advised)
				}
			}
			wantUntouched(t, healthy.URL, id, 5)

			// Nothing was stored under the key: a retry on a healthy replica buys.
			res := postOrder(t, healthy.URL, newOrder("c", orderItem{id, 1}), map[string]string{"Idempotency-Key": "retry-me"})
			wantJSON(t, res, http.StatusCreated, nil)
			wantHeader(t, res, "Idempotent-Replayed", "")
		})
	}
}

func TestGetProductUnavailable(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	healthy := c.start(t, instanceOptions{})
	id := createProduct(t, healthy.URL, "unreachable", 5)
	broken := c.start(t, instanceOptions{databaseURL: "postgres://postgres@" + deadEndpoint(t) + "/postgres?sslmode=disable&connect_timeout=2"})

	path := "/v1/products/" + itoa(id)
	res := call(t, request{Method: http.MethodGet, URL: broken.URL + path})
	if p := wantProblem(t, res, "unavailable", path); strings.Contains(p.Detail, "Idempotency-Key") {
		t.Errorf("detail of a GET mentions Idempotency-Key: %q", p.Detail)
	}
	wantRetryAfter(t, res)
}

func TestGetOrderNotFound(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "p", 5)
	var placed orderBody
	wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil), http.StatusCreated, &placed)

	tests := []struct {
		name string
		id   string
	}{
		{name: "unknown uuid", id: uuid.NewString()},
		{name: "not a uuid", id: "not-a-uuid"},
		{name: "number", id: "42"},
		{name: "uuid with a trailing character", id: placed.ID + "0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := "/v1/orders/" + tt.id
			wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + path}), "order-not-found", path)
		})
	}
}
