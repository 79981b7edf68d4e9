package stockhttp_test

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The line across replicas sharing Postgres and Redis, as separate processes would.

// TestLineOpeningAcrossReplicas: customers join on one replica and long-poll on others; the
// opening draws them once; the admitted buy with their passes; once the last unit sells,
// every ticket still in line is told sold out — counted — on whichever replica it asks.
func TestLineOpeningAcrossReplicas(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	replicas := []*instance{c.start(t, instanceOptions{}), c.start(t, instanceOptions{}), c.start(t, instanceOptions{})}
	opens := time.Now().Add(2 * time.Second).UTC()
	id := lined(t, replicas[0].URL, "opening", 5, 3, map[string]any{"max_per_customer": 1, "sale_starts_at": opens})
	const crowd = 20
	in := make([]*inLine, crowd)
	queued := map[int64]bool{} // the tickets whose join said they are in the draw
	for i := range in {
		in[i] = joinAs(t, replicas[i%3].URL, id, fmt.Sprint("c", i), nil)
		switch in[i].status.Status {
		case "queued":
			queued[in[i].status.TicketID] = true
		case "waiting": // a loaded machine joined it after the opening: a late arrival
		default:
			t.Fatalf("a join: %+v", in[i].status)
		}
	}
	if len(queued) == 0 {
		t.Fatal("no join came before the opening")
	}
	var wg sync.WaitGroup
	var sold, soldOut, used atomic.Int64
	for i, j := range in {
		url := replicas[(i+1)%3].URL
		wg.Go(func() {
			for {
				st := j.next(t, url)
				switch st.Status {
				case "admitted":
					res := lineOrder(t, replicas[(i+2)%3].URL, j.customer, map[string]string{"Line-Pass": j.pass}, id)
					if res.Status == http.StatusCreated {
						sold.Add(1)
						// Another replica may say sold_out for a moment, when this order took
						// the last unit and its use has not reached the line yet: used follows.
						j.until(t, url, "used")
						used.Add(1)
						return
					}
				case "sold_out":
					soldOut.Add(1)
					return
				case "used":
					used.Add(1)
					return
				case "queued", "waiting":
				default:
					t.Errorf("%s: %+v", j.customer, st)
					return
				}
			}
		})
	}
	wg.Wait()
	if sold.Load() != 5 || used.Load() != 5 || soldOut.Load() != crowd-5 {
		t.Errorf("sold %d, used %d, told sold out %d; want 5, 5 and %d", sold.Load(), used.Load(), soldOut.Load(), crowd-5)
	}
	if a := audit(t, replicas[1].URL, id); !a.Consistent || a.Sold != 5 || a.Stock != 0 {
		t.Errorf("audit %+v", a)
	}
	var d struct {
		DrawnAt time.Time `json:"drawn_at"`
		Tickets []struct {
			TicketID int64 `json:"ticket_id"`
		} `json:"tickets"`
	}
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: lineURL(replicas[2].URL, id) + "/draw", Header: adminHeader()}), http.StatusOK, &d)
	if len(d.Tickets) != len(queued) || d.DrawnAt.Before(opens) {
		t.Errorf("the draw placed %d at %v; want the %d who joined before it, at or after %v", len(d.Tickets), d.DrawnAt, len(queued), opens)
	}
	for _, tk := range d.Tickets {
		if !queued[tk.TicketID] {
			t.Errorf("ticket %d is in the draw, and its join said it was not", tk.TicketID)
		}
	}
}

// TestLineLongPollWokenByAnotherReplica: a long-poll on one replica answers when another
// replica changes the line (announced through Postgres), well before its wait ends.
func TestLineLongPollWokenByAnotherReplica(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	a, b := c.start(t, instanceOptions{}), c.start(t, instanceOptions{})
	id := lined(t, a.URL, "woken", 5, 1, nil)
	first := joinAs(t, a.URL, id, "first", nil)
	first.until(t, a.URL, "admitted")
	second := joinAs(t, a.URL, id, "second", nil)
	second.placed(t, a.URL)
	if second.status.Status != "waiting" {
		t.Fatalf("second: %+v", second.status)
	}
	answered := make(chan response, 1)
	go func() {
		res, err := send(context.Background(), http.DefaultClient, request{Method: http.MethodGet, URL: lineURL(b.URL, id) + "/ticket",
			Header: map[string]string{"Line-Ticket": second.ticket, "If-None-Match": second.etag, "Prefer": "wait=30"}})
		if err != nil {
			t.Error(err)
		}
		answered <- res
	}()
	// The long-poll is open on b when b's gauge says so; then a changes the line.
	testenv.Poll(t, 10*time.Second, "the long-poll to be open on b", func() bool {
		return testenv.Gauge(t, b.Registry, "stocksvc_line_long_polls") == 1
	})
	res := call(t, request{Method: http.MethodDelete, URL: lineURL(a.URL, id) + "/ticket", Header: map[string]string{"Line-Ticket": first.ticket}})
	if res.Status != http.StatusOK {
		t.Fatalf("leave: %d %s", res.Status, res.Body)
	}
	got := <-answered
	second.saw(t, got)
	if got.Status != http.StatusOK || second.status.Status != "admitted" {
		t.Errorf("the long-poll on b answered %d %+v, want admitted", got.Status, second.status)
	}
}

