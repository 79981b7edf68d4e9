package stockhttp_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// An order that waits in line (a Line-Ticket, no Line-Pass, Prefer: wait) and an admitted
// order that waits for its lock instead of being answered busy (issue #33, speed).

// waitingOrder sends j's order of one unit of product with its ticket and Prefer: wait=secs,
// from a goroutine of its own: the answer comes on the channel.
func waitingOrder(t testing.TB, ctx context.Context, baseURL string, j *inLine, secs string) <-chan response {
	t.Helper()
	answered := make(chan response, 1)
	go func() {
		res, err := send(ctx, http.DefaultClient, request{Method: http.MethodPost, URL: baseURL + "/v1/orders",
			Body:   newOrder(j.customer, orderItem{ProductID: j.product, Quantity: 1}),
			Header: map[string]string{"Line-Ticket": j.ticket, "Prefer": "wait=" + secs}})
		if err != nil && ctx.Err() == nil {
			t.Error(err)
		}
		answered <- res
	}()
	return answered
}

// waiting polls until n orders or long-polls wait on reg's replica.
func waiting(t testing.TB, in *fakeInstance, n float64) {
	t.Helper()
	testenv.Poll(t, 10*time.Second, "orders waiting in line", func() bool {
		return testenv.Gauge(t, in.Registry, "stocksvc_line_long_polls") == n
	})
}

func TestOrderWaitsInLine(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	path := "/v1/orders"
	id := lined(t, in.URL, "wait-in-line", 3, 1, map[string]any{"max_per_customer": 1})
	ann := joinAs(t, in.URL, id, "ann", nil)
	ann.until(t, in.URL, "admitted")
	bob := joinAs(t, in.URL, id, "bob", nil)
	bob.placed(t, in.URL)

	t.Run("admitted while it waits: placed at once with that admission", func(t *testing.T) {
		answered := waitingOrder(t, context.Background(), in.URL, bob, "20")
		waiting(t, in, 1)
		wantJSON(t, lineOrder(t, in.URL, "ann", map[string]string{"Line-Pass": ann.pass}, id), http.StatusCreated, nil)
		var o orderBody
		wantJSON(t, <-answered, http.StatusCreated, &o)
		if o.CustomerID != "bob" {
			t.Errorf("the order is %s's, want bob's", o.CustomerID)
		}
		bob.until(t, in.URL, "used")
		wantProblem(t, lineOrder(t, in.URL, "bob", map[string]string{"Line-Ticket": bob.ticket, "Prefer": "wait=5"}, id),
			"admission-used", path)
	})
	cara := joinAs(t, in.URL, id, "cara", nil)
	cara.until(t, in.URL, "admitted")
	dan := joinAs(t, in.URL, id, "dan", nil)
	dan.placed(t, in.URL)

	t.Run("the wait ends first: not admitted, with the place", func(t *testing.T) {
		res := lineOrder(t, in.URL, "dan", map[string]string{"Line-Ticket": dan.ticket, "Prefer": "wait=1"}, id)
		p := wantProblem(t, res, "not-admitted", path)
		if p.TicketStatus != "waiting" || p.Place == nil || *p.Place != *dan.status.Place {
			t.Errorf("problem %+v, want dan's place %d", p, *dan.status.Place)
		}
		wantHeader(t, res, "Preference-Applied", "wait=1")
		wantHeader(t, res, "Retry-After", "")
	})
	t.Run("cancelled with the client's request", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		answered := waitingOrder(t, ctx, in.URL, dan, "20")
		waiting(t, in, 1)
		cancel()
		<-answered
		waiting(t, in, 0)
	})
	t.Run("sold out while it waits", func(t *testing.T) {
		answered := waitingOrder(t, context.Background(), in.URL, dan, "20")
		waiting(t, in, 1)
		wantJSON(t, lineOrder(t, in.URL, "cara", map[string]string{"Line-Pass": cara.pass}, id), http.StatusCreated, nil)
		p := wantProblem(t, <-answered, "sold-out", path)
		if p.ProductID != id || p.Requested != 1 || p.Available == nil || *p.Available != 0 {
			t.Errorf("problem %+v", p)
		}
	})

	other := lined(t, in.URL, "wait-in-line-ends", 5, 1, nil)
	eve := joinAs(t, in.URL, other, "eve", nil)
	eve.until(t, in.URL, "admitted")
	t.Run("an admission that ran out", func(t *testing.T) {
		in.lineStore.Update(eve.status.TicketID, func(tk *line.Ticket) { tk.AdmittedUntil = time.Now().Add(-time.Second) })
		eve.until(t, in.URL, "expired")
		p := wantProblem(t, lineOrder(t, in.URL, "eve", map[string]string{"Line-Ticket": eve.ticket, "Prefer": "wait=5"}, other),
			"admission-expired", path)
		if p.AdmittedUntil == nil {
			t.Errorf("problem %+v", p)
		}
	})
	t.Run("a ticket that left", func(t *testing.T) {
		// eve's admission passed to gus, who holds it: fay waits behind him.
		gus := joinAs(t, in.URL, other, "gus", nil)
		gus.until(t, in.URL, "admitted")
		fay := joinAs(t, in.URL, other, "fay", nil)
		fay.placed(t, in.URL)
		answered := waitingOrder(t, context.Background(), in.URL, fay, "20")
		waiting(t, in, 1)
		res := call(t, request{Method: http.MethodDelete, URL: lineURL(in.URL, other) + "/ticket", Header: map[string]string{"Line-Ticket": fay.ticket}})
		if res.Status != http.StatusOK {
			t.Fatalf("leave: %d %s", res.Status, res.Body)
		}
		got := <-answered
		if p := wantProblem(t, got, "not-admitted", path); p.TicketStatus != "left" {
			t.Errorf("problem %+v", p)
		}
		wantHeader(t, got, "Preference-Applied", "") // an end, not a wait that ran out
	})
	t.Run("a ticket of another product: refused at once", func(t *testing.T) {
		res := lineOrder(t, in.URL, "dan", map[string]string{"Line-Ticket": dan.ticket, "Prefer": "wait=20"}, other)
		wantProblem(t, res, "not-admitted", path)
		wantHeader(t, res, "Preference-Applied", "")
	})
}

