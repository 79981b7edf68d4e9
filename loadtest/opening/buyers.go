package opening

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/report"
)

// The buyers of -opening-fair: goroutines, each with an HTTP client (and connections) of its
// own, one customer each, acting as a person or a script would.

// outcome is what one buyer ends with.
type outcome struct {
	won bool
	// ended is when its last answer came (the win, or the news it lost); orders are its
	// orders' answers (buyer.orders).
	ended  time.Time
	orders []report.Answer
	// learnt is when the buyer first heard that the units were gone (a ticket's sold_out, an
	// order's sold-out); zero if it won, left or never heard.
	learnt time.Time
	// waited says the buyer was in line when the units ran out (a ticket it had not left and
	// that was not admitted for an order that won): the buyers the 1-s bound is about.
	waited bool
	left   bool
	// requests is how many requests it sent; unresolved, that the round ended with it still
	// not knowing.
	requests   int
	unresolved bool
	// answers counts its answers by status and problem code ("409 not-admitted", "304").
	answers map[string]int
}

// buyer is one customer's client.
type buyer struct {
	client   *http.Client
	base     string
	token    string
	customer string
	product  int64
	requests int
	answers  map[string]int
	// origin is the moment the round's page counts from; orders are the buyer's orders'
	// answers, for it, and last when its last answer came.
	origin time.Time
	orders []report.Answer
	last   time.Time
}

func newBuyer(base, token, customer string, product int64) *buyer {
	// A transport of its own: a person's browser, a script's process.
	tr := &http.Transport{MaxIdleConnsPerHost: 2, IdleConnTimeout: time.Minute}
	return &buyer{client: &http.Client{Transport: tr, Timeout: 20 * time.Second}, base: base, token: token, customer: customer, product: product,
		answers: map[string]int{}}
}

func (b *buyer) close() { b.client.CloseIdleConnections() }

// answer is one response: its status, problem code, Retry-After, ETag and body.
type answer struct {
	status     int
	code       string
	retryAfter time.Duration
	etag       string
	// applied is the Preference-Applied header: an order that waited in line says so.
	applied string
	// ticket is a ticket's status, or, in a problem, where the order's Line-Ticket stands
	// (ticket_status) in Status.
	ticket ticketAnswer
}

// ticketAnswer is the part of a ticket's status the buyers read.
type ticketAnswer struct {
	Status string `json:"status"`
	Ticket string `json:"ticket"`
	Pass   string `json:"pass"`
}

func (b *buyer) do(ctx context.Context, method, path string, header http.Header, body []byte) (answer, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, b.base+path, rd)
	if err != nil {
		return answer{}, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	b.requests++
	sent := time.Now()
	res, err := b.client.Do(req)
	if err != nil {
		b.answers["error"]++
		b.logOrder(path, sent, report.Down)
		return answer{}, err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return answer{}, err
	}
	a := answer{status: res.StatusCode, etag: res.Header.Get("ETag"), applied: res.Header.Get("Preference-Applied")}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil {
		a.retryAfter = time.Duration(s) * time.Second
	}
	switch {
	case strings.HasPrefix(res.Header.Get("Content-Type"), "application/problem+json"):
		var p struct {
			Code         string `json:"code"`
			TicketStatus string `json:"ticket_status"`
		}
		_ = json.Unmarshal(raw, &p)
		a.code, a.ticket.Status = p.Code, p.TicketStatus
		b.answers[strconv.Itoa(res.StatusCode)+" "+p.Code]++
	case res.StatusCode == http.StatusOK || res.StatusCode == http.StatusCreated:
		_ = json.Unmarshal(raw, &a.ticket)
	}
	if a.code == "" {
		b.answers[strconv.Itoa(res.StatusCode)]++
	}
	b.logOrder(path, sent, orderClass(a))
	return a, nil
}

// record puts into o what the buyer counted and logged: its requests and answers, its
// orders' answers and when its last answer came.
func (b *buyer) record(o *outcome) {
	o.requests, o.answers, o.orders, o.ended = b.requests, b.answers, b.orders, b.last
}

// logOrder records the answer to a request sent at sent, if it was an order, for the round's
// page; and when the buyer's last answer came.
func (b *buyer) logOrder(path string, sent time.Time, class report.Class) {
	now := time.Now()
	b.last = now
	if path != "/v1/orders" || b.origin.IsZero() {
		return
	}
	b.orders = append(b.orders, report.Answer{At: now.Sub(b.origin), Latency: now.Sub(sent), Class: class})
}

// orderClass is the class of an order's answer on the page.
func orderClass(a answer) report.Class {
	switch {
	case a.status == http.StatusCreated:
		return report.Confirmed
	case a.code == "sold-out":
		return report.SoldOut
	case a.status == http.StatusTooManyRequests:
		return report.Busy
	case a.status >= 500:
		return report.Down
	}
	return report.Other
}

func (b *buyer) productPath() string { return "/v1/products/" + strconv.FormatInt(b.product, 10) }

