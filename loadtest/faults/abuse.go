package faults

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

// Clients that do not play by the rules: slow ones that hold connections open, and ones that
// send what no API should accept. Neither may stop the sale.

// slowloris opens connections that send a request a byte at a time — half of them stall in
// the headers, half in a declared body — three quarters through the balancer and a quarter
// straight to the victim replica (where the replica's own read timeouts are what protects
// it). It tallies how many the server ended before the drill did.
func slowloris(ctx context.Context, d *drillEnv) error {
	const conns = 200
	length := 8 * time.Second
	d.event("%d slow connections for %v", conns, length)
	ctx, cancel := context.WithTimeout(ctx, length)
	defer cancel()
	var closedEarly, opened atomic.Int64
	var wg sync.WaitGroup
	for i := range conns {
		port := d.c.Front
		if i%8 >= 6 {
			port = d.c.Replicas[d.victim].Port
		}
		slowBody := i%2 == 1
		wg.Go(func() {
			var dialer net.Dialer
			conn, err := dialer.DialContext(ctx, "tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err != nil {
				return
			}
			opened.Add(1)
			defer conn.Close()
			// The server's answer, when it gives up on us, ends the trickle.
			gone := make(chan struct{})
			go func() {
				_, _ = io.Copy(io.Discard, conn)
				close(gone)
			}()
			head := "POST /v1/orders HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
			var trickle []byte
			if slowBody {
				_, _ = conn.Write([]byte(head + "Content-Length: 100000\r\n\r\n"))
				trickle = bytes.Repeat([]byte(" "), 1000)
			} else {
				_, _ = conn.Write([]byte(head))
				trickle = []byte(strings.Repeat("X-Slow: y\r\n", 100))
			}
			tick := time.NewTicker(300 * time.Millisecond)
			defer tick.Stop()
			for _, b := range trickle {
				select {
				case <-ctx.Done():
					conn.Close()
					<-gone
					return
				case <-gone:
					closedEarly.Add(1)
					return
				case <-tick.C:
					if _, err := conn.Write([]byte{b}); err != nil {
						closedEarly.Add(1)
						conn.Close()
						<-gone
						return
					}
				}
			}
		})
	}
	wg.Wait()
	d.event("slow connections closed: %d opened, %d ended by the server first", opened.Load(), closedEarly.Load())
	d.note("%d slow connections opened, %d ended by the server within %v", opened.Load(), closedEarly.Load(), length)
	return nil
}

// keptSelling: orders for the hot product were confirmed while the fault was in force.
func keptSelling(d *drillEnv, ops []*model.Op, a availability) (failed, notes []string) {
	n := 0
	for _, p := range ops {
		if p.In.Kind != model.KindOrder || p.In.Product != d.hot || p.Out.Outcome != model.Confirmed {
			continue
		}
		for _, w := range d.faults {
			if p.Return >= w.start && p.Return <= w.end {
				n++
				break
			}
		}
	}
	notes = append(notes, fmt.Sprintf("%d hot orders confirmed during the fault", n))
	if n == 0 {
		failed = append(failed, "no order was confirmed during the fault: the service stopped selling")
	}
	if a.failedAttempts > 0 {
		failed = append(failed, fmt.Sprintf("%d of %d requests of the sale failed (%s)", a.failedAttempts, a.attempts, a.failedKinds))
	}
	return failed, notes
}

// badRequest is one kind of malformed request.
type badRequest struct {
	name        string
	method      string
	path        string // %d is the hot product's id
	contentType string
	admin       bool
	// anonymous sends an order without the customer's token, which every other order case
	// carries so that its body is what the service judges, not the missing credential.
	anonymous bool
	header    map[string]string
	body      func(hot string) string // given the hot product's id
	raw       bool                    // body is the whole request, sent on a bare connection
}

// badCustomer is the customer the malformed orders are sent for, with its token.
const badCustomer = "bad"

