package stockhttp_test

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/ratelimit"
)

// The line's routes and the pass check on the order routes, server-free (fakes_test.go: the
// line's service over the in-memory stores), each exchange held to api/openapi.yaml.

// ticketBody is a ticket's status as the API shows it.
type ticketBody struct {
	ProductID     int64      `json:"product_id"`
	TicketID      int64      `json:"ticket_id"`
	CustomerID    string     `json:"customer_id"`
	Status        string     `json:"status"`
	Ticket        string     `json:"ticket"`
	Place         *int64     `json:"place"`
	Ahead         *int64     `json:"ahead"`
	EstimatedWait *int64     `json:"estimated_wait"`
	Queued        *int64     `json:"queued"`
	AdmittedUntil *time.Time `json:"admitted_until"`
	Pass          string     `json:"pass"`
	MayReturn     *bool      `json:"may_return"`
}

// lined creates a product sold through a line of admit buyers at a time; rules adds to the
// creation's body (max_per_customer, sale_starts_at...).
func lined(t testing.TB, baseURL, sku string, units, admit int64, rules map[string]any) int64 {
	t.Helper()
	body := map[string]any{"sku": sku, "name": sku, "stock": units, "line": map[string]any{"admit": admit, "admission_for": 60}}
	for k, v := range rules {
		body[k] = v
	}
	res := call(t, request{Method: http.MethodPost, URL: baseURL + "/v1/products", Header: adminHeader(), Body: body})
	var p struct {
		ID   int64          `json:"id"`
		Line map[string]any `json:"line"`
	}
	wantJSON(t, res, http.StatusCreated, &p)
	if p.Line["admit"] != float64(admit) || p.Line["admission_for"] != float64(60) {
		t.Fatalf("the product's line = %v", p.Line)
	}
	return p.ID
}

// inLine is a customer with a ticket: what the API said last.
type inLine struct {
	url      string
	product  int64
	customer string
	ticket   string
	etag     string
	status   ticketBody
	pass     string
}

func lineURL(base string, id int64) string { return base + "/v1/products/" + itoa(id) + "/line" }

// joinAs joins product's line as customer (body mode: the body names the customer).
func joinAs(t testing.TB, baseURL string, product int64, customer string, header map[string]string) *inLine {
	t.Helper()
	res := call(t, request{Method: http.MethodPost, URL: lineURL(baseURL, product), Body: map[string]any{"customer_id": customer}, Header: header})
	if res.Status != http.StatusCreated && res.Status != http.StatusOK {
		t.Fatalf("join %s: %d %s", customer, res.Status, res.Body)
	}
	wantHeader(t, res, "Location", "/v1/products/"+itoa(product)+"/line/ticket")
	j := &inLine{url: baseURL, product: product, customer: customer}
	j.saw(t, res)
	j.ticket = j.status.Ticket
	return j
}

func (j *inLine) saw(t testing.TB, res response) {
	t.Helper()
	wantJSON(t, res, res.Status, &j.status)
	wantHeader(t, res, "Cache-Control", "no-store")
	j.etag = res.Header.Get("ETag")
	if j.status.Pass != "" {
		j.pass = j.status.Pass
	}
}

func (j *inLine) get(t testing.TB, header map[string]string) response {
	t.Helper()
	h := map[string]string{"Line-Ticket": j.ticket}
	for k, v := range header {
		h[k] = v
	}
	return call(t, request{Method: http.MethodGet, URL: lineURL(j.url, j.product) + "/ticket", Header: h})
}

// next long-polls until the status differs from the last seen, on the replica at url.
func (j *inLine) next(t testing.TB, url string) ticketBody {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		res := call(t, request{Method: http.MethodGet, URL: lineURL(url, j.product) + "/ticket",
			Header: map[string]string{"Line-Ticket": j.ticket, "If-None-Match": j.etag, "Prefer": "wait=5"}})
		if res.Status == http.StatusNotModified {
			continue
		}
		if res.Header.Get("Retry-After") != "" {
			t.Errorf("a long-poll's answer has Retry-After %q", res.Header.Get("Retry-After"))
		}
		j.saw(t, res)
		return j.status
	}
	t.Fatalf("%s's status did not change from %s", j.customer, j.status.Status)
	return j.status
}

