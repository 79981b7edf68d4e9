// Package client is the drills' recording HTTP client (etcd's robustness suite has one too):
// every operation a drill makes goes through a Client, which records it in a model.Recorder
// with each attempt's invocation and answer times and what it was told, so that the
// linearizability checker and the SQL verdict can judge what the clients were told.
package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// Client makes the operations of a drill and records each one: every attempt's
// invocation and answer times and what it was told. It retries an order with the same
// Idempotency-Key until an answer says what happened, within a budget; so does it a restock.
type Client struct {
	bases   []string // where requests go, in turn: the balancer, or the replicas themselves
	token   string
	http    *http.Client
	rec     *model.Recorder
	tag     string // starts every customer id, unique to the run
	retries RetryPolicy
	// bearer, when set, returns the token a customer's orders carry (the replicas verify
	// tokens); nil sends the customer in the body only.
	Bearer func(customer string) (string, error)

	mu       sync.Mutex
	next     int // round robin over bases
	seq      int
	lanes    []bool // lanes[i]: client id i is busy or retired
	retired  int
	inflight sync.WaitGroup
}

// RetryPolicy bounds how long an operation keeps asking.
type RetryPolicy struct {
	Attempts int           // most attempts per operation
	Budget   time.Duration // no new attempt once this long has passed since the first
	Pause    time.Duration // first pause between attempts, doubled each time, at most 1s
}

func New(bases []string, token, tag string, timeout time.Duration, rec *model.Recorder, retries RetryPolicy) *Client {
	transport := &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 0, IdleConnTimeout: 30 * time.Second}
	return &Client{bases: bases, token: token, tag: tag, rec: rec, retries: retries,
		http: &http.Client{Timeout: timeout, Transport: transport}}
}

func (c *Client) Close() { c.http.CloseIdleConnections() }

func (c *Client) Base() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.bases[c.next%len(c.bases)]
	c.next++
	return b
}

// lane takes the lowest free client id, for the visualisation's rows.
func (c *Client) lane() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, busy := range c.lanes {
		if !busy {
			c.lanes[i] = true
			return i
		}
	}
	c.lanes = append(c.lanes, true)
	return len(c.lanes) - 1
}

// freeLane gives a lane back, unless its operation's outcome is unknown: that one may still
// take effect, so its row stays open to the end.
func (c *Client) freeLane(id int, o model.Outcome) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if o == model.Unknown {
		c.retired++
		return
	}
	c.lanes[id] = false
}

func (c *Client) customer() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	return c.tag + "-" + strconv.Itoa(c.seq)
}

// answer is one HTTP exchange as the client saw it.
type answer struct {
	status      int
	contentType string
	body        []byte
	retryAfter  time.Duration
	err         error
	resent      bool   // Go's transport sent the request a second time, on a new connection
	server      string // the replica that answered, when the balancer says (cluster's X-Served-By)
	etag        string // the ETag, for a line ticket's long-poll (line.go)
}

func (c *Client) do(ctx context.Context, method, url string, body []byte, header map[string]string) answer {
	return c.send(ctx, method, url, body, header, false)
}