// TestAdmittedOrderWaitsForTheLock: the product's lock is held past STOCKSVC_LOCK_WAIT; a
// plain order is answered busy, an order with its admission waits and is placed once the
// lock is let go.
func TestAdmittedOrderWaitsForTheLock(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	in := c.start(t, instanceOptions{lockWait: 100 * time.Millisecond})
	id := lined(t, in.URL, "lock-wait", 5, 2, nil)
	ann := joinAs(t, in.URL, id, "ann", nil)
	ann.until(t, in.URL, "admitted")
	release := holdLock(t, in, stocklock.Name(c.prefix, id), nil)

	answered := make(chan response, 1)
	go func() {
		res, err := send(context.Background(), http.DefaultClient, request{Method: http.MethodPost, URL: in.URL + "/v1/orders",
			Body: newOrder("ann", orderItem{ProductID: id, Quantity: 1}), Header: map[string]string{"Line-Pass": ann.pass}})
		if err != nil {
			t.Error(err)
		}
		answered <- res
	}()
	// Not a wait for something to happen: the order must not be answered (busy) while the
	// lock is held, and a plain order would be within the lock wait.
	select {
	case res := <-answered:
		t.Fatalf("ann's order was answered while the lock was held: %d %s", res.Status, res.Body)
	case <-time.After(3 * 100 * time.Millisecond):
		// Three times the lock wait: a plain order would have been answered busy by now.
	}
	release()
	wantJSON(t, <-answered, http.StatusCreated, nil)

	// The same lock held again: an order without an admission (on a product without a
	// line) is answered busy within the lock wait, as before.
	plain := createProduct(t, in.URL, "lock-wait-plain", 5)
	holdLock(t, in, stocklock.Name(c.prefix, plain), nil)
	res := postOrder(t, in.URL, newOrder("zed", orderItem{ProductID: plain, Quantity: 1}), nil)
	if p := wantProblem(t, res, "busy", "/v1/orders"); p.Status != http.StatusTooManyRequests {
		t.Errorf("problem %+v", p)
	}
}