// placed long-polls until the ticket has a place (or is out of line).
func (j *inLine) placed(t testing.TB, url string) ticketBody {
	t.Helper()
	for j.status.Status == "queued" || j.status.Status == "waiting" && j.status.Place == nil {
		j.next(t, url)
	}
	return j.status
}

// until long-polls until the status is want.
func (j *inLine) until(t testing.TB, url, want string) ticketBody {
	t.Helper()
	for j.status.Status != want {
		if line.State(j.status.Status).Final() {
			t.Fatalf("%s is %s, waiting for %s", j.customer, j.status.Status, want)
		}
		j.next(t, url)
	}
	return j.status
}

// order places an order of one unit of each of products with the headers given.
func lineOrder(t testing.TB, baseURL, customer string, header map[string]string, products ...int64) response {
	t.Helper()
	items := make([]orderItem, len(products))
	for i, p := range products {
		items[i] = orderItem{ProductID: p, Quantity: 1}
	}
	return postOrder(t, baseURL, newOrder(customer, items...), header)
}

func TestLineJoinStatusLeave(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	opens := time.Now().Add(time.Hour).UTC()
	id := lined(t, in.URL, "later", 5, 2, map[string]any{"sale_starts_at": opens})

	ann := joinAs(t, in.URL, id, "ann", nil)
	if ann.status.Status != "queued" || ann.status.Place != nil || ann.ticket == "" || ann.status.CustomerID != "ann" {
		t.Fatalf("join before the opening = %+v", ann.status)
	}
	again := call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, id), Body: map[string]any{"customer_id": "ann"}})
	var b ticketBody
	wantJSON(t, again, http.StatusOK, &b)
	if b.TicketID != ann.status.TicketID {
		t.Errorf("joining again gave ticket %d, want %d", b.TicketID, ann.status.TicketID)
	}
	// A plain poll: Retry-After 1 while in line.
	res := ann.get(t, nil)
	var st ticketBody
	wantJSON(t, res, http.StatusOK, &st)
	wantHeader(t, res, "Retry-After", "1")
	wantHeader(t, res, "ETag", ann.etag)
	// A long-poll with nothing changing: 304 at the end of its wait.
	res = ann.get(t, map[string]string{"If-None-Match": ann.etag, "Prefer": "wait=1"})
	if res.Status != http.StatusNotModified || res.Header.Get("ETag") != ann.etag || len(res.Body) != 0 {
		t.Errorf("an unchanged long-poll = %d %q %s", res.Status, res.Header.Get("ETag"), res.Body)
	}
	// HEAD answers as GET does.
	head := call(t, request{Method: http.MethodHead, URL: lineURL(in.URL, id) + "/ticket", Header: map[string]string{"Line-Ticket": ann.ticket}})
	if head.Status != http.StatusOK || head.Header.Get("ETag") != ann.etag {
		t.Errorf("HEAD = %d %q", head.Status, head.Header.Get("ETag"))
	}
	var sum struct {
		InLine  int64      `json:"in_line"`
		DrawnAt *time.Time `json:"drawn_at"`
	}
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: lineURL(in.URL, id)}), http.StatusOK, &sum)
	if sum.DrawnAt != nil {
		t.Errorf("the line before the opening: %+v", sum)
	}
	// Leave, twice.
	for range 2 {
		res = call(t, request{Method: http.MethodDelete, URL: lineURL(in.URL, id) + "/ticket", Header: map[string]string{"Line-Ticket": ann.ticket}})
		wantJSON(t, res, http.StatusOK, &st)
		if st.Status != "left" {
			t.Errorf("leave = %+v", st)
		}
	}
	back := joinAs(t, in.URL, id, "ann", nil)
	if back.status.TicketID == ann.status.TicketID {
		t.Error("joining after leaving gave the same ticket")
	}
	// The draw is not shown before the opening.
	wantProblem(t, call(t, request{Method: http.MethodGet, URL: lineURL(in.URL, id) + "/draw", Header: adminHeader()}),
		"line-not-drawn", "/v1/products/"+itoa(id)+"/line/draw")
}

