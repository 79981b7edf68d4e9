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
