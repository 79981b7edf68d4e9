package line_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linetest"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// world is what the replicas of a server-free test share: the line's store and the products'
// (both in memory), and the stock service that sells.
type world struct {
	seq      atomic.Int64
	lines    *linetest.MemStore
	products *stocktest.MemStore
	stock    *stock.Service
}

func newWorld(t *testing.T) *world {
	t.Helper()
	w := &world{lines: linetest.NewMemStore(), products: stocktest.NewMemStore()}
	w.stock = stock.NewService(w.products, &stocktest.LocalLocker{}, stock.Config{MaxQuantity: 5}, nil)
	t.Cleanup(w.stock.Close)
	return w
}

// replica starts a line service, its keeper running until the test ends.
func (w *world) replica(t *testing.T) (*line.Service, *prometheus.Registry) {
	t.Helper()
	return w.replicaOver(t, w.lines)
}

// replicaOver is replica with store in front of the world's line store.
func (w *world) replicaOver(t *testing.T, store line.Store) (*line.Service, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	s, err := line.New(context.Background(), store, w.products, w.stock,
		line.Config{MaxQuantity: 5, Poll: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
		line.NewMetrics(reg))
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(s.Stop)
	return s, reg
}

// product makes a product with a line of admit buyers at a time and the rules given.
func (w *world) product(t *testing.T, units, admit int64, rules stock.SaleRules) int64 {
	t.Helper()
	rules.Line = stock.LineRules{Admit: admit, AdmissionFor: time.Minute}
	p, err := w.stock.CreateProduct(context.Background(), stock.NewProduct{SKU: fmt.Sprint("p", w.seq.Add(1)), Name: "p", Stock: units, Sale: rules})
	if err != nil {
		t.Fatal(err)
	}
	return p.ID
}

// joinCounter counts the joins that reach the store.
type joinCounter struct {
	line.Store
	joins atomic.Int64
}

func (c *joinCounter) Join(ctx context.Context, product int64, customer string) (line.Ticket, bool, bool, error) {
	c.joins.Add(1)
	return c.Store.Join(ctx, product, customer)
}

// joined is a customer in line: the ticket, the status last seen, and the last pass it gave.
type joined struct {
	customer string
	token    string
	status   line.Status
	pass     string
}

func (j *joined) saw(st line.Status) {
	j.status = st
	if st.Pass != "" {
		j.pass = st.Pass
	}
}

func joinAll(t *testing.T, s *line.Service, product int64, customers ...string) []*joined {
	t.Helper()
	out := make([]*joined, len(customers))
	for i, c := range customers {
		j, err := s.Join(context.Background(), product, c)
		if err != nil {
			t.Fatalf("join %s: %v", c, err)
		}
		out[i] = &joined{customer: c, token: j.Token}
		out[i].saw(j.Status)
	}
	return out
}

// next long-polls j's status until it differs from the last seen (failing after 10s).
func (j *joined) next(t *testing.T, s *line.Service, product int64) line.Status {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		st, err := s.Wait(ctx, product, j.token, j.status.ETag, 5*time.Second)
		if err != nil {
			t.Fatalf("%s's status after %s: %v", j.customer, j.status.State, err)
		}
		if st.ETag != j.status.ETag {
			j.saw(st)
			return st
		}
	}
}

// placed long-polls j's status until the ticket has its place (drawn, or placed as a late
// arrival) or is out of line.
func (j *joined) placed(t *testing.T, s *line.Service, product int64) line.Status {
	t.Helper()
	for j.status.State == line.Queued || j.status.State == line.Waiting && j.status.Place == 0 {
		j.next(t, s, product)
	}
	return j.status
}

// until long-polls j's status until it is in state want.
func (j *joined) until(t *testing.T, s *line.Service, product int64, want line.State) line.Status {
	t.Helper()
	for j.status.State != want {
		if j.status.State.Final() {
			t.Fatalf("%s is %s, waiting for %s", j.customer, j.status.State, want)
		}
		j.next(t, s, product)
	}
	return j.status
}

// buy orders one unit of product with j's pass, as the HTTP layer does: the check, the order,
// the use.
func buy(t *testing.T, w *world, s *line.Service, product int64, j *joined) error {
	t.Helper()
	ctx := context.Background()
	cl, err := s.Admit(ctx, []int64{product}, []string{j.pass}, "", "", 0)
	if err != nil {
		return err
	}
	if _, err := w.stock.PlaceOrder(ctx, stock.OrderRequest{CustomerID: cl.Customer, Items: []stock.Item{{ProductID: product, Quantity: 1}}}); err != nil {
		return err
	}
	s.Used(cl, "")
	return nil
}