func TestLineProblems(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := lined(t, in.URL, "problems", 5, 2, nil)
	other := lined(t, in.URL, "other", 5, 2, nil)
	plain := createProduct(t, in.URL, "plain", 5)
	ann := joinAs(t, in.URL, id, "ann", nil)
	path := "/v1/products/" + itoa(id) + "/line"

	t.Run("join a product without a line", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, plain), Body: map[string]any{"customer_id": "x"}})
		wantProblem(t, res, "line-not-found", "/v1/products/"+itoa(plain)+"/line")
	})
	t.Run("join a product that does not exist", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, 999), Body: map[string]any{"customer_id": "x"}})
		wantProblem(t, res, "product-not-found", "/v1/products/999/line")
	})
	t.Run("join without a customer in body mode", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, id), Invalid: true})
		if p := wantProblem(t, res, "invalid-request", path); p.Field != "customer_id" {
			t.Errorf("field %q", p.Field)
		}
	})
	t.Run("join with an unknown field", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, id), Body: map[string]any{"customer": "x"}, Invalid: true})
		wantProblem(t, res, "malformed-json", path)
	})
	t.Run("a ticket missing, forged, or of another product", func(t *testing.T) {
		for _, tc := range []struct {
			product int64
			ticket  string
		}{{id, ""}, {id, ann.ticket[:len(ann.ticket)-2] + "AA"}, {other, ann.ticket}, {id, "garbage"}} {
			h := map[string]string{}
			if tc.ticket != "" {
				h["Line-Ticket"] = tc.ticket
			}
			for _, m := range []string{http.MethodGet, http.MethodDelete} {
				res := call(t, request{Method: m, URL: lineURL(in.URL, tc.product) + "/ticket", Header: h, Invalid: tc.ticket == ""})
				wantProblem(t, res, "invalid-ticket", "/v1/products/"+itoa(tc.product)+"/line/ticket")
			}
		}
	})
	t.Run("the line of a product without one, the draw of one not drawn", func(t *testing.T) {
		wantProblem(t, call(t, request{Method: http.MethodGet, URL: lineURL(in.URL, plain)}), "line-not-found", "/v1/products/"+itoa(plain)+"/line")
		wantProblem(t, call(t, request{Method: http.MethodGet, URL: lineURL(in.URL, plain) + "/draw", Header: adminHeader()}),
			"line-not-drawn", "/v1/products/"+itoa(plain)+"/line/draw")
	})
	t.Run("the draw needs the admin token", func(t *testing.T) {
		res := call(t, request{Method: http.MethodGet, URL: lineURL(in.URL, id) + "/draw", Invalid: true})
		wantProblem(t, res, "unauthorized", path+"/draw")
	})
	t.Run("a line's settings are checked", func(t *testing.T) {
		res := call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products", Header: adminHeader(), Invalid: true,
			Body: map[string]any{"sku": "bad", "name": "bad", "stock": 1, "line": map[string]any{"admit": 0, "admission_for": 60}}})
		if p := wantProblem(t, res, "invalid-request", "/v1/products"); p.Field != "line.admit" {
			t.Errorf("field %q", p.Field)
		}
		res = call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/products", Header: adminHeader(), Invalid: true,
			Body: map[string]any{"sku": "bad", "name": "bad", "stock": 1, "line": map[string]any{"admit": 5}}})
		if p := wantProblem(t, res, "invalid-request", "/v1/products"); p.Field != "line.admission_for" {
			t.Errorf("field %q", p.Field)
		}
		res = call(t, request{Method: http.MethodPatch, URL: in.URL + "/v1/products/" + itoa(id) + "/sale", Header: adminHeader(), Invalid: true,
			Body: map[string]any{"line": map[string]any{"admit": 5, "admission_for": 60, "Admit": 6}}})
		if p := wantProblem(t, res, "malformed-json", "/v1/products/"+itoa(id)+"/sale"); p.Field != "line.Admit" {
			t.Errorf("field %q: a name inside the line must be exact", p.Field)
		}
	})
}

// TestLineLongPollOutlastsTheRequestTimeout: a long-poll is given its wait on top of the
// request timeout, and answers 304 at its end rather than timing out.
func TestLineLongPollOutlastsTheRequestTimeout(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{requestTimeout: 300 * time.Millisecond})
	id := lined(t, in.URL, "patient", 5, 1, map[string]any{"sale_starts_at": time.Now().Add(time.Hour).UTC()})
	j := joinAs(t, in.URL, id, "patient", nil)
	res := j.get(t, map[string]string{"If-None-Match": j.etag, "Prefer": "wait=1"})
	if res.Status != http.StatusNotModified {
		t.Errorf("a 1s long-poll with a 300ms request timeout = %d %s; want 304 at its end", res.Status, res.Body)
	}
}

