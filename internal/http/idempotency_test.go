package stockhttp_test

import (
	"context"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// Contract: the Idempotency-Key header of POST /v1/orders.

func keyHeader(key string) map[string]string {
	return map[string]string{"Idempotency-Key": key}
}

func TestIdempotentReplay(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "replayed", 10)
	body := newOrder("c", orderItem{id, 3})

	first := postOrder(t, in.URL, body, keyHeader("key-1"))
	var placed orderBody
	wantJSON(t, first, http.StatusCreated, &placed)
	wantHeader(t, first, "Idempotent-Replayed", "")

	for i := range 3 {
		again := postOrder(t, in.URL, body, keyHeader("key-1"))
		wantJSON(t, again, http.StatusCreated, nil)
		if string(again.Body) != string(first.Body) {
			t.Errorf("replay %d body = %s, want the first body byte for byte: %s", i, again.Body, first.Body)
		}
		wantHeader(t, again, "Idempotent-Replayed", "true")
		wantHeader(t, again, "Location", "/v1/orders/"+placed.ID)
	}

	want := auditBody{ProductID: id, Stock: 7, Received: 10, Sold: 3, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v (one sale of 3)", a, want)
	}

	// A different key is a different request.
	other := postOrder(t, in.URL, body, keyHeader("key-2"))
	var second orderBody
	wantJSON(t, other, http.StatusCreated, &second)
	wantHeader(t, other, "Idempotent-Replayed", "")
	if second.ID == placed.ID {
		t.Errorf("order under another key has the same id %s", second.ID)
	}
	if a := audit(t, in.URL, id); a.Sold != 6 || a.Stock != 4 {
		t.Errorf("audit = %+v, want 6 sold, 4 left", a)
	}
}

func TestIdempotencyKeyReused(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	a := createProduct(t, in.URL, "reuse-a", 10)
	b := createProduct(t, in.URL, "reuse-b", 10)
	const key = "reused-key"
	first := newOrder("c", orderItem{a, 1})
	wantJSON(t, postOrder(t, in.URL, first, keyHeader(key)), http.StatusCreated, nil)

	tests := []struct {
		name string
		body orderRequest
	}{
		{name: "other quantity", body: newOrder("c", orderItem{a, 2})},
		{name: "other product", body: newOrder("c", orderItem{b, 1})},
		{name: "extra item", body: newOrder("c", orderItem{a, 1}, orderItem{b, 1})},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				res := postOrder(t, in.URL, tt.body, keyHeader(key))
				wantProblem(t, res, "idempotency-key-reused", "/v1/orders")
				wantHeader(t, res, "Idempotent-Replayed", "")
			})
		}
	})
	if got := audit(t, in.URL, a); got.Sold != 1 {
		t.Errorf("audit of a = %+v, want only the first sale", got)
	}
	wantUntouched(t, in.URL, b, 10)
}

// TestIdempotencyKeyIsTheCustomers: a key is its customer's own (issue #31). Another customer
// who sends the same key — reusing, guessing or claiming it first — places an order of their
// own and learns nothing of the first; each customer's retry replays their own order, and
// another body from the same customer is still 422.
func TestIdempotencyKeyIsTheCustomers(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "scoped-key", 10)
	const key = "shared-key"
	var alice, bob orderBody
	first := postOrder(t, in.URL, newOrder("alice", orderItem{id, 1}), keyHeader(key))
	wantJSON(t, first, http.StatusCreated, &alice)
	res := postOrder(t, in.URL, newOrder("bob", orderItem{id, 1}), keyHeader(key))
	wantJSON(t, res, http.StatusCreated, &bob)
	wantHeader(t, res, "Idempotent-Replayed", "")
	if bob.ID == alice.ID || bob.CustomerID != "bob" {
		t.Errorf("bob's order under alice's key = %+v, want an order of his own (alice's is %s)", bob, alice.ID)
	}
	for _, c := range []struct {
		customer string
		want     orderBody
	}{{"alice", alice}, {"bob", bob}} {
		var got orderBody
		res := postOrder(t, in.URL, newOrder(c.customer, orderItem{id, 1}), keyHeader(key))
		wantJSON(t, res, http.StatusCreated, &got)
		wantHeader(t, res, "Idempotent-Replayed", "true")
		if got.ID != c.want.ID {
			t.Errorf("%s's retry answered order %s, want their own %s", c.customer, got.ID, c.want.ID)
		}
	}
	wantProblem(t, postOrder(t, in.URL, newOrder("bob", orderItem{id, 2}), keyHeader(key)), "idempotency-key-reused", "/v1/orders")
	if a := audit(t, in.URL, id); a.Sold != 2 {
		t.Errorf("audit = %+v, want 2 sold: one order per customer under the key", a)
	}
}

