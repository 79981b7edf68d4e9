package stockhttp_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// respondAsync is the header that asks for an order to be accepted and decided later.
var respondAsync = map[string]string{"Prefer": "respond-async"}

func withKey(h map[string]string, key string) map[string]string {
	out := map[string]string{"Idempotency-Key": key}
	for k, v := range h {
		out[k] = v
	}
	return out
}

// wantAccepted checks a 202 for an order accepted for later and returns the order.
func wantAccepted(t *testing.T, res response) orderBody {
	t.Helper()
	var o orderBody
	wantJSON(t, res, http.StatusAccepted, &o)
	wantHeader(t, res, "Location", "/v1/orders/"+o.ID)
	wantHeader(t, res, "Preference-Applied", "respond-async")
	return o
}

// getOrder reads an order, which must exist.
func getOrder(t *testing.T, baseURL, id string) (orderBody, response) {
	t.Helper()
	res := call(t, request{Method: http.MethodGet, URL: baseURL + "/v1/orders/" + id})
	var o orderBody
	wantJSON(t, res, http.StatusOK, &o)
	return o, res
}

// awaitDecision polls the order's URL, as a client does, until it is no longer pending.
func awaitDecision(t *testing.T, baseURL, id string) orderBody {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		o, res := getOrder(t, baseURL, id)
		if o.Status != "pending" {
			wantHeader(t, res, "Retry-After", "")
			return o
		}
		wantHeader(t, res, "Retry-After", "1")
		if time.Now().After(deadline) {
			t.Fatalf("order %s still pending after 20s", id)
		}
		time.Sleep(10 * time.Millisecond) // a client polling the Location it was given
	}
}

// An order sent with Prefer: respond-async is answered 202 with where to watch it; it is
// pending (GET says so, with Retry-After) until a worker decides it, then confirmed like any
// order, and the stock says so.
func TestAsyncOrderLifecycle(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "async-1", 3)

	o := wantAccepted(t, postOrder(t, in.URL, newOrder("alice", orderItem{id, 2}), respondAsync))
	if o.Status != "pending" || o.CustomerID != "alice" || len(o.Items) != 1 || o.Items[0] != (orderItem{id, 2}) || o.DecidedAt != nil {
		t.Errorf("accepted order = %+v, want alice's pending order of 2", o)
	}
	// No worker runs yet: it stays pending, and nothing is sold.
	pending, res := getOrder(t, in.URL, o.ID)
	if pending.Status != "pending" {
		t.Errorf("status = %s, want pending", pending.Status)
	}
	wantHeader(t, res, "Retry-After", "1")
	wantUntouched(t, in.URL, id, 3)

	in.startQueue(t)
	decided := awaitDecision(t, in.URL, o.ID)
	if decided.Status != "confirmed" || decided.ID != o.ID || decided.Rejection != nil {
		t.Errorf("decided order = %+v, want confirmed under the same id", decided)
	}
	want := auditBody{ProductID: id, Stock: 1, Received: 3, Sold: 2, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v", a, want)
	}
}

// Orders accepted for later are decided in the order they were accepted; one that does not fit
// in what its turn leaves is rejected, with the figures a 409 would have given.
func TestAsyncOrderRejected(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "async-2", 3)
	first := wantAccepted(t, postOrder(t, in.URL, newOrder("a", orderItem{id, 2}), respondAsync))
	second := wantAccepted(t, postOrder(t, in.URL, newOrder("b", orderItem{id, 2}), respondAsync))
	third := wantAccepted(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), respondAsync))
	in.startQueue(t)
	if o := awaitDecision(t, in.URL, first.ID); o.Status != "confirmed" {
		t.Errorf("first = %+v, want confirmed", o)
	}
	o := awaitDecision(t, in.URL, second.ID)
	if o.Status != "rejected" || o.Rejection == nil || o.DecidedAt == nil {
		t.Fatalf("second = %+v, want rejected with a reason and a time", o)
	}
	if r := o.Rejection; r.Code != "sold-out" || r.ProductID != id || r.Requested != 2 || r.Available == nil || *r.Available != 1 {
		t.Errorf("rejection = %+v, want sold-out of product %d, 2 requested, 1 available", r, id)
	}
	if o := awaitDecision(t, in.URL, third.ID); o.Status != "confirmed" {
		t.Errorf("third = %+v, want confirmed: it fits in what the second left", o)
	}
}

