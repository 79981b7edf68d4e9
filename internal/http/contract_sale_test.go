package stockhttp_test

import (
	"net/http"
	"strconv"
	"testing"
	"time"
)

// The contract of the sale rules: a product's window and limit, set at creation and changed by
// an admin; the refusals they give; the storefront's listing.

func createRuledProduct(t testing.TB, baseURL, sku string, units int64, rules map[string]any) productBody {
	t.Helper()
	body := map[string]any{"sku": sku, "name": "Product " + sku, "stock": units}
	for k, v := range rules {
		body[k] = v
	}
	res := call(t, request{Method: http.MethodPost, URL: baseURL + "/v1/products", Header: adminHeader(), Body: body})
	var p productBody
	wantJSON(t, res, http.StatusCreated, &p)
	return p
}

func TestSaleWindowContract(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	opens := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	p := createRuledProduct(t, in.URL, "window", 5, map[string]any{"sale_starts_at": opens, "max_per_customer": 2})
	if p.SaleStartsAt == nil || !p.SaleStartsAt.Equal(opens) || p.SaleEndsAt != nil || p.MaxPerCustomer == nil || *p.MaxPerCustomer != 2 {
		t.Fatalf("created %+v, want the opening and the limit as sent", p)
	}
	path := "/v1/orders"

	t.Run("before the opening", func(t *testing.T) {
		res := postOrder(t, in.URL, newOrder("early", orderItem{p.ID, 1}), map[string]string{"Idempotency-Key": "window-early"})
		prob := wantProblem(t, res, "sale-not-open", path)
		if prob.ProductID != p.ID || prob.SaleStartsAt == nil || !prob.SaleStartsAt.Equal(opens) {
			t.Errorf("problem %+v, want product %d opening at %v", prob, p.ID, opens)
		}
		retry, err := strconv.Atoi(res.Header.Get("Retry-After"))
		if err != nil || retry < 3500 || retry > 3601 {
			t.Errorf("Retry-After = %q, want the seconds until the opening (about 3600)", res.Header.Get("Retry-After"))
		}
		if res.Header.Get("Idempotent-Replayed") != "" {
			t.Errorf("a refusal by the window is not a stored outcome")
		}
	})

	t.Run("an invalid window", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPatch, URL: in.URL + "/v1/products/" + itoa(p.ID) + "/sale", Header: adminHeader(),
			Body: map[string]any{"sale_ends_at": opens.Add(-time.Minute)}, Invalid: true})
		if prob := wantProblem(t, res, "invalid-request", "/v1/products/"+itoa(p.ID)+"/sale"); prob.Field != "sale_ends_at" {
			t.Errorf("field = %q, want sale_ends_at", prob.Field)
		}
		res = call(t, request{Method: http.MethodPatch, URL: in.URL + "/v1/products/" + itoa(p.ID) + "/sale", Header: adminHeader(),
			Body: map[string]any{}, Invalid: true})
		wantProblem(t, res, "invalid-request", "/v1/products/"+itoa(p.ID)+"/sale")
		res = call(t, request{Method: http.MethodPatch, URL: in.URL + "/v1/products/" + itoa(p.ID) + "/sale", Header: adminHeader(),
			Body: map[string]any{"max_per_customer": 0}, Invalid: true})
		wantProblem(t, res, "invalid-request", "/v1/products/"+itoa(p.ID)+"/sale")
	})

	t.Run("opened by an admin, then the limit", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPatch, URL: in.URL + "/v1/products/" + itoa(p.ID) + "/sale", Header: adminHeader(),
			Body: map[string]any{"sale_starts_at": nil}})
		var opened productBody
		wantJSON(t, res, http.StatusOK, &opened)
		if opened.SaleStartsAt != nil || opened.MaxPerCustomer == nil || opened.Version <= p.Version {
			t.Fatalf("after opening: %+v, want no start, the limit kept, a new version", opened)
		}
		if res := postOrder(t, in.URL, newOrder("fan", orderItem{p.ID, 2}), nil); res.Status != http.StatusCreated {
			t.Fatalf("order after the opening: %d %s", res.Status, res.Body)
		}
		res = postOrder(t, in.URL, newOrder("fan", orderItem{p.ID, 1}), nil)
		prob := wantProblem(t, res, "customer-limit", path)
		if prob.MaxPerCustomer != 2 || prob.Bought == nil || *prob.Bought != 2 || prob.Requested != 1 || prob.ProductID != p.ID {
			t.Errorf("problem %+v, want limit 2, bought 2, requested 1", prob)
		}
	})

	t.Run("ended", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products/" + itoa(p.ID) + "/sale/end", Header: adminHeader()})
		var ended productBody
		wantJSON(t, res, http.StatusOK, &ended)
		if ended.SaleEndsAt == nil {
			t.Fatalf("after ending: %+v, want sale_ends_at", ended)
		}
		res = postOrder(t, in.URL, newOrder("late", orderItem{p.ID, 1}), nil)
		if prob := wantProblem(t, res, "sale-ended", path); prob.SaleEndsAt == nil || !prob.SaleEndsAt.Equal(*ended.SaleEndsAt) {
			t.Errorf("problem %+v, want it to say the sale ended at %v", prob, ended.SaleEndsAt)
		}
	})

	t.Run("admin only", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products/" + itoa(p.ID) + "/sale/end", Invalid: true})
		wantProblem(t, res, "unauthorized", "/v1/products/"+itoa(p.ID)+"/sale/end")
		res = call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products/999999/sale/end", Header: adminHeader()})
		wantProblem(t, res, "product-not-found", "/v1/products/999999/sale/end")
	})
}