func (b *buyer) auth() http.Header { return http.Header{"Authorization": {"Bearer " + b.token}} }

// join joins the product's line.
func (b *buyer) join(ctx context.Context) (answer, error) {
	return b.do(ctx, http.MethodPost, b.productPath()+"/line", b.auth(), nil)
}

// status asks for a ticket's status: a plain poll with etag "", else a long-poll of wait.
func (b *buyer) status(ctx context.Context, ticket, etag string, wait time.Duration) (answer, error) {
	h := http.Header{"Line-Ticket": {ticket}}
	if etag != "" {
		h.Set("If-None-Match", etag)
		h.Set("Prefer", "wait="+strconv.Itoa(int(wait/time.Second)))
	}
	return b.do(ctx, http.MethodGet, b.productPath()+"/line/ticket", h, nil)
}

func (b *buyer) leave(ctx context.Context, ticket string) (answer, error) {
	return b.do(ctx, http.MethodDelete, b.productPath()+"/line/ticket", http.Header{"Line-Ticket": {ticket}}, nil)
}

// order sends an order of one unit under key, with the pass when given (which names the
// customer: no token with it, as docs/api.md says), else with the customer's token; a buyer
// without a token (body mode) names itself in the body.
func (b *buyer) order(ctx context.Context, pass, key string) (answer, error) {
	h := http.Header{"Idempotency-Key": {key}}
	if pass != "" {
		h.Set("Line-Pass", pass)
	} else if b.token != "" {
		h.Set("Authorization", "Bearer "+b.token)
	}
	return b.do(ctx, http.MethodPost, "/v1/orders", h, b.orderBody())
}

// orderInLine sends an order of one unit under key with the ticket and Prefer: wait: the
// replica holds it in line until the ticket is admitted and places it then (docs/api.md, the
// line), without the round trip of hearing the admission and sending the pass.
func (b *buyer) orderInLine(ctx context.Context, ticket, key string, wait time.Duration) (answer, error) {
	h := http.Header{"Idempotency-Key": {key}, "Line-Ticket": {ticket}, "Prefer": {"wait=" + strconv.Itoa(int(wait/time.Second))}}
	if b.token != "" {
		h.Set("Authorization", "Bearer "+b.token)
	}
	return b.do(ctx, http.MethodPost, "/v1/orders", h, b.orderBody())
}

// orderBody is an order of one unit of the product; a buyer without a token (body mode) names
// itself in it.
func (b *buyer) orderBody() []byte {
	customer := ""
	if b.token == "" {
		customer = `"customer_id":"` + b.customer + `",`
	}
	return []byte(`{` + customer + `"items":[{"product_id":` + strconv.FormatInt(b.product, 10) + `,"quantity":1}]}`)
}

func newKey() string { return rand.Text() }

// gone reports whether an answer says the units are gone for this buyer: a ticket sold out or
// its sale ended, an order refused sold-out or sale-ended.
func gone(a answer) bool {
	switch {
	case a.status == http.StatusOK && (a.ticket.Status == "sold_out" || a.ticket.Status == "sale_ended"):
		return true
	case a.code == "sold-out" || a.code == "sale-ended":
		return true
	}
	return false
}

