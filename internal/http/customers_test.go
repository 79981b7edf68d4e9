package stockhttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
)

// The customer identity of the order routes (docs/api.md, "Customer identity"), without
// servers: the Server is over fakes, and token mode verifies real tokens with an
// identity.Verifier over a JWKS file that identitytest writes.

const (
	testIssuer   = "https://issuer.test"
	testAudience = "stocksvc"
)

// tokens is an issuer of customer tokens and the customer auth of a replica that trusts it.
type tokens struct {
	issuer *identitytest.Issuer
	auth   stockhttp.CustomerAuth
}

func newTokens(t testing.TB) *tokens {
	t.Helper()
	is, err := identitytest.NewIssuer(testIssuer, testAudience)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "jwks.json")
	if err := is.WriteJWKS(path); err != nil {
		t.Fatal(err)
	}
	v, err := identity.NewVerifier(context.Background(), identity.Config{
		Issuer: testIssuer, Audience: testAudience, JWKSFile: path, Leeway: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = v.Close() })
	return &tokens{issuer: is, auth: stockhttp.CustomerAuth{Mode: identity.ModeToken, Verifier: v}}
}

// header returns the Authorization header of customer's token.
func (tk *tokens) header(t testing.TB, customer string) map[string]string {
	t.Helper()
	tok, err := tk.issuer.Token(customer, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{"Authorization": "Bearer " + tok}
}

// items is the items of an order of one unit of product id, as a body without customer_id.
func items(id int64) map[string]any {
	return map[string]any{"items": []orderItem{{ProductID: id, Quantity: 1}}}
}

func TestTokenModeOrders(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	in := newFakeInstance(t, fakeOptions{customers: tk.auth})
	id := createProduct(t, in.URL, "token-orders", 10)
	alice, bob := tk.header(t, "alice"), tk.header(t, "bob")

	t.Run("no credential", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: newOrder("alice", orderItem{id, 1})})
		wantProblem(t, res, "unauthenticated", "/v1/orders")
		wantHeader(t, res, "WWW-Authenticate", `Bearer realm="stocksvc"`)
	})
	t.Run("another scheme is no credential", func(t *testing.T) {
		res := postOrder(t, in.URL, newOrder("alice", orderItem{id, 1}), map[string]string{"Authorization": "Basic YWxpY2U6c2VjcmV0"})
		wantProblem(t, res, "unauthenticated", "/v1/orders")
		wantHeader(t, res, "WWW-Authenticate", `Bearer realm="stocksvc"`)
	})
	t.Run("a token that is not one", func(t *testing.T) {
		res := postOrder(t, in.URL, items(id), map[string]string{"Authorization": "Bearer not.a.token"})
		wantProblem(t, res, "unauthenticated", "/v1/orders")
		wantHeader(t, res, "WWW-Authenticate", `Bearer realm="stocksvc", error="invalid_token"`)
	})
	t.Run("an expired token says so", func(t *testing.T) {
		tok, err := tk.issuer.Sign(identitytest.Claims{Subject: "alice", Expires: time.Now().Add(-time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		res := postOrder(t, in.URL, items(id), map[string]string{"Authorization": "Bearer " + tok})
		p := wantProblem(t, res, "unauthenticated", "/v1/orders")
		wantHeader(t, res, "WWW-Authenticate", `Bearer realm="stocksvc", error="invalid_token"`)
		if !strings.Contains(p.Detail, "expired") {
			t.Errorf("detail = %q, want it to say the token expired", p.Detail)
		}
	})
	t.Run("the admin token is no customer's", func(t *testing.T) {
		res := postOrder(t, in.URL, newOrder("alice", orderItem{id, 1}), adminHeader())
		wantProblem(t, res, "unauthenticated", "/v1/orders")
	})
	t.Run("another customer in the body", func(t *testing.T) {
		res := postOrder(t, in.URL, newOrder("bob", orderItem{id, 1}), alice)
		p := wantProblem(t, res, "customer-mismatch", "/v1/orders")
		if p.Field != "customer_id" {
			t.Errorf("field = %q, want customer_id", p.Field)
		}
	})
	// Nothing of the refusals above was sold.
	wantUntouched(t, in.URL, id, 10)

	var mine orderBody
	t.Run("the token's customer, body without customer_id", func(t *testing.T) {
		wantJSON(t, postOrder(t, in.URL, items(id), alice), http.StatusCreated, &mine)
		if mine.CustomerID != "alice" {
			t.Fatalf("customer_id = %q, want alice (the token's sub)", mine.CustomerID)
		}
	})
	t.Run("the body may repeat the token's customer", func(t *testing.T) {
		var o orderBody
		wantJSON(t, postOrder(t, in.URL, newOrder("alice", orderItem{id, 1}), alice), http.StatusCreated, &o)
		if o.CustomerID != "alice" {
			t.Fatalf("customer_id = %q, want alice", o.CustomerID)
		}
	})
	t.Run("own order", func(t *testing.T) {
		var o orderBody
		wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + mine.ID, Header: alice}), http.StatusOK, &o)
		if o.ID != mine.ID {
			t.Fatalf("order = %+v, want %s", o, mine.ID)
		}
	})
	t.Run("another customer's order does not exist for them", func(t *testing.T) {
		res := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + mine.ID, Header: bob})
		wantProblem(t, res, "order-not-found", "/v1/orders/"+mine.ID)
	})
	t.Run("reading an order needs a credential too", func(t *testing.T) {
		res := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + mine.ID})
		wantProblem(t, res, "unauthenticated", "/v1/orders/"+mine.ID)
	})
	t.Run("an admin reads any order", func(t *testing.T) {
		var o orderBody
		wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + mine.ID, Header: adminHeader()}), http.StatusOK, &o)
		if o.CustomerID != "alice" {
			t.Fatalf("order = %+v, want alice's", o)
		}
	})
	t.Run("the admin token counts only where the admin routes are served", func(t *testing.T) {
		public := httptest.NewServer(in.API.Public())
		defer public.Close()
		res := call(t, request{Method: http.MethodGet, URL: public.URL + "/v1/orders/" + mine.ID, Header: adminHeader()})
		wantProblem(t, res, "unauthenticated", "/v1/orders/"+mine.ID)
		// A customer's own order is theirs on the public listener too.
		wantJSON(t, call(t, request{Method: http.MethodGet, URL: public.URL + "/v1/orders/" + mine.ID, Header: alice}), http.StatusOK, &orderBody{})
	})
}