// TestLineAdmittingTooManyOversellsNothing: a line that admitted every ticket — no rule would,
// an operator's SQL update did — still sells no more than the stock: every layer behind the
// line holds on its own.
func TestLineAdmittingTooManyOversellsNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	replicas := []*instance{c.start(t, instanceOptions{}), c.start(t, instanceOptions{})}
	id := lined(t, replicas[0].URL, "too-many", 4, 1, nil)
	const crowd = 24
	in := make([]*inLine, crowd)
	for i := range in {
		in[i] = joinAs(t, replicas[i%2].URL, id, fmt.Sprint("c", i), nil)
	}
	for _, j := range in {
		j.placed(t, replicas[0].URL)
	}
	ctx := context.Background()
	if _, err := replicas[0].Pool.Exec(ctx, `
		WITH v AS (UPDATE lines SET version = version + 1 WHERE product_id = $1 RETURNING version)
		UPDATE line_tickets SET status = 'admitted', admitted_at = now(), admitted_until = now() + interval '1 minute',
		       changed = (SELECT version FROM v)
		 WHERE product_id = $1 AND status = 'waiting'`, id); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var confirmed atomic.Int64
	for i, j := range in {
		wg.Go(func() {
			j.until(t, replicas[i%2].URL, "admitted")
			if res := lineOrder(t, replicas[(i+1)%2].URL, j.customer, map[string]string{"Line-Pass": j.pass}, id); res.Status == http.StatusCreated {
				confirmed.Add(1)
			}
		})
	}
	wg.Wait()
	a := audit(t, replicas[1].URL, id)
	if confirmed.Load() != 4 || a.Sold != 4 || !a.Consistent || a.Stock != 0 {
		t.Errorf("%d confirmed of %d admitted, audit %+v: want exactly the 4 units", confirmed.Load(), crowd, a)
	}
}

// TestLineWithoutRedis: with Redis gone, a line keeps its statuses, long-polls, joins and
// leaves (they need Postgres and the replica's memory), and its check still refuses an order
// without a pass from memory; orders with one fail unavailable (the product's lock is Redis's)
// and sell nothing.
func TestLineWithoutRedis(t *testing.T) {
	t.Parallel()
	needsServers(t)
	rs := testenv.StartRedis(t)
	c := newCluster(t)
	in := c.start(t, instanceOptions{redisURL: "redis://" + rs.Addr() + "/0", lockWait: 200 * time.Millisecond})
	id := lined(t, in.URL, "no-redis", 5, 1, map[string]any{"max_per_customer": 1})
	first := joinAs(t, in.URL, id, "first", nil)
	first.until(t, in.URL, "admitted")
	second := joinAs(t, in.URL, id, "second", nil)
	second.placed(t, in.URL)

	rs.Kill()
	third := joinAs(t, in.URL, id, "third", nil)
	third.placed(t, in.URL)
	if st := third.status; st.Status != "waiting" || st.Ahead == nil || *st.Ahead != 1 {
		t.Errorf("a join with Redis gone: %+v, want waiting behind the second", st)
	}
	wantProblem(t, lineOrder(t, in.URL, "second", nil, id), "not-admitted", "/v1/orders")
	wantProblem(t, lineOrder(t, in.URL, "first", map[string]string{"Line-Pass": first.pass}, id), "unavailable", "/v1/orders")
	res := call(t, request{Method: http.MethodDelete, URL: lineURL(in.URL, id) + "/ticket", Header: map[string]string{"Line-Ticket": first.ticket}})
	if res.Status != http.StatusOK {
		t.Fatalf("leave with Redis gone: %d %s", res.Status, res.Body)
	}
	second.until(t, in.URL, "admitted")
	if a := audit(t, in.URL, id); a.Sold != 0 || !a.Consistent {
		t.Errorf("audit %+v, want nothing sold", a)
	}
}