// TestLineTicketTheStoreLost: a ticket a failover lost (its token verifies, the store no
// longer has it) is told so once drawn: join again.
func TestLineTicketTheStoreLost(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := lined(t, in.URL, "lost", 5, 1, nil)
	first := joinAs(t, in.URL, id, "first", nil)
	first.placed(t, in.URL)
	in.lines.Stop() // no advance places the next join: it is lost before it has a place
	lost := joinAs(t, in.URL, id, "lost", nil)
	in.lineStore.Lose(lost.status.TicketID)
	res := lost.get(t, nil)
	wantProblem(t, res, "ticket-not-found", "/v1/products/"+itoa(id)+"/line/ticket")
}

func TestLineOrders(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{})
	id := lined(t, in.URL, "orders", 10, 3, map[string]any{"max_per_customer": 2})
	other := lined(t, in.URL, "orders-other", 10, 3, nil)
	plain := createProduct(t, in.URL, "orders-plain", 10)
	path := "/v1/orders"
	ann := joinAs(t, in.URL, id, "ann", nil)
	ann.until(t, in.URL, "admitted")
	bob := joinAs(t, in.URL, other, "bob", nil)
	bob.until(t, in.URL, "admitted")
	if ann.status.AdmittedUntil == nil || ann.pass == "" {
		t.Fatalf("an admitted status = %+v", ann.status)
	}

	t.Run("no pass", func(t *testing.T) {
		p := wantProblem(t, lineOrder(t, in.URL, "ann", nil, id), "not-admitted", path)
		if p.ProductID != id || p.Line != "/v1/products/"+itoa(id)+"/line" || p.TicketStatus != "" {
			t.Errorf("problem %+v", p)
		}
	})
	t.Run("no pass, the ticket named", func(t *testing.T) {
		cara := joinAs(t, in.URL, id, "cara", nil)
		cara.placed(t, in.URL)
		p := wantProblem(t, lineOrder(t, in.URL, "cara", map[string]string{"Line-Ticket": cara.ticket}, id), "not-admitted", path)
		if p.TicketStatus != cara.status.Status || p.Place == nil || *p.Place != *cara.status.Place {
			t.Errorf("problem %+v, want the ticket's status %+v", p, cara.status)
		}
	})
	t.Run("a pass for another product", func(t *testing.T) {
		wantProblem(t, lineOrder(t, in.URL, "bob", map[string]string{"Line-Pass": bob.pass}, id), "not-admitted", path)
	})
	t.Run("a pass of another customer", func(t *testing.T) {
		p := wantProblem(t, lineOrder(t, in.URL, "mallory", map[string]string{"Line-Pass": ann.pass}, id), "customer-mismatch", path)
		if p.Field != "Line-Pass" {
			t.Errorf("field %q", p.Field)
		}
	})
	t.Run("a product without a line needs none", func(t *testing.T) {
		wantJSON(t, lineOrder(t, in.URL, "zed", nil, plain), http.StatusCreated, nil)
	})
	t.Run("a cart: the pass covers its product", func(t *testing.T) {
		res := lineOrder(t, in.URL, "ann", map[string]string{"Line-Pass": ann.pass, "Idempotency-Key": "ann-1"}, id, plain)
		wantJSON(t, res, http.StatusCreated, nil)
	})
	t.Run("the admission is used", func(t *testing.T) {
		res := lineOrder(t, in.URL, "ann", map[string]string{"Line-Pass": ann.pass, "Idempotency-Key": "ann-2"}, id)
		if p := wantProblem(t, res, "admission-used", path); p.ProductID != id {
			t.Errorf("problem %+v", p)
		}
		ann.until(t, in.URL, "used")
	})
	t.Run("the same order again, its key: answered with it", func(t *testing.T) {
		res := lineOrder(t, in.URL, "ann", map[string]string{"Line-Pass": ann.pass, "Idempotency-Key": "ann-1"}, id, plain)
		wantJSON(t, res, http.StatusCreated, nil)
		wantHeader(t, res, "Idempotent-Replayed", "true")
	})
	t.Run("no customer_id in the body: the pass's", func(t *testing.T) {
		res := postOrder(t, in.URL, map[string]any{"items": []orderItem{{ProductID: other, Quantity: 1}}}, map[string]string{"Line-Pass": bob.pass})
		var o orderBody
		wantJSON(t, res, http.StatusCreated, &o)
		if o.CustomerID != "bob" {
			t.Errorf("the order is %s's, want bob's", o.CustomerID)
		}
	})
	t.Run("an admission that ran out", func(t *testing.T) {
		dan := joinAs(t, in.URL, id, "dan", nil)
		dan.until(t, in.URL, "admitted")
		in.lineStore.Update(dan.status.TicketID, func(tk *line.Ticket) { tk.AdmittedUntil = time.Now().Add(-time.Second) })
		dan.until(t, in.URL, "expired")
		p := wantProblem(t, lineOrder(t, in.URL, "dan", map[string]string{"Line-Pass": dan.pass}, id), "admission-expired", path)
		if p.AdmittedUntil == nil {
			t.Errorf("problem %+v", p)
		}
	})
	t.Run("with Prefer respond-async: accepted, and the admission used", func(t *testing.T) {
		eve := joinAs(t, in.URL, id, "eve", nil)
		eve.until(t, in.URL, "admitted")
		h := map[string]string{"Line-Pass": eve.pass, "Prefer": "respond-async"}
		wantJSON(t, lineOrder(t, in.URL, "eve", h, id), http.StatusAccepted, nil)
		wantProblem(t, lineOrder(t, in.URL, "eve", h, id), "admission-used", path)
	})
	t.Run("the draw, for an admin", func(t *testing.T) {
		var d struct {
			Seed    string `json:"seed"`
			Formula string `json:"formula"`
			Tickets []struct {
				TicketID int64 `json:"ticket_id"`
				Place    int64 `json:"place"`
			} `json:"tickets"`
		}
		wantJSON(t, call(t, request{Method: http.MethodGet, URL: lineURL(in.URL, id) + "/draw", Header: adminHeader()}), http.StatusOK, &d)
		if len(d.Seed) != 64 || !strings.Contains(d.Formula, "SHA-256") {
			t.Errorf("draw %+v", d)
		}
	})
}