// TestIdempotencyKeyWhileFirstIsQueued sends the same keyed request twice while the product's
// lock is held elsewhere, so that both wait in the replica's queue — and, behind a first batch
// that is already waiting for the lock, in the same batch. The second is answered with the
// first's order, replayed: one sale, and nobody told to come back later.
func TestIdempotencyKeyWhileFirstIsQueued(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	in := c.start(t, instanceOptions{lockWait: 10 * time.Second})
	id := createProduct(t, in.URL, "queued-key", 10)
	lockName := stocklock.Name(c.prefix, id)
	release := holdLock(t, in, lockName, nil)

	// Requests run in goroutines, which must not stop the test: they hand back their errors.
	type answer struct {
		res response
		err error
	}
	post := func(body any, header map[string]string, out chan<- answer) {
		res, err := send(context.Background(), http.DefaultClient,
			request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: body, Header: header})
		out <- answer{res, err}
	}
	got := func(ch <-chan answer) response {
		t.Helper()
		a := <-ch
		if a.err != nil {
			t.Fatalf("order: %v", a.err)
		}
		return a.res
	}

	// A first order's batch begins and waits for the lock: its replica is listed as waiting.
	first := make(chan answer, 1)
	go post(newOrder("first", orderItem{id, 1}), nil, first)
	testenv.Poll(t, 10*time.Second, "the first batch to wait for the lock", func() bool {
		n, err := in.Redis.LLen(context.Background(), lockName+":waiters").Result()
		return err == nil && n == 1
	})

	const key = "queued-key"
	body := newOrder("c", orderItem{id, 2})
	twins := make(chan answer, 2)
	for range 2 {
		go post(body, keyHeader(key), twins)
	}
	testenv.Poll(t, 10*time.Second, "both keyed orders to be queued", func() bool {
		return testenv.Gauge(t, in.Registry, "stocksvc_orders_queued") == 2
	})
	release()

	wantJSON(t, got(first), http.StatusCreated, nil)
	var a, b orderBody
	resA, resB := got(twins), got(twins)
	wantJSON(t, resA, http.StatusCreated, &a)
	wantJSON(t, resB, http.StatusCreated, &b)
	if a.ID != b.ID {
		t.Errorf("the two requests with one key got orders %s and %s, want one order", a.ID, b.ID)
	}
	replayed := []string{resA.Header.Get("Idempotent-Replayed"), resB.Header.Get("Idempotent-Replayed")}
	slices.Sort(replayed)
	if !slices.Equal(replayed, []string{"", "true"}) {
		t.Errorf("Idempotent-Replayed headers = %q, want one fresh answer and one replay", replayed)
	}
	if a := audit(t, in.URL, id); a.Sold != 3 || a.Stock != 7 {
		t.Errorf("audit = %+v, want 3 sold: 1 to the first order, 2 once to the key", a)
	}
}

func TestIdempotentSoldOutReplay(t *testing.T) {
	t.Parallel()
	in := newInstance(t, instanceOptions{})
	id := createProduct(t, in.URL, "short", 1)
	const key = "sold-out-key"
	body := newOrder("c", orderItem{id, 2})
	// The same request id on both calls makes the whole problem comparable byte for byte.
	header := map[string]string{"Idempotency-Key": key, "X-Request-ID": "sold-out-replay"}

	first := postOrder(t, in.URL, body, header)
	p := wantProblem(t, first, "sold-out", "/v1/orders")
	if p.ProductID != id || p.Requested != 2 || p.Available == nil || *p.Available != 1 {
		t.Errorf("sold-out = %+v, want product %d, requested 2, available 1", p, id)
	}
	wantHeader(t, first, "Idempotent-Replayed", "")

	// Stock arrives, but the key's outcome is settled: the refusal is replayed, not re-run.
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products/" + itoa(id) + "/restock",
		Header: adminHeader(), Body: map[string]any{"quantity": 5}}), http.StatusOK, nil)
	again := postOrder(t, in.URL, body, header)
	wantProblem(t, again, "sold-out", "/v1/orders")
	if string(again.Body) != string(first.Body) {
		t.Errorf("replayed body = %s, want the first body byte for byte: %s", again.Body, first.Body)
	}
	wantHeader(t, again, "Idempotent-Replayed", "true")
	want := auditBody{ProductID: id, Stock: 6, Received: 6, Sold: 0, Consistent: true}
	if a := audit(t, in.URL, id); a != want {
		t.Errorf("audit = %+v, want %+v", a, want)
	}

	// The stored refusal is still bound to its request.
	wantProblem(t, postOrder(t, in.URL, newOrder("c", orderItem{id, 1}), keyHeader(key)), "idempotency-key-reused", "/v1/orders")
	// Without the key the same order now succeeds.
	wantJSON(t, postOrder(t, in.URL, body, nil), http.StatusCreated, nil)
}

