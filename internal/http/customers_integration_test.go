package stockhttp_test

import (
	"net/http"
	"testing"
	"time"
)

// TestCustomerOrdersOverPostgres: in token mode over real servers, two replicas of one
// cluster: a customer's orders — placed on either replica, one of them sent with Prefer:
// respond-async and confirmed by a worker — come back from GET /v1/orders on the other,
// newest first, a page at a time; another customer sees none of them and reads none by id; an
// admin lists them.
func TestCustomerOrdersOverPostgres(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	c := newCluster(t)
	a := c.start(t, instanceOptions{customers: tk.auth, async: true})
	b := c.start(t, instanceOptions{customers: tk.auth})
	id := createProduct(t, a.URL, "customer-orders", 20)
	mia, noa := tk.header(t, "mia"), tk.header(t, "noa")

	var placed []string // mia's, in the order they were confirmed
	for i, in := range []*instance{a, b, a} {
		var o orderBody
		wantJSON(t, postOrder(t, in.URL, items(id), mia), http.StatusCreated, &o)
		if o.CustomerID != "mia" {
			t.Fatalf("order %d: customer %q, want mia", i, o.CustomerID)
		}
		placed = append(placed, o.ID)
	}
	asyncHeader := tk.header(t, "mia")
	asyncHeader["Prefer"] = "respond-async"
	accepted := wantAccepted(t, postOrder(t, b.URL, items(id), asyncHeader))
	deadline := time.Now().Add(20 * time.Second)
	for {
		var o orderBody
		wantJSON(t, call(t, request{Method: http.MethodGet, URL: b.URL + "/v1/orders/" + accepted.ID, Header: mia}), http.StatusOK, &o)
		if o.Status == "confirmed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order %s still %s after 20s", accepted.ID, o.Status)
		}
		time.Sleep(10 * time.Millisecond) // a client polling the Location it was given
	}
	placed = append(placed, accepted.ID)
	wantJSON(t, postOrder(t, a.URL, items(id), noa), http.StatusCreated, &orderBody{})

	var got []string
	cursor := ""
	for page := 0; ; page++ {
		url := b.URL + "/v1/orders?limit=3"
		if cursor != "" {
			url += "&cursor=" + cursor
		}
		p := listOrders(t, url, mia)
		for _, o := range p.Items {
			if o.CustomerID != "mia" || o.Status != "confirmed" {
				t.Errorf("listed %+v, want mia's confirmed orders only", o)
			}
			got = append(got, o.ID)
		}
		if p.NextCursor == nil {
			break
		}
		if page > 2 {
			t.Fatalf("more pages than 4 orders in pages of 3 make")
		}
		cursor = *p.NextCursor
	}
	want := []string{placed[3], placed[2], placed[1], placed[0]}
	if len(got) != len(want) {
		t.Fatalf("mia's orders = %v, want %v (newest first)", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("mia's orders = %v, want %v (newest first)", got, want)
		}
	}

	if p := listOrders(t, a.URL+"/v1/orders", noa); len(p.Items) != 1 || p.Items[0].CustomerID != "noa" {
		t.Errorf("noa's orders = %+v, want her one", p)
	}
	for _, oid := range []string{placed[0], accepted.ID} {
		wantProblem(t, call(t, request{Method: http.MethodGet, URL: a.URL + "/v1/orders/" + oid, Header: noa}), "order-not-found", "/v1/orders/"+oid)
	}
	if p := listOrders(t, a.URL+"/v1/orders?customer_id=mia&limit=100", adminHeader()); len(p.Items) != 4 || p.NextCursor != nil {
		t.Errorf("mia's orders for the admin: %d, next %v; want all 4 on one page", len(p.Items), p.NextCursor)
	}
}
