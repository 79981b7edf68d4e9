package stockhttp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
)

// TestFlashSaleAcrossReplicas runs a flash sale through three replicas, each with its own pools
// as separate processes would have, sharing one Postgres and one Redis: 64 clients place 600
// orders of 1..3 units against 50 units of stock. Afterwards the answers and the database must
// tell the same story: no oversell, stock conserved, one order row per 201 and none without,
// and no undersell (the sale ends with less stock than the smallest order that was refused).
func TestFlashSaleAcrossReplicas(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	replicas := []*instance{c.start(t, instanceOptions{}), c.start(t, instanceOptions{}), c.start(t, instanceOptions{})}
	const (
		initial = 50
		clients = 64
		orders  = 600
	)
	id := createProduct(t, replicas[0].URL, "flash", initial)

	var (
		mu        sync.Mutex
		confirmed = map[string]int64{} // order id → units, from 201 answers
		statuses  = map[int]int{}
		failures  []error
		next      atomic.Int64
		wg        sync.WaitGroup
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	defer client.CloseIdleConnections()
	for w := range clients {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > orders {
					return
				}
				qty := rand.Int64N(3) + 1
				base := replicas[int(n)%len(replicas)].URL
				res, err := send(context.Background(), client, request{Method: http.MethodPost, URL: base + "/v1/orders",
					Body: map[string]any{"customer_id": fmt.Sprintf("client-%d", w), "items": []map[string]any{{"product_id": id, "quantity": qty}}}})
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err)
				case res.Status == http.StatusCreated:
					var o struct {
						ID    string `json:"id"`
						Items []struct {
							Quantity int64 `json:"quantity"`
						} `json:"items"`
					}
					if err := json.Unmarshal(res.Body, &o); err != nil || len(o.Items) != 1 || o.Items[0].Quantity != qty {
						failures = append(failures, fmt.Errorf("bad 201 body %s: %v", res.Body, err))
					} else if _, dup := confirmed[o.ID]; dup {
						failures = append(failures, fmt.Errorf("order %s confirmed twice", o.ID))
					} else {
						confirmed[o.ID] = qty
					}
				case res.Status == http.StatusConflict, res.Status == http.StatusTooManyRequests:
				default:
					failures = append(failures, fmt.Errorf("unexpected status %d: %s", res.Status, res.Body))
				}
				if err == nil {
					statuses[res.Status]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failed requests, first: %v", len(failures), failures[0])
	}

	var units int64
	for _, q := range confirmed {
		units += q
	}
	a := audit(t, replicas[1].URL, id)
	t.Logf("statuses %v; confirmed %d orders, %d units; audit %+v", statuses, len(confirmed), units, a)
	if units > initial {
		t.Errorf("confirmed %d units of %d: oversold", units, initial)
	}
	if a.Stock != initial-units || a.Sold != units || !a.Consistent {
		t.Errorf("audit %+v does not match %d confirmed units", a, units)
	}
	if a.Stock >= 3 {
		t.Errorf("stock left %d: every order size (1..3) should have found stock, undersold", a.Stock)
	}

	rows, err := replicas[2].Pool.Query(context.Background(), `SELECT o.id, i.quantity FROM orders o JOIN order_items i ON i.order_id = o.id WHERE i.product_id = $1`, id)
	if err != nil {
		t.Fatalf("list orders: %v", err)
	}
	inDB := map[string]int64{}
	for rows.Next() {
		var oid uuid.UUID
		var q int64
		if err := rows.Scan(&oid, &q); err != nil {
			t.Fatalf("scan: %v", err)
		}
		inDB[oid.String()] = q
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list orders: %v", err)
	}
	for oid, q := range confirmed {
		if inDB[oid] != q {
			t.Errorf("201 for order %s (%d units) but the database has %d units", oid, q, inDB[oid])
		}
	}
	for oid := range inDB {
		if _, ok := confirmed[oid]; !ok {
			t.Errorf("order %s exists without a 201", oid)
		}
	}
}