// TestLineRoutesOnAServerWithoutLines: without a line service, no product has a line.
func TestLineRoutesOnAServerWithoutLines(t *testing.T) {
	t.Parallel()
	in := newFakeInstance(t, fakeOptions{noLines: true})
	id := createProduct(t, in.URL, "nolines", 3)
	res := call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, id), Body: map[string]any{"customer_id": "x"}})
	wantProblem(t, res, "line-not-found", "/v1/products/"+itoa(id)+"/line")
	wantJSON(t, lineOrder(t, in.URL, "x", nil, id), http.StatusCreated, nil)
}

// lookingVerifier counts the tokens looked at: verified, or looked up among those verified
// before.
type lookingVerifier struct {
	stockhttp.Verifier
	n atomic.Int64
}

func (v *lookingVerifier) Verify(ctx context.Context, token string) (string, error) {
	v.n.Add(1)
	return v.Verifier.Verify(ctx, token)
}

func (v *lookingVerifier) Remembered(ctx context.Context, token string) (string, error) {
	v.n.Add(1)
	return v.Verifier.Remembered(ctx, token)
}

// TestLinePassCheckedBeforeTheToken: in token mode, an order for a lined product without a
// pass is refused before its token is looked at (verified, or looked up among those verified),
// however valid the token, and one with a valid pass needs no token at all: the pass names the
// customer it was issued to, whose token was verified when it joined. An order for a product
// without a line has its token looked at as always.
func TestLinePassCheckedBeforeTheToken(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	verifier := &lookingVerifier{Verifier: tk.auth.Verifier}
	in := newFakeInstance(t, fakeOptions{customers: stockhttp.CustomerAuth{Mode: identity.ModeToken, Verifier: verifier}})
	id := lined(t, in.URL, "tokens", 5, 2, nil)
	plain := createProduct(t, in.URL, "tokens-plain", 5)
	alice := tk.header(t, "alice")

	ann := joinAs(t, in.URL, id, "alice", alice) // the join looks alice's token up, then verifies it
	ann.until(t, in.URL, "admitted")
	joined := verifier.n.Load()
	if joined == 0 {
		t.Fatal("the join looked at no token")
	}
	for range 5 {
		res := postOrder(t, in.URL, items(id), alice)
		wantProblem(t, res, "not-admitted", "/v1/orders")
	}
	res := postOrder(t, in.URL, items(id), map[string]string{"Authorization": "Bearer not.a.token"})
	wantProblem(t, res, "not-admitted", "/v1/orders")
	if n := verifier.n.Load(); n != joined {
		t.Errorf("%d tokens looked at after 6 orders without a pass, want %d: none of theirs", n, joined)
	}
	// Bob's token beside alice's pass: the pass decides, and a body naming bob contradicts it.
	bob := tk.header(t, "bob")
	res = call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: newOrder("bob", orderItem{id, 1}),
		Header: map[string]string{"Line-Pass": ann.pass, "Authorization": bob["Authorization"]}})
	wantProblem(t, res, "customer-mismatch", "/v1/orders")
	var o orderBody
	res = call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: items(id), Header: map[string]string{"Line-Pass": ann.pass}})
	wantJSON(t, res, http.StatusCreated, &o)
	if o.CustomerID != "alice" || verifier.n.Load() != joined {
		t.Errorf("an order with the pass and no token: %s's, %d tokens looked at; want alice's, still %d", o.CustomerID, verifier.n.Load(), joined)
	}
	wantJSON(t, postOrder(t, in.URL, items(plain), alice), http.StatusCreated, nil)
	if n := verifier.n.Load(); n <= joined {
		t.Errorf("%d tokens looked at, want more than %d: the order of a product without a line has its token looked at", n, joined)
	}
}