// TestTokenModeAsyncOrders: an order accepted for later is the token's customer's, and another
// customer cannot read it.
func TestTokenModeAsyncOrders(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	in := newFakeInstance(t, fakeOptions{customers: tk.auth})
	id := createProduct(t, in.URL, "token-async", 10)
	header := tk.header(t, "carol")
	header["Prefer"] = "respond-async"
	var o orderBody
	wantJSON(t, postOrder(t, in.URL, items(id), header), http.StatusAccepted, &o)
	if o.CustomerID != "carol" || o.Status != "pending" {
		t.Fatalf("accepted order = %+v, want carol's, pending", o)
	}
	res := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + o.ID, Header: tk.header(t, "dan")})
	wantProblem(t, res, "order-not-found", "/v1/orders/"+o.ID)
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + o.ID, Header: tk.header(t, "carol")}), http.StatusOK, &orderBody{})
}

// ordersPage is the body of GET /v1/orders.
type ordersPage struct {
	Items      []orderBody `json:"items"`
	NextCursor *string     `json:"next_cursor"`
}

func listOrders(t testing.TB, url string, header map[string]string) ordersPage {
	t.Helper()
	var p ordersPage
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: url, Header: header}), http.StatusOK, &p)
	return p
}

func TestListOwnOrders(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	in := newFakeInstance(t, fakeOptions{customers: tk.auth})
	id := createProduct(t, in.URL, "list-own", 10)
	erin, frank := tk.header(t, "erin"), tk.header(t, "frank")
	var placed []string // erin's, oldest first
	for range 3 {
		var o orderBody
		wantJSON(t, postOrder(t, in.URL, items(id), erin), http.StatusCreated, &o)
		placed = append(placed, o.ID)
	}
	wantJSON(t, postOrder(t, in.URL, items(id), frank), http.StatusCreated, &orderBody{})

	first := listOrders(t, in.URL+"/v1/orders?limit=2", erin)
	if len(first.Items) != 2 || first.NextCursor == nil {
		t.Fatalf("first page = %+v, want 2 orders and a next cursor", first)
	}
	second := listOrders(t, in.URL+"/v1/orders?limit=2&cursor="+*first.NextCursor, erin)
	if len(second.Items) != 1 || second.NextCursor != nil {
		t.Fatalf("second page = %+v, want 1 order and no next cursor", second)
	}
	var got []string
	for _, o := range append(first.Items, second.Items...) {
		if o.CustomerID != "erin" {
			t.Errorf("order %s of %q in erin's list", o.ID, o.CustomerID)
		}
		got = append(got, o.ID)
	}
	if want := []string{placed[2], placed[1], placed[0]}; strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("erin's orders = %v, want newest first %v", got, want)
	}
	if all := listOrders(t, in.URL+"/v1/orders?customer_id=erin", erin); len(all.Items) != 3 || all.NextCursor != nil {
		t.Errorf("default page with customer_id repeating the token's = %+v, want all 3", all)
	}

	for _, tt := range []struct {
		name, query, code, field string
		header                   map[string]string
	}{
		{"another customer's list", "?customer_id=frank", "customer-mismatch", "customer_id", erin},
		{"limit 0", "?limit=0", "invalid-request", "limit", erin},
		{"limit above 100", "?limit=101", "invalid-request", "limit", erin},
		{"a cursor the service never gave", "?cursor=bm90LWEtY3Vyc29y", "invalid-request", "cursor", erin},
		{"an admin must say whose", "", "invalid-request", "customer_id", adminHeader()},
		{"no credential", "", "unauthenticated", "", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			res := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders" + tt.query, Header: tt.header, Invalid: strings.HasPrefix(tt.query, "?limit")})
			p := wantProblem(t, res, tt.code, "/v1/orders")
			if p.Field != tt.field {
				t.Errorf("field = %q, want %q", p.Field, tt.field)
			}
		})
	}

	t.Run("an admin lists any customer's", func(t *testing.T) {
		p := listOrders(t, in.URL+"/v1/orders?customer_id=frank", adminHeader())
		if len(p.Items) != 1 || p.Items[0].CustomerID != "frank" {
			t.Fatalf("frank's orders for the admin = %+v, want his one", p)
		}
	})
}