// A product already known to be sold out is refused at once, whatever the preference: there is
// nothing to wait for.
func TestAsyncSoldOutAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "async-3", 1)
	wantJSON(t, postOrder(t, in.URL, newOrder("a", orderItem{id, 1}), nil), http.StatusCreated, nil)
	getProduct(t, in.URL, id) // the replica's view learns the product is sold out
	p := wantProblem(t, postOrder(t, in.URL, newOrder("b", orderItem{id, 1}), respondAsync), "sold-out", "/v1/orders")
	if p.Available == nil || *p.Available != 0 {
		t.Errorf("available = %v, want 0", p.Available)
	}
}

// An Idempotency-Key sent with an accepted order belongs to it: the same request again, on
// either route, is answered 202 with that order, replayed; another body under the key is 422.
func TestAsyncIdempotency(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "async-4", 5)
	body := newOrder("alice", orderItem{id, 1})
	first := wantAccepted(t, postOrder(t, in.URL, body, withKey(respondAsync, "k1")))

	res := postOrder(t, in.URL, body, withKey(respondAsync, "k1"))
	if o := wantAccepted(t, res); o.ID != first.ID {
		t.Errorf("asynchronous retry answered order %s, want %s", o.ID, first.ID)
	}
	wantHeader(t, res, "Idempotent-Replayed", "true")

	res = postOrder(t, in.URL, body, map[string]string{"Idempotency-Key": "k1"})
	if o := wantAccepted(t, res); o.ID != first.ID {
		t.Errorf("synchronous retry answered order %s, want %s", o.ID, first.ID)
	}
	wantHeader(t, res, "Idempotent-Replayed", "true")

	wantProblem(t, postOrder(t, in.URL, newOrder("alice", orderItem{id, 2}), withKey(respondAsync, "k1")), "idempotency-key-reused", "/v1/orders")

	in.startQueue(t)
	awaitDecision(t, in.URL, first.ID)
	res = postOrder(t, in.URL, body, withKey(respondAsync, "k1"))
	replayedAsync := wantAccepted(t, res)
	if replayedAsync.Status != "confirmed" {
		t.Errorf("retry after the decision: %+v, want the order, confirmed", replayedAsync)
	}
	// The replays and a read of the order are one order: the same created_at (when it was
	// confirmed), and no decided_at, which only an order not confirmed carries.
	read, _ := getOrder(t, in.URL, first.ID)
	if read.DecidedAt != nil {
		t.Errorf("GET of the confirmed order has decided_at %v, want none", read.DecidedAt)
	}
	if diff := cmp.Diff(read, replayedAsync); diff != "" {
		t.Errorf("asynchronous retry after the decision differs from GET (-get +retry):\n%s", diff)
	}
	var replayedSync orderBody
	wantJSON(t, postOrder(t, in.URL, body, map[string]string{"Idempotency-Key": "k1"}), http.StatusAccepted, &replayedSync)
	if diff := cmp.Diff(read, replayedSync); diff != "" {
		t.Errorf("synchronous retry after the decision differs from GET (-get +retry):\n%s", diff)
	}
	// A key first used synchronously keeps its outcome on the asynchronous route.
	res = postOrder(t, in.URL, newOrder("bob", orderItem{id, 1}), map[string]string{"Idempotency-Key": "k2"})
	var confirmed orderBody
	wantJSON(t, res, http.StatusCreated, &confirmed)
	res = postOrder(t, in.URL, newOrder("bob", orderItem{id, 1}), withKey(respondAsync, "k2"))
	var replayed orderBody
	wantJSON(t, res, http.StatusCreated, &replayed)
	wantHeader(t, res, "Idempotent-Replayed", "true")
	if replayed.ID != confirmed.ID {
		t.Errorf("asynchronous retry of a confirmed key answered %s, want %s", replayed.ID, confirmed.ID)
	}
	want := auditBody{ProductID: id, Stock: 3, Received: 5, Sold: 2, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v (each key bought once)", a, want)
	}
}