// TestLineRoutesUnderTheCustomerLimit: a join and a leave spend the customer's budget as the
// order routes do, and so does an order the line does not bound (one with a product outside
// the line); a ticket's status and an order every product of which its passes cleared do not —
// they are answered from memory or bounded by the admissions, and a limit would only keep an
// admitted buyer, and the units waiting for it, late.
func TestLineRoutesUnderTheCustomerLimit(t *testing.T) {
	t.Parallel()
	tk := newTokens(t)
	clock := newTestClock()
	in := newFakeInstance(t, fakeOptions{customers: tk.auth, limits: stockhttp.Limits{
		Customer: ratelimit.Limit{Events: 1, Per: time.Second, Burst: 3}, Now: clock.now}})
	id := lined(t, in.URL, "limited", 5, 2, nil)
	plain := createProduct(t, in.URL, "limited-plain", 5)
	ann := joinAs(t, in.URL, id, "ann", tk.header(t, "ann")) // 1
	for ann.status.Status != "admitted" {
		clock.advance(time.Second)
		ann.next(t, in.URL)
	}
	clock.advance(5 * time.Second)
	for range 3 { // the budget, spent on joins (each answers the ticket as it stands)
		if res := call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, id), Header: tk.header(t, "ann")}); res.Status != http.StatusOK {
			t.Fatalf("a join again: %d %s", res.Status, res.Body)
		}
	}
	wantLimited(t, call(t, request{Method: http.MethodPost, URL: lineURL(in.URL, id), Header: tk.header(t, "ann")}), "/v1/products/"+itoa(id)+"/line")
	wantLimited(t, call(t, request{Method: http.MethodDelete, URL: lineURL(in.URL, id) + "/ticket", Header: map[string]string{"Line-Ticket": ann.ticket}}),
		"/v1/products/"+itoa(id)+"/line/ticket")
	for range 5 {
		if res := ann.get(t, nil); res.Status != http.StatusOK {
			t.Fatalf("a status past the budget: %d %s, want 200: a status is not limited", res.Status, res.Body)
		}
	}
	both := map[string]any{"items": []orderItem{{ProductID: id, Quantity: 1}, {ProductID: plain, Quantity: 1}}}
	wantLimited(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: both, Header: map[string]string{"Line-Pass": ann.pass}}), "/v1/orders")
	wantJSON(t, call(t, request{Method: http.MethodPost, URL: in.URL + "/v1/orders", Body: items(id), Header: map[string]string{"Line-Pass": ann.pass}}), http.StatusCreated, nil)
}