// send makes one request. Go's transport silently sends a request again on a new connection
// when a reused one breaks before the answer begins and the request looks replayable — which a
// request with an Idempotency-Key does. Unless resend, that is turned off: every request the
// service sees is then an attempt the history records. With resend, it is left on, as an
// ordinary Go client has it, and the answer says whether it happened.
func (c *Client) send(ctx context.Context, method, url string, body []byte, header map[string]string, resend bool) answer {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	var conns atomic.Int32
	if resend {
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(httptrace.GotConnInfo) { conns.Add(1) }})
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return answer{err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
		if !resend {
			req.GetBody = nil // without it, the transport cannot send the body again
		}
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := c.http.Do(req)
	if err != nil {
		return answer{err: err, resent: conns.Load() > 1}
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	if err != nil {
		return answer{err: fmt.Errorf("read answer: %w", err), resent: conns.Load() > 1}
	}
	a := answer{status: res.StatusCode, contentType: res.Header.Get("Content-Type"), body: b, resent: conns.Load() > 1,
		server: res.Header.Get(cluster.ServedBy), etag: res.Header.Get("ETag")}
	if s, err := strconv.Atoi(res.Header.Get("Retry-After")); err == nil && s > 0 {
		a.retryAfter = time.Duration(s) * time.Second
	}
	return a
}

// fromReplica tells a replica's answer (JSON, problem+json) from the balancer's own (HTML).
func (a answer) fromReplica() bool { return strings.Contains(a.contentType, "json") }

// problemCode is the "code" of a problem+json answer.
func (a answer) problemCode() string {
	var p struct {
		Code string `json:"code"`
	}
	if strings.Contains(a.contentType, "problem+json") {
		_ = json.Unmarshal(a.body, &p)
	}
	return p.Code
}

// attemptKind is what one attempt says about its operation.
type attemptKind uint8

const (
	attemptDone       attemptKind = iota + 1 // the answer says what happened (201, sold-out, 200)
	attemptNoEffect                          // nothing happened (429, 409 in flight, the balancer had no replica)
	attemptUnknown                           // may have happened (503 from a replica, 502, 504, no answer)
	attemptUnexpected                        // an answer the contract does not allow here
)

// classify reads an answer to a write. A 503 from the balancer itself means no replica was
// there to take the request, so nothing happened; a 503 from a replica may follow a commit
// whose answer was lost (Postgres went away mid-commit), so its outcome is unknown.
func classify(a answer, okStatus int) attemptKind { return classifyCodes(a, okStatus, RuleCodes) }

// classifyCodes is classify with the 409 codes that decide the operation (done).
func classifyCodes(a answer, okStatus int, done map[string]bool) attemptKind {
	switch {
	case a.err != nil || a.status == 0:
		return attemptUnknown
	case a.status == okStatus:
		return attemptDone
	case a.status == http.StatusConflict && done[a.problemCode()]:
		return attemptDone
	case a.status == http.StatusTooManyRequests, a.status == http.StatusConflict && a.problemCode() == "idempotency-key-in-flight":
		return attemptNoEffect
	case a.status == http.StatusServiceUnavailable && !a.fromReplica():
		return attemptNoEffect
	case a.status >= 500:
		return attemptUnknown
	}
	return attemptUnexpected
}

// RuleCodes are the refusals that decide an order without selling it: sold out, and the sale
// rules (issue #20). None is stored under the order's key (but sold-out), and each is final for
// the request as it was sent.
var RuleCodes = map[string]bool{"sold-out": true, "sale-not-open": true, "sale-ended": true, "customer-limit": true}

// refusalOutcome is what a decisive refusal means for the model.
func refusalOutcome(code string) model.Outcome {
	switch code {
	case "sale-not-open":
		return model.NotOpen
	case "sale-ended":
		return model.Ended
	case "customer-limit":
		return model.OverLimit
	}
	return model.SoldOut
}

// write runs one logical write: attempts until one says what happened, or the budget ends;
// with refusalEnds, also when a replica refused it (429), as a buyer who believes "nothing
// was sold" walks away. It returns the last answer, its kind, and whether some attempt's
// outcome was unknown.
func (c *Client) write(ctx context.Context, p *model.Op, send func(ctx context.Context) answer, okStatus int, refusalEnds bool) (answer, attemptKind, bool) {
	return c.writeCodes(ctx, p, send, okStatus, refusalEnds, RuleCodes)
}

// writeCodes is write with the 409 codes that decide the operation (done).
func (c *Client) writeCodes(ctx context.Context, p *model.Op, send func(ctx context.Context) answer, okStatus int, refusalEnds bool,
	done map[string]bool) (answer, attemptKind, bool) {
	pause := c.retries.Pause
	var last answer
	unknown := false
	for n := 1; ; n++ {
		start := c.rec.Now()
		a := send(ctx)
		end := c.rec.Now()
		kind := classifyCodes(a, okStatus, done)
		at := model.Attempt{Start: start, End: end, Status: a.status, Code: a.problemCode(), Replica: a.fromReplica(), Resent: a.resent, Server: a.server}
		if a.err != nil {
			at.Err = ShortErr(a.err)
		}
		p.Attempts = append(p.Attempts, at)
		last = a
		if kind == attemptUnknown {
			unknown = true
		}
		if kind == attemptDone || kind == attemptUnexpected || n >= c.retries.Attempts || refusalEnds && kind == attemptNoEffect && a.fromReplica() ||
			c.rec.Now()-p.Invoke+pause > c.retries.Budget || ctx.Err() != nil {
			return last, kind, unknown
		}
		wait := pause
		if a.retryAfter > 0 {
			wait = min(a.retryAfter, time.Second)
		}
		// Jitter keeps retries of a crowd from arriving together.
		wait = wait/2 + rand.N(wait/2+1)
		select {
		case <-ctx.Done():
			return last, kind, unknown
		case <-time.After(wait):
		}
		pause = min(2*pause, time.Second)
	}
}

func ShortErr(err error) string {
	var s string
	switch {
	case errors.Is(err, context.DeadlineExceeded) || strings.Contains(err.Error(), "Client.Timeout"):
		s = "timeout"
	case strings.Contains(err.Error(), "connection refused"):
		s = "connection refused"
	case strings.Contains(err.Error(), "connection reset"):
		s = "connection reset"
	case strings.Contains(err.Error(), "EOF"):
		s = "EOF"
	default:
		s = err.Error()
	}
	return s
}

// order buys qty units of product and records the operation. Its customer id is unique, so
// that the run can later find the order in the database whatever the client was told.
func (c *Client) Order(ctx context.Context, product, qty int64) *model.Op {
	return c.OrderVia(ctx, "", product, qty)
}

// orderVia is order with the first attempt sent to base (a replica, say) rather than in turn;
// retries go the usual way.
func (c *Client) OrderVia(ctx context.Context, base string, product, qty int64) *model.Op {
	return c.place(ctx, product, qty, orderStyle{base: base})
}

// orderAs is order for a customer who may order again (a product's limit counts their
// units): the run finds the order by its Idempotency-Key.
func (c *Client) OrderAs(ctx context.Context, customer string, product, qty int64) *model.Op {
	return c.place(ctx, product, qty, orderStyle{customer: customer})
}

// buy is the order of a buyer in a closed loop (kill-replica-rush), as issue #18 found the
// refusals for sold keys: one unit; a 429 ends it (the buyer believes nothing was sold and
// moves on); a lost answer is asked again with the same key; and Go's transport may send a
// request again by itself when its connection breaks, as it does for any Go client.
func (c *Client) Buy(ctx context.Context, product int64) *model.Op {
	return c.place(ctx, product, 1, orderStyle{resend: true, refusalEnds: true})
}

// orderStyle is how a client places an order.
type orderStyle struct {
	base        string // where the first attempt goes; "" takes the next base in turn
	resend      bool   // leave Go's own resends on (see send)
	refusalEnds bool   // a 429 ends the operation (see write)
	customer    string // who orders; "" makes a customer unique to the operation
	pass        string // the line's pass (Line-Pass), for a lined product (line.go)
}

// place makes an order of qty units of product and records the operation.
func (c *Client) place(ctx context.Context, product, qty int64, style orderStyle) *model.Op {
	customer := style.customer
	if customer == "" {
		customer = c.customer()
	}
	p := &model.Op{Client: c.lane(), In: model.Input{Kind: model.KindOrder, Product: product, Quantity: qty}, Customer: customer, Key: uuid.NewString()}
	defer func() { c.freeLane(p.Client, p.Out.Outcome) }()
	body, _ := json.Marshal(map[string]any{"customer_id": p.Customer, "items": []map[string]int64{{"product_id": product, "quantity": qty}}})
	header := map[string]string{"Idempotency-Key": p.Key}
	if style.pass != "" {
		header["Line-Pass"] = style.pass
	}
	if c.Bearer != nil {
		token, err := c.Bearer(p.Customer)
		if err != nil {
			// No request was sent: the operation did nothing.
			p.Invoke, p.Return = c.rec.Now(), c.rec.Now()
			p.Attempts = []model.Attempt{{Start: p.Invoke, End: p.Return, Err: "mint token: " + err.Error()}}
			p.Out = model.Output{Outcome: model.Refused}
			c.rec.Add(p)
			return p
		}
		header["Authorization"] = "Bearer " + token
	}
	p.Invoke = c.rec.Now()
	base := style.base
	last, kind, unknown := c.write(ctx, p, func(ctx context.Context) answer {
		to := base
		if to == "" {
			to = c.Base()
		}
		base = ""
		return c.send(ctx, http.MethodPost, to+"/v1/orders", body, header, style.resend)
	}, http.StatusCreated, style.refusalEnds)
	p.Return = c.rec.Now()
	switch {
	case kind == attemptDone && last.status == http.StatusCreated:
		var o struct {
			ID        string     `json:"id"`
			Status    string     `json:"status"`
			ExpiresAt *time.Time `json:"expires_at"`
		}
		_ = json.Unmarshal(last.body, &o)
		p.Out, p.OrderID = model.Output{Outcome: model.Confirmed}, o.ID
		if o.Status == string(model.StatusHeld) {
			// A hold (issue #21): its units are taken until it is confirmed, cancelled or expires.
			p.Out.Outcome, p.Hold = model.Held, true
			if o.ExpiresAt != nil {
				p.Expires = o.ExpiresAt.Sub(c.rec.Start)
			}
		}
	case kind == attemptDone:
		var so struct {
			Available *int64 `json:"available"`
		}
		_ = json.Unmarshal(last.body, &so)
		p.Out = model.Output{Outcome: refusalOutcome(last.problemCode())}
		if p.Out.Outcome == model.SoldOut && so.Available != nil {
			p.Out.Available, p.Out.HasAvailable = *so.Available, true
		}
	case unknown:
		p.Out = model.Output{Outcome: model.Unknown}
	default:
		p.Out = model.Output{Outcome: model.Refused}
	}
	c.rec.Add(p)
	return p
}

// restock adds qty units, with an Idempotency-Key kept across its retries: a restock is one
// operation however often it is sent. (A service that ignores the key and adds the stock once
// per attempt fails the check whenever an attempt it took was answered ambiguously.)
func (c *Client) Restock(ctx context.Context, product, qty int64) *model.Op {
	p := &model.Op{Client: c.lane(), In: model.Input{Kind: model.KindRestock, Product: product, Quantity: qty}}
	defer func() { c.freeLane(p.Client, p.Out.Outcome) }()
	body, _ := json.Marshal(map[string]int64{"quantity": qty})
	header := map[string]string{"Idempotency-Key": uuid.NewString(), "Authorization": "Bearer " + c.token}
	p.Invoke = c.rec.Now()
	last, kind, unknown := c.write(ctx, p, func(ctx context.Context) answer {
		return c.do(ctx, http.MethodPost, fmt.Sprintf("%s/v1/products/%d/restock", c.Base(), product), body, header)
	}, http.StatusOK, false)
	p.Return = c.rec.Now()
	switch {
	case kind == attemptDone && last.status == http.StatusOK:
		var prod struct {
			Stock int64 `json:"stock"`
		}
		_ = json.Unmarshal(last.body, &prod)
		p.Out = model.Output{Outcome: model.Confirmed, Stock: prod.Stock}
	case unknown:
		p.Out = model.Output{Outcome: model.Unknown}
	default:
		p.Out = model.Output{Outcome: model.Refused}
	}
	c.rec.Add(p)
	return p
}

// read asks once for product's stock. A read that fails observed nothing: it is recorded
// (for availability) but left out of the checked history.
func (c *Client) Read(ctx context.Context, product int64) *model.Op {
	p := &model.Op{Client: c.lane(), In: model.Input{Kind: model.KindRead, Product: product}}
	defer func() { c.freeLane(p.Client, p.Out.Outcome) }()
	// A read that waits long observes little (its answer may come from any moment of the
	// wait) and makes the checker's search wide: reads give up after a second.
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	p.Invoke = c.rec.Now()
	a := c.do(ctx, http.MethodGet, fmt.Sprintf("%s/v1/products/%d", c.Base(), product), nil, nil)
	p.Return = c.rec.Now()
	at := model.Attempt{Start: p.Invoke, End: p.Return, Status: a.status, Code: a.problemCode(), Replica: a.fromReplica(), Server: a.server}
	if a.err != nil {
		at.Err = ShortErr(a.err)
	}
	p.Attempts = []model.Attempt{at}
	var prod struct {
		Stock *int64 `json:"stock"`
	}
	if a.status == http.StatusOK && json.Unmarshal(a.body, &prod) == nil && prod.Stock != nil {
		p.Out = model.Output{Outcome: model.Confirmed, Stock: *prod.Stock}
	} else {
		p.Out = model.Output{Outcome: model.Refused}
	}
	c.rec.Add(p)
	return p
}

// SaleRules are a product's sale rules as the API takes them; zero values are absent.
type SaleRules struct {
	Opens, Ends time.Time
	Limit       int64
	HoldFor     int64 // hold_for in seconds (issue #21): orders are held this long
}

// createProduct creates a product through the API and records its creation, the state the
// model starts from.
func (c *Client) CreateProduct(ctx context.Context, sku string, stock int64) (int64, error) {
	return c.CreateSale(ctx, sku, stock, SaleRules{})
}

// createSale creates a product with sale rules and records its creation with the rules the
// service answered: the window's bounds, Postgres's timestamps, moved onto the recorder's
// clock (one machine, one wall clock).
func (c *Client) CreateSale(ctx context.Context, sku string, stock int64, rules SaleRules) (int64, error) {
	p := &model.Op{Client: c.lane(), In: model.Input{Kind: model.KindCreate}}
	defer func() { c.freeLane(p.Client, model.Confirmed) }()
	fields := map[string]any{"sku": sku, "name": "drill " + sku, "stock": stock}
	if !rules.Opens.IsZero() {
		fields["sale_starts_at"] = rules.Opens.UTC().Format(time.RFC3339Nano)
	}
	if !rules.Ends.IsZero() {
		fields["sale_ends_at"] = rules.Ends.UTC().Format(time.RFC3339Nano)
	}
	if rules.Limit > 0 {
		fields["max_per_customer"] = rules.Limit
	}
	if rules.HoldFor > 0 {
		fields["hold_for"] = rules.HoldFor
	}
	body, _ := json.Marshal(fields)
	p.Invoke = c.rec.Now()
	a := c.do(ctx, http.MethodPost, c.Base()+"/v1/products", body, map[string]string{"Authorization": "Bearer " + c.token})
	p.Return = c.rec.Now()
	if a.err != nil || a.status != http.StatusCreated {
		return 0, fmt.Errorf("create product %s: %d %s %v", sku, a.status, a.body, a.err)
	}
	var prod struct {
		ID             int64      `json:"id"`
		Stock          int64      `json:"stock"`
		SaleStartsAt   *time.Time `json:"sale_starts_at"`
		SaleEndsAt     *time.Time `json:"sale_ends_at"`
		MaxPerCustomer *int64     `json:"max_per_customer"`
	}
	if err := json.Unmarshal(a.body, &prod); err != nil {
		return 0, fmt.Errorf("create product %s: %w", sku, err)
	}
	p.In.Product = prod.ID
	p.Out = model.Output{Outcome: model.Confirmed, Stock: prod.Stock}
	if prod.SaleStartsAt != nil {
		p.Out.Rules.Opens, p.Out.Rules.HasOpens = prod.SaleStartsAt.Sub(c.rec.Start), true
	}
	if prod.SaleEndsAt != nil {
		p.Out.Rules.Ends, p.Out.Rules.HasEnds = prod.SaleEndsAt.Sub(c.rec.Start), true
	}
	if prod.MaxPerCustomer != nil {
		p.Out.Rules.Limit = *prod.MaxPerCustomer
	}
	p.Attempts = []model.Attempt{{Start: p.Invoke, End: p.Return, Status: a.status, Replica: true}}
	c.rec.Add(p)
	return prod.ID, nil
}

// endSale ends product's sale now (an admin route; Postgres's clock dates the end) and records
// it: the model's end of the window, somewhere within the request.
func (c *Client) EndSale(ctx context.Context, product int64) *model.Op {
	p := &model.Op{Client: c.lane(), In: model.Input{Kind: model.KindClose, Product: product}}
	defer func() { c.freeLane(p.Client, p.Out.Outcome) }()
	header := map[string]string{"Idempotency-Key": uuid.NewString(), "Authorization": "Bearer " + c.token}
	p.Invoke = c.rec.Now()
	_, kind, unknown := c.write(ctx, p, func(ctx context.Context) answer {
		return c.do(ctx, http.MethodPost, fmt.Sprintf("%s/v1/products/%d/sale/end", c.Base(), product), nil, header)
	}, http.StatusOK, false)
	p.Return = c.rec.Now()
	switch {
	case kind == attemptDone:
		p.Out = model.Output{Outcome: model.Confirmed}
	case unknown:
		p.Out = model.Output{Outcome: model.Unknown}
	default:
		p.Out = model.Output{Outcome: model.Refused}
	}
	c.rec.Add(p)
	return p
}

// go runs f as one of the client's operations; wait waits for all of them.
func (c *Client) Go(f func()) {
	c.inflight.Go(f)
}

func (c *Client) Wait() { c.inflight.Wait() }

// Tag starts every customer id the client makes: unique to the run.
func (c *Client) Tag() string { return c.tag }