func TestGatewayMode(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{customers: stockhttp.CustomerAuth{Mode: identity.ModeGateway, Header: "X-User"}})
	id := createProduct(t, in.URL, "gateway", 10)

	res := postOrder(t, in.URL, newOrder("gina", orderItem{id, 1}), nil)
	wantProblem(t, res, "unauthenticated", "/v1/orders")
	wantHeader(t, res, "WWW-Authenticate", `Bearer realm="stocksvc"`)
	res = postOrder(t, in.URL, items(id), map[string]string{"X-User": strings.Repeat("g", 65)}) // longer than a customer id
	wantProblem(t, res, "unauthenticated", "/v1/orders")
	wantHeader(t, res, "WWW-Authenticate", `Bearer realm="stocksvc", error="invalid_token"`)
	wantProblem(t, postOrder(t, in.URL, newOrder("hugo", orderItem{id, 1}), map[string]string{"X-User": "gina"}), "customer-mismatch", "/v1/orders")
	wantUntouched(t, in.URL, id, 10)

	var o orderBody
	wantJSON(t, postOrder(t, in.URL, items(id), map[string]string{"X-User": "gina"}), http.StatusCreated, &o)
	if o.CustomerID != "gina" {
		t.Fatalf("customer_id = %q, want gina (the gateway's header)", o.CustomerID)
	}
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + o.ID, Header: map[string]string{"X-User": "hugo"}}), "order-not-found", "/v1/orders/"+o.ID)
	if p := listOrders(t, in.URL+"/v1/orders", map[string]string{"X-User": "gina"}); len(p.Items) != 1 || p.Items[0].ID != o.ID {
		t.Fatalf("gina's orders = %+v, want the one", p)
	}
}