// pause waits d or until ctx ends; false if ctx ended.
func pause(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// politeRetry is how long a polite buyer waits after an answer that asks for nothing more
// precise (a 5xx without Retry-After, a broken connection).
const politeRetry = time.Second

// politeWait is the long-poll a polite buyer asks for: under HAProxy's 30 s server timeout.
const politeWait = 10 * time.Second

// politeInLine is a person with a line: arrives at arrive, joins, and sends its order with its
// ticket and Prefer: wait, which the replica holds in line and places once admitted (sent again
// when the wait runs out). A leaver instead waits with the long-poll of its status, and leaves
// on the first status after the draw (waiting or admitted: its admission must pass to the next
// at once).
func politeInLine(ctx context.Context, b *buyer, arrive time.Time, leaver bool) (o outcome) {
	defer b.record(&o)
	if !pause(ctx, time.Until(arrive)) {
		o.unresolved = true
		return o
	}
	var ticket, etag string
	for ticket == "" {
		a, err := b.join(ctx)
		switch {
		case ctx.Err() != nil:
			o.unresolved = true
			return o
		case err == nil && (a.status == http.StatusCreated || a.status == http.StatusOK):
			ticket, etag = a.ticket.Ticket, a.etag
		case err == nil && gone(a):
			o.learnt = time.Now()
			return o
		default:
			if !pause(ctx, max(a.retryAfter, politeRetry)) {
				o.unresolved = true
				return o
			}
		}
	}
	if !leaver {
		return waitInLine(ctx, b, ticket)
	}
	var pass string
	for {
		if pass != "" {
			a, err := b.order(ctx, pass, newKey())
			switch {
			case err == nil && a.status == http.StatusCreated:
				o.won = true
				return o
			case err == nil && gone(a):
				o.learnt, o.waited = time.Now(), true
				return o
			case err == nil && a.status == http.StatusConflict:
				// Admission used, expired or refused: back to the status.
				pass = ""
				continue
			}
			if !pause(ctx, max(a.retryAfter, politeRetry)) {
				o.unresolved = true
				return o
			}
			continue
		}
		a, err := b.status(ctx, ticket, etag, politeWait)
		if ctx.Err() != nil {
			o.unresolved = true
			return o
		}
		if err != nil || a.status != http.StatusOK && a.status != http.StatusNotModified {
			if !pause(ctx, max(a.retryAfter, politeRetry)) {
				o.unresolved = true
				return o
			}
			continue
		}
		if a.status == http.StatusNotModified {
			continue
		}
		etag = a.etag
		if leaver && (a.ticket.Status == "waiting" || a.ticket.Status == "admitted") {
			if _, err := b.leave(ctx, ticket); err == nil {
				o.left = true
				return o
			}
		}
		switch a.ticket.Status {
		case "admitted":
			pass = a.ticket.Pass
		case "sold_out", "sale_ended":
			o.learnt, o.waited = time.Now(), true
			return o
		case "expired", "left", "used":
			// Not what a buyer who orders at once meets; it ends here, as a person would give up.
			return o
		}
	}
}

// waitInLine orders with the ticket, waiting in line, until the order is placed or refused for
// good: sent again at once when its wait ran out (as a long-poll is), after Retry-After when
// busy or failed.
func waitInLine(ctx context.Context, b *buyer, ticket string) (o outcome) {
	defer b.record(&o)
	key := newKey()
	for {
		a, err := b.orderInLine(ctx, ticket, key, politeWait)
		switch {
		case ctx.Err() != nil:
			o.unresolved = true
			return o
		case err == nil && a.status == http.StatusCreated:
			o.won = true
			return o
		case err == nil && gone(a):
			o.learnt, o.waited = time.Now(), true
			return o
		case err == nil && a.code == "not-admitted" && a.applied != "":
			continue // the wait ran out: still in line
		case err == nil && a.status == http.StatusConflict:
			// Left, expired, used by another order: not what a buyer who waits in line
			// meets; it ends here, as a person would give up.
			return o
		}
		if !pause(ctx, max(a.retryAfter, politeRetry)) {
			o.unresolved = true
			return o
		}
	}
}

// politeNoLine is a person without a line: arrives at arrive, orders, and comes back exactly
// when Retry-After says, until it wins or hears the units are gone.
func politeNoLine(ctx context.Context, b *buyer, arrive time.Time) (o outcome) {
	defer b.record(&o)
	if !pause(ctx, time.Until(arrive)) {
		o.unresolved = true
		return o
	}
	key := newKey()
	for {
		a, err := b.order(ctx, "", key)
		switch {
		case ctx.Err() != nil:
			o.unresolved = true
			return o
		case err == nil && a.status == http.StatusCreated:
			o.won = true
			return o
		case err == nil && gone(a):
			o.learnt, o.waited = time.Now(), true
			return o
		}
		if !pause(ctx, max(a.retryAfter, 100*time.Millisecond)) {
			o.unresolved = true
			return o
		}
	}
}

// script hammers from start with no pause until it wins or hears the units are gone. With a
// line it joins and cycles through every route — join, a plain poll of its ticket, an order
// without a pass, an order with the pass when it has one; without a line it sends orders.
func script(ctx context.Context, b *buyer, start time.Time, lined bool) (o outcome) {
	defer b.record(&o)
	if !pause(ctx, time.Until(start)) {
		o.unresolved = true
		return o
	}
	var ticket, pass string
	for step := 0; ; step++ {
		if ctx.Err() != nil {
			o.unresolved = true
			return o
		}
		var a answer
		var err error
		ordered := true
		switch {
		case !lined:
			a, err = b.order(ctx, "", newKey())
		case step%4 == 0 || ticket == "":
			ordered = false
			a, err = b.join(ctx)
			if err == nil && (a.status == http.StatusCreated || a.status == http.StatusOK) {
				ticket = a.ticket.Ticket
				if a.ticket.Pass != "" {
					pass = a.ticket.Pass
				}
			}
		case step%4 == 1:
			ordered = false
			a, err = b.status(ctx, ticket, "", 0)
			if err == nil && a.status == http.StatusOK && a.ticket.Pass != "" {
				pass = a.ticket.Pass
			}
		case step%4 == 2:
			a, err = b.order(ctx, "", newKey())
		default:
			if pass == "" {
				continue
			}
			a, err = b.order(ctx, pass, newKey())
		}
		if err != nil {
			continue
		}
		if ordered && a.status == http.StatusCreated {
			o.won = true
			return o
		}
		if gone(a) {
			o.learnt, o.waited = time.Now(), lined
			return o
		}
	}
}