func TestIdempotencyKeyInvalid(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := createProduct(t, in.URL, "keys", 10)
	body := newOrder("c", orderItem{id, 1})

	tests := []struct {
		name string
		key  string
	}{
		{name: "empty", key: ""},
		{name: "256 characters", key: repeat("k", 256)},
		{name: "way too long", key: repeat("k", 4096)},
		{name: "control character", key: "tab\tinside"},
	}
	t.Run("cases", func(t *testing.T) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: body, Header: keyHeader(tt.key), Invalid: true})
				p := wantProblem(t, res, "invalid-request", "/v1/orders")
				if p.Field != "Idempotency-Key" {
					t.Errorf("field = %q, want Idempotency-Key", p.Field)
				}
			})
		}
	})
	wantUntouched(t, in.URL, id, 10)

	// The limits are inclusive.
	for _, key := range []string{"k", repeat("k", 255)} {
		res := postOrder(t, in.URL, body, keyHeader(key))
		wantJSON(t, res, http.StatusCreated, nil)
		wantHeader(t, res, "Idempotent-Replayed", "")
		res = postOrder(t, in.URL, body, keyHeader(key))
		wantJSON(t, res, http.StatusCreated, nil)
		wantHeader(t, res, "Idempotent-Replayed", "true")
	}
	if a := audit(t, in.URL, id); a.Sold != 2 {
		t.Errorf("audit = %+v, want 2 sold (one per key)", a)
	}
}

func TestIdempotencyBusyIsNotStored(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	in := c.start(t, instanceOptions{lockWait: 100 * time.Millisecond})
	id := createProduct(t, in.URL, "busy-key", 5)
	body := newOrder("c", orderItem{id, 1})
	const key = "busy-key"

	release := holdLock(t, in, stocklock.Name(c.prefix, id), nil)
	res := postOrder(t, in.URL, body, keyHeader(key))
	wantProblem(t, res, "busy", "/v1/orders")
	wantRetryAfter(t, res)
	release()

	// Busy is not an outcome: the retry with the same key buys, and is not a replay.
	res = postOrder(t, in.URL, body, keyHeader(key))
	wantJSON(t, res, http.StatusCreated, nil)
	wantHeader(t, res, "Idempotent-Replayed", "")
	if a := audit(t, in.URL, id); a.Sold != 1 || a.Stock != 4 {
		t.Errorf("audit = %+v, want one sale", a)
	}
}

// TestIdempotencyConcurrent sends one request 20 times at once, through two replicas: exactly
// one order may come of it, however the requests interleave.
func TestIdempotencyConcurrent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	replicas := []*instance{c.start(t, instanceOptions{}), c.start(t, instanceOptions{})}
	id := createProduct(t, replicas[0].URL, "stampede", 10)
	const (
		n        = 20
		quantity = 3
		key      = "stampede-key"
	)
	body := newOrder("c", orderItem{id, quantity})

	results := make([]response, n)
	errs := make([]error, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			<-start
			results[i], errs[i] = send(context.Background(), http.DefaultClient, request{Method: http.MethodPost,
				URL: replicas[i%len(replicas)].URL + "/v1/orders", Body: body, Header: keyHeader(key)})
		})
	}
	close(start)
	wg.Wait()

	orderIDs := map[string]int{}
	fresh, replayed := 0, 0
	for i, res := range results {
		if errs[i] != nil {
			t.Errorf("request %d: %v", i, errs[i])
			continue
		}
		switch res.Status {
		case http.StatusCreated:
			var o orderBody
			res.Decode(t, &o)
			orderIDs[o.ID]++
			if res.Header.Get("Idempotent-Replayed") == "true" {
				replayed++
			} else {
				fresh++
			}
		default:
			t.Errorf("request %d: status %d, want 201: %s", i, res.Status, res.Body)
		}
	}
	t.Logf("%d created, %d replayed", fresh, replayed)
	if fresh != 1 {
		t.Errorf("%d responses created an order, want exactly 1", fresh)
	}
	if len(orderIDs) != 1 {
		t.Errorf("201 responses name %d orders, want 1: %v", len(orderIDs), orderIDs)
	}
	want := auditBody{ProductID: id, Stock: 10 - quantity, Received: 10, Sold: quantity, Consistent: true}
	if a := audit(t, replicas[0].URL, id); a != want {
		t.Errorf("audit = %+v, want %+v (one sale of %d)", a, want, quantity)
	}

	// Afterwards every replica replays the one order.
	for i, r := range replicas {
		res := postOrder(t, r.URL, body, keyHeader(key))
		var o orderBody
		wantJSON(t, res, http.StatusCreated, &o)
		wantHeader(t, res, "Idempotent-Replayed", "true")
		if orderIDs[o.ID] == 0 {
			t.Errorf("replica %d replays order %s, not the one the stampede created (%v)", i, o.ID, orderIDs)
		}
	}
}