// TestBodyMode: the body names the customer, as before identities existed, and anyone reads
// any order and any customer's list (naming the customer).
func TestBodyMode(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "body", 10)
	p := wantProblem(t, postOrder(t, in.URL, items(id), nil), "invalid-request", "/v1/orders")
	if p.Field != "customer_id" {
		t.Errorf("field = %q, want customer_id", p.Field)
	}
	var o orderBody
	wantJSON(t, postOrder(t, in.URL, newOrder("ivan", orderItem{id, 1}), nil), http.StatusCreated, &o)
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + o.ID}), http.StatusOK, &orderBody{})
	if page := listOrders(t, in.URL+"/v1/orders?customer_id=ivan", nil); len(page.Items) != 1 || page.Items[0].ID != o.ID {
		t.Fatalf("ivan's orders = %+v, want the one", page)
	}
	p = wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders"}), "invalid-request", "/v1/orders")
	if p.Field != "customer_id" {
		t.Errorf("field = %q, want customer_id", p.Field)
	}
	// A fresh id reads as no order.
	path := "/v1/orders/" + uuid.NewString()
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + path}), "order-not-found", path)
}

// TestTokenModeHolds: a held order is confirmed or cancelled by its customer or an admin; to
// another customer it does not exist, and their confirm or cancel changes nothing.
func TestTokenModeHolds(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	in := newFakeInstance(t, fakeOptions{customers: tk.auth})
	p := createRuledProduct(t, in.URL, "token-holds", 10, map[string]any{"hold_for": 600})
	alice, bob := tk.header(t, "alice"), tk.header(t, "bob")
	hold := func() orderBody {
		t.Helper()
		var o orderBody
		wantJSON(t, postOrder(t, in.URL, items(p.ID), alice), http.StatusCreated, &o)
		if o.Status != "held" {
			t.Fatalf("order %+v, want held", o)
		}
		return o
	}
	decide := func(id, action string, header map[string]string) response {
		t.Helper()
		return call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders/" + id + "/" + action, Header: header})
	}
	first, second := hold(), hold()
	for _, action := range []string{"confirm", "cancel"} {
		path := "/v1/orders/" + first.ID + "/" + action
		wantProblem(t, decide(first.ID, action, bob), "order-not-found", path)
	}
	var o orderBody
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/" + first.ID, Header: alice}), http.StatusOK, &o)
	if o.Status != "held" {
		t.Fatalf("after another customer's confirm and cancel: %+v, want held", o)
	}
	wantJSON(t, decide(first.ID, "confirm", alice), http.StatusOK, &o)
	if o.Status != "confirmed" || o.CustomerID != "alice" {
		t.Errorf("alice's confirm = %+v, want her order confirmed", o)
	}
	wantJSON(t, decide(second.ID, "cancel", adminHeader()), http.StatusOK, &o)
	if o.Status != "cancelled" || o.CustomerID != "alice" {
		t.Errorf("an admin's cancel = %+v, want alice's order cancelled", o)
	}
	wantProblem(t, decide(second.ID, "confirm", bob), "order-not-found", "/v1/orders/"+second.ID+"/confirm")
	wantProblem(t, decide(second.ID, "confirm", alice), "order-cancelled", "/v1/orders/"+second.ID+"/confirm")
}