// TestOneCustomerCannotHoardHolds is the hoarding of issue #31 as a race: a product of 30 units
// sold with a hold and no limit per customer, and one customer sending 30 orders of one unit at
// once through three replicas. Exactly the cap on a customer's open holds is held — by default
// one full order, STOCKSVC_MAX_QUANTITY (10) — and every other order is refused hold-limit, so
// another buyer still gets the rest. A cancelled hold gives its units back to the cap.
func TestOneCustomerCannotHoardHolds(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	replicas := []*instance{c.start(t, instanceOptions{}), c.start(t, instanceOptions{}), c.start(t, instanceOptions{})}
	const (
		units  = 30
		orders = 30
		limit  = 10 // the default: one order of STOCKSVC_MAX_QUANTITY's default
	)
	p := createRuledProduct(t, replicas[0].URL, "hoard", units, map[string]any{"hold_for": 600})

	var (
		mu       sync.Mutex
		held     []string
		refusals []response
		failures []error
		wg       sync.WaitGroup
		start    = make(chan struct{})
	)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: orders}}
	defer client.CloseIdleConnections()
	for i := range orders {
		wg.Go(func() {
			<-start
			req := request{Method: http.MethodPost, URL: replicas[i%len(replicas)].URL + "/v1/orders",
				Body: newOrder("hoarder", orderItem{p.ID, 1})}
			for {
				res, err := send(context.Background(), client, req)
				mu.Lock()
				switch {
				case err != nil:
					failures = append(failures, err)
				case res.Status == http.StatusTooManyRequests:
					mu.Unlock()
					continue // nothing was sold: the hoarder tries again
				case res.Status == http.StatusCreated:
					var o struct {
						ID     string `json:"id"`
						Status string `json:"status"`
					}
					if err := json.Unmarshal(res.Body, &o); err != nil || o.Status != "held" {
						failures = append(failures, fmt.Errorf("201 %s, want a held order", res.Body))
					}
					held = append(held, o.ID)
				default:
					refusals = append(refusals, res)
				}
				mu.Unlock()
				return
			}
		})
	}
	close(start)
	wg.Wait()
	if len(failures) > 0 {
		t.Fatalf("%d failed requests, first: %v", len(failures), failures[0])
	}
	if len(held) != limit || len(refusals) != orders-limit {
		t.Fatalf("the hoarder holds %d orders and was refused %d, want exactly %d held and %d refused", len(held), len(refusals), limit, orders-limit)
	}
	for _, res := range refusals {
		prob := wantProblem(t, res, "hold-limit", "/v1/orders")
		if prob.ProductID != p.ID || prob.MaxHeldPerCustomer != limit || prob.Held == nil || *prob.Held != limit || prob.Requested != 1 {
			t.Errorf("refusal %s, want the product, its cap %d, %d held and 1 requested", res.Body, limit, limit)
		}
	}
	if a := audit(t, replicas[1].URL, p.ID); a.Held != limit || a.Stock != units-limit || !a.Consistent {
		t.Errorf("audit %+v, want %d held and %d left", a, limit, units-limit)
	}
	// Everyone else still buys: the rest is another customer's to hold.
	var other orderBody
	wantJSON(t, postOrder(t, replicas[2].URL, newOrder("buyer", orderItem{p.ID, limit}), nil), http.StatusCreated, &other)
	// One hold cancelled: its unit is back, in the stock and under the hoarder's cap.
	res := call(t, request{Method: http.MethodPost, URL: replicas[0].URL + "/v1/orders/" + held[0] + "/cancel"})
	wantJSON(t, res, http.StatusOK, nil)
	wantJSON(t, postOrder(t, replicas[1].URL, newOrder("hoarder", orderItem{p.ID, 1}), nil), http.StatusCreated, nil)
	wantProblem(t, postOrder(t, replicas[2].URL, newOrder("hoarder", orderItem{p.ID, 1}), nil), "hold-limit", "/v1/orders")
}
