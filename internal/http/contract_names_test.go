package stockhttp_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestJSONNamesAreExact sends, on every route that reads a JSON body, bodies whose names
// encoding/json would have matched to a field regardless of case or under Unicode folding
// (U+017F ſ folds to s, U+212A — the Kelvin sign — to k), alone or beside the exact name it
// would then have overwritten: each is refused 400 malformed-json naming the name, and
// nothing changes. The exact body is then accepted, on each route: the refusals were about
// the names. (Issue #31: "Quantity" beside "quantity" bought two, "Items" beside "items" the
// second list's product, "itemſ" was read as items.)
func TestJSONNamesAreExact(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "exact-names", 10)
	other := createProduct(t, in.URL, "exact-names-other", 10)
	item, otherItem := `{"product_id": `+itoa(id)+`, "quantity": 1}`, `{"product_id": `+itoa(other)+`, "quantity": 1}`
	sale := "/v1/products/" + itoa(id) + "/sale"
	restock := "/v1/products/" + itoa(id) + "/restock"

	tests := []struct {
		name, method, path, body, wantField string
		admin                               bool
	}{
		// POST /v1/orders: the three bodies, and more of the same.
		{"order: Quantity beside quantity", http.MethodPost, "/v1/orders",
			`{"customer_id": "c", "items": [{"product_id": ` + itoa(id) + `, "quantity": 1, "Quantity": 2}]}`, "items.Quantity", false},
		{"order: Items beside items", http.MethodPost, "/v1/orders",
			`{"customer_id": "c", "items": [` + item + `], "Items": [` + otherItem + `]}`, "Items", false},
		{"order: items after Items", http.MethodPost, "/v1/orders",
			`{"customer_id": "c", "Items": [` + otherItem + `], "items": [` + item + `]}`, "Items", false},
		{"order: itemſ (U+017F)", http.MethodPost, "/v1/orders", `{"customer_id": "c", "itemſ": [` + item + `]}`, "itemſ", false},
		{"order: itemſ escaped", http.MethodPost, "/v1/orders", `{"customer_id": "c", "item\u017f": [` + item + `]}`, "itemſ", false},
		{"order: CUSTOMER_ID", http.MethodPost, "/v1/orders", `{"CUSTOMER_ID": "c", "items": [` + item + `]}`, "CUSTOMER_ID", false},
		{"order: Product_Id", http.MethodPost, "/v1/orders", `{"customer_id": "c", "items": [{"Product_Id": ` + itoa(id) + `, "quantity": 1}]}`, "items.Product_Id", false},
		// POST /v1/products.
		{"product: Stock beside stock", http.MethodPost, "/v1/products", `{"sku": "np-1", "name": "n", "stock": 1, "Stock": 1000}`, "Stock", true},
		{"product: sKu (U+212A Kelvin sign)", http.MethodPost, "/v1/products", `{"s` + "\u212a" + `u": "np-2", "name": "n", "stock": 1}`, "s\u212au", true},
		{"product: ſtock (U+017F)", http.MethodPost, "/v1/products", `{"sku": "np-3", "name": "n", "ſtock": 1}`, "ſtock", true},
		{"product: stoc\u212a (U+212A) beside stock", http.MethodPost, "/v1/products", `{"sku": "np-4", "name": "n", "stock": 1, "stoc\u212a": 1000}`, "stoc\u212a", true},
		{"product: NAME", http.MethodPost, "/v1/products", `{"sku": "np-5", "NAME": "n", "stock": 1}`, "NAME", true},
		// PATCH /v1/products/{id}/sale: a merge patch, where a name read as another is a rule
		// changed or removed.
		{"sale: Max_Per_Customer beside max_per_customer", http.MethodPatch, sale, `{"max_per_customer": 1, "Max_Per_Customer": null}`, "Max_Per_Customer", true},
		{"sale: ſale_ends_at (U+017F)", http.MethodPatch, sale, `{"ſale_ends_at": "2000-01-01T00:00:00Z"}`, "ſale_ends_at", true},
		{"sale: HOLD_FOR", http.MethodPatch, sale, `{"HOLD_FOR": 60}`, "HOLD_FOR", true},
		// POST /v1/products/{id}/restock.
		{"restock: Quantity beside quantity", http.MethodPost, restock, `{"quantity": 1, "Quantity": 1000}`, "Quantity", true},
		{"restock: QUANTITY", http.MethodPost, restock, `{"QUANTITY": 5}`, "QUANTITY", true},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				header := map[string]string{"Content-Type": "application/json"}
				if tt.admin {
					header = adminHeader()
					header["Content-Type"] = "application/json"
				}
				if tt.path == restock {
					header["Idempotency-Key"] = "names-" + strings.ReplaceAll(tt.name, " ", "-")
				}
				res := call(t, request{Method: tt.method, URL: in.URL + tt.path, Body: tt.body, Header: header, Invalid: true})
				p := wantProblem(t, res, "malformed-json", tt.path)
				if p.Field != tt.wantField || !strings.Contains(p.Detail, "unknown field") {
					t.Errorf("field %q, detail %q; want the unknown field %q", p.Field, p.Detail, tt.wantField)
				}
			})
		}
	})

	// Nothing was sold, restocked, created or changed.
	wantUntouched(t, in.URL, id, 10)
	wantUntouched(t, in.URL, other, 10)
	var products struct {
		Items []productBody `json:"items"`
	}
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/products"}), http.StatusOK, &products)
	if len(products.Items) != 2 {
		t.Errorf("%d products after the refusals, want the 2 created first: %+v", len(products.Items), products.Items)
	}
	product := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/products/" + itoa(id)}).JSON(t)
	for _, rule := range []string{"max_per_customer", "sale_ends_at", "hold_for"} {
		if product[rule] != nil {
			t.Errorf("%s = %v after the refusals, want none", rule, product[rule])
		}
	}

	// The exact names are read, on every route.
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders",
		Body: `{"customer_id": "c", "items": [` + item + `]}`, Header: map[string]string{"Content-Type": "application/json"}}), http.StatusCreated, nil)
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products", Header: adminHeader(),
		Body: map[string]any{"sku": "np-exact", "name": "n", "stock": 1}}), http.StatusCreated, nil)
	wantJSON(t, call(t, request{Method: http.MethodPatch, URL: in.URL + sale, Header: adminHeader(),
		Body: map[string]any{"max_per_customer": 3}}), http.StatusOK, nil)
	restockHeader := adminHeader()
	restockHeader["Idempotency-Key"] = "names-exact"
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + restock, Header: restockHeader,
		Body: map[string]any{"quantity": 5}}), http.StatusOK, nil)
	if a := audit(t, in.URL, id); a.Stock != 14 || a.Received != 15 || a.Sold != 1 || !a.Consistent {
		t.Errorf("audit after one order of 1 and a restock of 5 = %+v, want 14 left of 15 received", a)
	}
}