func badRequests() []badRequest {
	order := func(s string) func(string) string {
		return func(hot string) string { return strings.Replace(s, "%d", hot, 1) }
	}
	return []badRequest{
		{name: "oversized body", method: "POST", path: "/v1/orders", contentType: "application/json", body: func(hot string) string {
			return `{"customer_id":"` + strings.Repeat("a", 1<<20+1024) + `","items":[{"product_id":` + hot + `,"quantity":1}]}`
		}},
		{name: "truncated JSON", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":"bad","items":[{"product_id":%d,`)},
		{name: "not JSON", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`customer=bad&product=%d`)},
		{name: "wrong types", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":5,"items":{"product_id":"%d"}}`)},
		{name: "huge numbers", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":1e400}]}`)},
		{name: "huge integer", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":99999999999999999999999}]}`)},
		{name: "negative quantity", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":-3}]}`)},
		{name: "unknown field", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":1}],"price":0}`)},
		{name: "invalid UTF-8", method: "POST", path: "/v1/orders", contentType: "application/json", body: order("{\"customer_id\":\"bad\xff\xfe\",\"items\":[{\"product_id\":%d,\"quantity\":1}]}")},
		{name: "NUL in customer", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":"bad\u0000","items":[{"product_id":%d,"quantity":1}]}`)},
		{name: "trailing data", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":1}]} {}`)},
		{name: "deep nesting", method: "POST", path: "/v1/orders", contentType: "application/json", body: func(hot string) string {
			return strings.Repeat("[", 100000) + hot + strings.Repeat("]", 100000)
		}},
		{name: "null", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(`null`)},
		{name: "empty body", method: "POST", path: "/v1/orders", contentType: "application/json", body: order(``)},
		{name: "text/plain", method: "POST", path: "/v1/orders", contentType: "text/plain", body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":1}]}`)},
		// Go's client will not send a control character in a header: this one goes raw.
		{name: "control character in key", raw: true, body: func(hot string) string {
			body := `{"customer_id":"bad","items":[{"product_id":` + hot + `,"quantity":1}]}`
			return "POST /v1/orders HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nIdempotency-Key: a\x01b\r\n" +
				"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body
		}},
		{name: "overlong key", method: "POST", path: "/v1/orders", contentType: "application/json", header: map[string]string{"Idempotency-Key": strings.Repeat("k", 300)},
			body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":1}]}`)},
		{name: "restock: huge quantity", method: "POST", path: "/v1/products/%d/restock", contentType: "application/json", admin: true, body: order(`{"quantity":1e30}`)},
		{name: "restock: negative", method: "POST", path: "/v1/products/%d/restock", contentType: "application/json", admin: true, body: order(`{"quantity":-5}`)},
		{name: "restock: not JSON", method: "POST", path: "/v1/products/%d/restock", contentType: "application/json", admin: true, body: order(`five`)},
		{name: "restock: no token", method: "POST", path: "/v1/products/%d/restock", contentType: "application/json", body: order(`{"quantity":5}`)},
		{name: "order: no token", method: "POST", path: "/v1/orders", contentType: "application/json", anonymous: true,
			body: order(`{"customer_id":"bad","items":[{"product_id":%d,"quantity":1}]}`)},
		{name: "order: another customer's id", method: "POST", path: "/v1/orders", contentType: "application/json",
			body: order(`{"customer_id":"someone-else","items":[{"product_id":%d,"quantity":1}]}`)},
		{name: "product id overflow", method: "GET", path: "/v1/products/99999999999999999999999%d"},
		{name: "garbage request line", raw: true, body: order("GARBAGE\x00\xff %d\r\n\r\n")},
		{name: "header without colon", raw: true, body: order("GET /v1/products/%d HTTP/1.1\r\nHost: x\r\nbroken header\r\n\r\n")},
	}
}

// abuseTally counts the answers to malformed requests, per kind and status (0: no answer).
type abuseTally struct {
	mu     sync.Mutex
	counts map[string]map[int]int
}

func (t *abuseTally) add(name string, status int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.counts == nil {
		t.counts = map[string]map[int]int{}
	}
	if t.counts[name] == nil {
		t.counts[name] = map[int]int{}
	}
	t.counts[name][status]++
}

// badInput sends malformed requests, 40 a second in turn, through the balancer, with the
// hot product's id in them: if any were taken for a purchase or a restock, the history would
// show stock moving that nobody accounts for.
func badInput(ctx context.Context, d *drillEnv) error {
	cases := badRequests()
	d.abuse = &abuseTally{}
	client := &http.Client{Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	d.event("malformed requests for 5s")
	deadline := time.Now().Add(5 * time.Second)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := 0; time.Now().Before(deadline); i++ {
		select {
		case <-ctx.Done():
			wg.Wait()
			return ctx.Err()
		case <-tick.C:
		}
		c := cases[i%len(cases)]
		wg.Go(func() { d.abuse.add(c.name, sendBad(ctx, client, d, c)) })
	}
	wg.Wait()
	d.event("malformed requests stopped")
	return nil
}

// sendBad sends one malformed request and returns the status of its answer (0: none).
func sendBad(ctx context.Context, client *http.Client, d *drillEnv, c badRequest) int {
	hot := strconv.FormatInt(d.hot, 10)
	addr := "127.0.0.1:" + strconv.Itoa(d.c.Front)
	if c.raw {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return 0
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte(c.body(hot))); err != nil {
			return 0
		}
		res, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			return 0
		}
		res.Body.Close()
		return res.StatusCode
	}
	var rd io.Reader
	if c.body != nil {
		rd = strings.NewReader(c.body(hot))
	}
	req, err := http.NewRequestWithContext(ctx, c.method, "http://"+addr+strings.Replace(c.path, "%d", hot, 1), rd)
	if err != nil {
		return 0
	}
	if c.contentType != "" {
		req.Header.Set("Content-Type", c.contentType)
	}
	switch {
	case c.admin:
		req.Header.Set("Authorization", "Bearer "+d.c.Token)
	case c.path == "/v1/orders" && !c.anonymous && d.identity != nil:
		token, err := d.identity.Token(badCustomer)
		if err != nil {
			return 0
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for k, v := range c.header {
		req.Header[k] = []string{v}
	}
	res, err := client.Do(req)
	if err != nil {
		return 0
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode
}

// badInputAnswers: every malformed request got a 4xx, and the sale went on meanwhile.
func badInputAnswers(d *drillEnv, ops []*model.Op, a availability) (failed, notes []string) {
	failed, notes = keptSelling(d, ops, a)
	if d.abuse == nil {
		return append(failed, "no malformed request was sent"), notes
	}
	var names []string
	for name := range d.abuse.counts {
		names = append(names, name)
	}
	slices.Sort(names)
	total := 0
	var summary []string
	for _, name := range names {
		var parts []string
		for status, n := range d.abuse.counts[name] {
			total += n
			parts = append(parts, fmt.Sprintf("%d×%d", n, status))
			if status < 400 || status >= 500 {
				failed = append(failed, fmt.Sprintf("%s: %d answered %d (want 4xx)", name, n, status))
			}
		}
		slices.Sort(parts)
		summary = append(summary, name+" "+strings.Join(parts, ","))
	}
	notes = append(notes, fmt.Sprintf("%d malformed requests: %s", total, strings.Join(summary, "; ")))
	return failed, notes
}