func TestListProductsContract(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	a := createProduct(t, in.URL, "list-a", 3)
	b := createProduct(t, in.URL, "list-b", 0) // sold out: not on sale
	c := createRuledProduct(t, in.URL, "list-c", 3, map[string]any{"sale_starts_at": time.Now().Add(time.Hour)}).ID
	d := createRuledProduct(t, in.URL, "list-d", 3, map[string]any{"sale_ends_at": time.Now().Add(time.Hour)}).ID
	if res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products/" + itoa(d) + "/sale/end", Header: adminHeader()}); res.Status != http.StatusOK {
		t.Fatalf("end d: %d %s", res.Status, res.Body)
	}
	type page struct {
		Items      []productBody `json:"items"`
		NextCursor *string       `json:"next_cursor"`
	}
	// The database is the package's: other tests' products are listed too, so only these four
	// are looked at, from just before the first.
	ours := map[int64]bool{a: true, b: true, c: true, d: true}
	walk := func(query string) (ids []int64) {
		t.Helper()
		cursor := "&cursor=" + itoa(a-1)
		if a == 1 {
			cursor = ""
		}
		for pages := 0; ; pages++ {
			res := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/products?" + query + cursor})
			var p page
			wantJSON(t, res, http.StatusOK, &p)
			if len(p.Items) > 2 {
				t.Fatalf("a page of %d items, want at most 2", len(p.Items))
			}
			for _, it := range p.Items {
				if ours[it.ID] {
					ids = append(ids, it.ID)
				}
			}
			if p.NextCursor == nil || pages > 1000 {
				return ids
			}
			cursor = "&cursor=" + *p.NextCursor
		}
	}
	// (The listing is memoised for 50ms per page: the creations above were answered before
	// any of these pages was read, and a page read earlier would hold none of them.)
	if all, want := walk("limit=2"), []int64{a, b, c, d}; !equalIDs(all, want) {
		t.Errorf("all products, paged: %v, want %v", all, want)
	}
	if ids, want := walk("limit=2&on_sale=true"), []int64{a, c}; !equalIDs(ids, want) {
		t.Errorf("on sale: %v, want %v: in stock, not ended (one not yet open is listed)", ids, want)
	}
	for _, q := range []string{"limit=0", "limit=101", "cursor=x", "on_sale=maybe"} {
		res := call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/products?" + q, Invalid: true})
		wantProblem(t, res, "invalid-request", "/v1/products")
	}
}

func equalIDs(got, want []int64) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}