// An Idempotency-Key sent with an order accepted for later is its customer's (issue #31): the
// same key from another customer is another order, accepted on its own; each customer's retry,
// on either route, is answered with their own order, and another body is 422.
func TestAsyncIdempotencyKeyIsTheCustomers(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "async-scoped-key", 5)
	alice := wantAccepted(t, postOrder(t, in.URL, newOrder("alice", orderItem{id, 1}), withKey(respondAsync, "k")))
	res := postOrder(t, in.URL, newOrder("bob", orderItem{id, 1}), withKey(respondAsync, "k"))
	bob := wantAccepted(t, res)
	wantHeader(t, res, "Idempotent-Replayed", "")
	if bob.ID == alice.ID || bob.CustomerID != "bob" {
		t.Errorf("bob's order under alice's key = %+v, want an order of his own (alice's is %s)", bob, alice.ID)
	}
	for _, c := range []struct {
		customer string
		want     string
		header   map[string]string
	}{
		{"alice", alice.ID, withKey(respondAsync, "k")},
		{"bob", bob.ID, withKey(respondAsync, "k")},
		{"bob", bob.ID, keyHeader("k")},
	} {
		res := postOrder(t, in.URL, newOrder(c.customer, orderItem{id, 1}), c.header)
		if got := wantAccepted(t, res); got.ID != c.want {
			t.Errorf("%s's retry (%v) answered order %s, want their own %s", c.customer, c.header, got.ID, c.want)
		}
		wantHeader(t, res, "Idempotent-Replayed", "true")
	}
	wantProblem(t, postOrder(t, in.URL, newOrder("bob", orderItem{id, 2}), withKey(respondAsync, "k")), "idempotency-key-reused", "/v1/orders")
	in.startQueue(t)
	awaitDecision(t, in.URL, alice.ID)
	awaitDecision(t, in.URL, bob.ID)
	if a := audit(t, in.URL, id); a.Sold != 2 {
		t.Errorf("audit = %+v, want 2 sold: one order per customer under the key", a)
	}
}

// The asynchronous route refuses what the synchronous one refuses, before accepting anything:
// a malformed body, an invalid order. (A missing product: TestAsyncOrderErrors.)
func TestAsyncOrderInvalid(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "async-5", 5)
	res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: "{", Header: map[string]string{"Prefer": "respond-async", "Content-Type": "application/json"}, Invalid: true})
	wantProblem(t, res, "malformed-json", "/v1/orders")
	res = call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: newOrder("", orderItem{id, 1}), Header: respondAsync, Invalid: true})
	if p := wantProblem(t, res, "invalid-request", "/v1/orders"); p.Field != "customer_id" {
		t.Errorf("field = %q, want customer_id", p.Field)
	}
	res = call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: newOrder("c", orderItem{id, 99}), Header: respondAsync, Invalid: true})
	wantProblem(t, res, "invalid-request", "/v1/orders")
	wantUntouched(t, in.URL, id, 5)
}

// The real queue refuses an order for a product that does not exist, alone or in a cart, before
// accepting anything; an id it never accepted is no order.
func TestAsyncOrderErrors(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "async-5", 5)
	for _, items := range [][]orderItem{{{id + 1000, 1}}, {{id, 1}, {id + 1000, 1}}} {
		p := wantProblem(t, postOrder(t, in.URL, newOrder("c", items...), respondAsync), "product-not-found", "/v1/orders")
		if p.ProductID != id+1000 {
			t.Errorf("product_id = %d, want %d", p.ProductID, id+1000)
		}
	}
	wantUntouched(t, in.URL, id, 5)
	// An unknown id is no order, accepted or not.
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: in.URL + "/v1/orders/01a20b0a-6f4e-7c2a-9d3e-2b1f0c9a8e71"}), "order-not-found", "/v1/orders/01a20b0a-6f4e-7c2a-9d3e-2b1f0c9a8e71")
}

// Prefer is read as RFC 7240 has it: a list of preferences, names in any case, with
// parameters; a request without respond-async among them is decided at once.
func TestAsyncPreferParsing(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "async-6", 10)
	for _, prefer := range []string{"respond-async", "Respond-Async", "wait=5, respond-async", "handling=lenient,respond-async;x=y"} {
		wantAccepted(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), map[string]string{"Prefer": prefer}))
	}
	for _, prefer := range []string{"wait=5", "return=minimal", "respond-asynchronously"} {
		res := postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), map[string]string{"Prefer": prefer})
		var o orderBody
		wantJSON(t, res, http.StatusCreated, &o)
		if !strings.EqualFold(o.Status, "confirmed") {
			t.Errorf("Prefer %q: status %s, want confirmed at once", prefer, o.Status)
		}
	}
}

// With Redis down, orders cannot be decided (the product locks live there), but they can still
// be accepted: the line is in Postgres. The synchronous route answers 503; the asynchronous one
// 202, and the order waits, pending, for a Redis to decide it.
func TestAsyncAcceptsWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	healthy := c.start(t, instanceOptions{})
	id := createProduct(t, healthy.URL, "async-no-redis", 5)
	down := c.start(t, instanceOptions{redisURL: "redis://" + deadEndpoint(t) + "/0", lockWait: 200 * time.Millisecond})

	wantProblem(t, postOrder(t, down.URL, newOrder("a", orderItem{id, 1}), nil), "unavailable", "/v1/orders")
	o := wantAccepted(t, postOrder(t, down.URL, newOrder("b", orderItem{id, 1}), respondAsync))
	if got, _ := getOrder(t, down.URL, o.ID); got.Status != "pending" {
		t.Errorf("status = %s, want pending", got.Status)
	}
	// A replica whose Redis answers decides it.
	healthy.startQueue(t)
	if d := awaitDecision(t, healthy.URL, o.ID); d.Status != "confirmed" {
		t.Errorf("decided = %+v, want confirmed", d)
	}
}

// An order accepted for later reads as it stands: pending with Retry-After; rejected with the
// code a synchronous order would have had for the same reason, and what was left only when the
// reason is lack of stock; confirmed, as the purchase path's order under the same id.
func TestAcceptedOrderAnswers(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "accepted", 5)
	accepted := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	decided := accepted.Add(time.Second)
	pending := async.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "p", Items: []stock.Item{{ProductID: id, Quantity: 1}},
		Status: async.StatusPending, AcceptedAt: accepted}
	in.queue.add(pending)
	rejected := func(r async.Rejection) async.Order {
		o := pending
		o.ID, o.Status, o.DecidedAt, o.Rejection = uuid.Must(uuid.NewV7()), async.StatusRejected, decided, &r
		in.queue.add(o)
		return o
	}
	zero := int64(0)
	tests := []struct {
		name          string
		order         async.Order
		wantRejection *rejectionBody
	}{
		{name: "pending", order: pending},
		{name: "sold out", order: rejected(async.Rejection{Reason: async.ReasonSoldOut, ProductID: id, Requested: 1}),
			wantRejection: &rejectionBody{Code: "sold-out", ProductID: id, Requested: 1, Available: &zero}},
		{name: "product gone", order: rejected(async.Rejection{Reason: async.ReasonProductNotFound, ProductID: id}),
			wantRejection: &rejectionBody{Code: "product-not-found", ProductID: id}},
		{name: "a rule changed", order: rejected(async.Rejection{Reason: async.ReasonInvalid}),
			wantRejection: &rejectionBody{Code: "invalid-request"}},
		{name: "failed too often", order: rejected(async.Rejection{Reason: async.ReasonInternal}),
			wantRejection: &rejectionBody{Code: "internal"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, res := getOrder(t, in.URL, tt.order.ID.String())
			want := orderBody{ID: tt.order.ID.String(), CustomerID: "p", Status: tt.order.Status,
				Items: []orderItem{{id, 1}}, CreatedAt: accepted, Rejection: tt.wantRejection}
			if tt.order.Status == async.StatusPending {
				wantHeader(t, res, "Retry-After", "1")
			} else {
				want.DecidedAt = &decided
				wantHeader(t, res, "Retry-After", "")
			}
			if diff := cmp.Diff(got, want); diff != "" {
				t.Errorf("order mismatch (-got +want):\n%s", diff)
			}
		})
	}

	t.Run("confirmed", func(t *testing.T) {
		t.Parallel()
		var placed orderBody
		wantJSON(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), nil), http.StatusCreated, &placed)
		got, res := getOrder(t, in.URL, placed.ID)
		wantHeader(t, res, "Retry-After", "")
		if diff := cmp.Diff(got, placed); diff != "" {
			t.Errorf("order mismatch (-got +want):\n%s", diff)
		}
	})
}

// A synchronous order whose Idempotency-Key belongs to an order accepted for later is answered
// with that order as it stands (202, replayed), as its own retry is; a server without a queue
// cannot read it and says so (500).
func TestSynchronousRetryOfAnAcceptedKey(t *testing.T) {
	t.Parallel()
	accepted := async.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c", Items: []stock.Item{{ProductID: 1, Quantity: 1}},
		Status: async.StatusPending, AcceptedAt: time.Now()}
	placeOrder := func(context.Context, stock.OrderRequest) (stock.OrderResult, error) {
		return stock.OrderResult{Accepted: &accepted.ID, Replayed: true}, nil
	}
	body := newOrder("c", orderItem{1, 1})

	in := newFakeInstance(t, fakeOptions{placeOrder: placeOrder})
	in.queue.add(accepted)
	res := postOrder(t, in.URL, body, keyHeader("k-async"))
	if o := wantAccepted(t, res); o.ID != accepted.ID.String() || o.Status != "pending" {
		t.Errorf("answer = %+v, want order %s, pending", o, accepted.ID)
	}
	wantHeader(t, res, "Idempotent-Replayed", "true")

	alone := newFakeInstance(t, fakeOptions{placeOrder: placeOrder, noQueue: true})
	wantProblem(t, postOrder(t, alone.URL, body, keyHeader("k-async")), "internal", "/v1/orders")
}
