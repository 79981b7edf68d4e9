package stockhttp_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/async"
	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linetest"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// This file holds what the server-free tests give a Server instead of Postgres and Redis: a
// Service and a Queue that answer from memory. The rules stay the real ones — the Service is a
// stock.Service over stocktest's in-memory store and in-process lock — so a validation answer
// is the service's own; a test that needs some other answer, an error the memory cannot give,
// sets it. go test -short runs these tests alone (docs/development.md).

// fakeService is a stockhttp.Service over memory.
type fakeService struct {
	svc *stock.Service
	// err, when set, is every method's answer.
	err error
	// placeOrder, when set, answers PlaceOrder.
	placeOrder func(context.Context, stock.OrderRequest) (stock.OrderResult, error)
}

var _ stockhttp.Service = (*fakeService)(nil)

func (f *fakeService) CreateProduct(ctx context.Context, p stock.NewProduct) (stock.Product, error) {
	if f.err != nil {
		return stock.Product{}, f.err
	}
	return f.svc.CreateProduct(ctx, p)
}

func (f *fakeService) Product(ctx context.Context, id int64) (stock.ProductView, error) {
	if f.err != nil {
		return stock.ProductView{}, f.err
	}
	return f.svc.Product(ctx, id)
}

func (f *fakeService) Restock(ctx context.Context, req stock.RestockRequest) (stock.RestockResult, error) {
	if f.err != nil {
		return stock.RestockResult{}, f.err
	}
	return f.svc.Restock(ctx, req)
}

func (f *fakeService) Audit(ctx context.Context, id int64) (stock.Audit, error) {
	if f.err != nil {
		return stock.Audit{}, f.err
	}
	return f.svc.Audit(ctx, id)
}

func (f *fakeService) PlaceOrder(ctx context.Context, req stock.OrderRequest) (stock.OrderResult, error) {
	switch {
	case f.err != nil:
		return stock.OrderResult{}, f.err
	case f.placeOrder != nil:
		return f.placeOrder(ctx, req)
	}
	return f.svc.PlaceOrder(ctx, req)
}

func (f *fakeService) Order(ctx context.Context, id uuid.UUID) (stock.Order, error) {
	if f.err != nil {
		return stock.Order{}, f.err
	}
	return f.svc.Order(ctx, id)
}

func (f *fakeService) UpdateSale(ctx context.Context, id int64, c stock.SaleChange) (stock.Product, error) {
	if f.err != nil {
		return stock.Product{}, f.err
	}
	return f.svc.UpdateSale(ctx, id, c)
}

func (f *fakeService) Products(ctx context.Context, after int64, limit int, onSale bool) (stock.ProductsPage, error) {
	if f.err != nil {
		return stock.ProductsPage{}, f.err
	}
	return f.svc.Products(ctx, after, limit, onSale)
}

func (f *fakeService) Confirm(ctx context.Context, id uuid.UUID, customer string) (stock.Order, error) {
	if f.err != nil {
		return stock.Order{}, f.err
	}
	return f.svc.Confirm(ctx, id, customer)
}

func (f *fakeService) Cancel(ctx context.Context, id uuid.UUID, customer string) (stock.Order, error) {
	if f.err != nil {
		return stock.Order{}, f.err
	}
	return f.svc.Cancel(ctx, id, customer)
}

// fakeQueue is a stockhttp.Queue over memory: it accepts an order as async.Queue.Place does —
// validated and checked by the service first, refused when a product does not exist, one order
// per Idempotency-Key — and decides nothing; a test puts the decided orders it needs (add).
type fakeQueue struct {
	svc *stock.Service
	// err, when set, is every method's answer.
	err error

	mu     sync.Mutex
	orders map[uuid.UUID]async.Order
	keys   map[string]fakeKey
}

type fakeKey struct {
	fingerprint []byte
	order       uuid.UUID
}

var _ stockhttp.Queue = (*fakeQueue)(nil)

func (q *fakeQueue) Place(ctx context.Context, req stock.OrderRequest) (async.Acceptance, error) {
	if q.err != nil {
		return async.Acceptance{}, q.err
	}
	p, err := q.svc.Prepare(req)
	if err != nil {
		return async.Acceptance{}, err
	}
	if err := q.svc.RefusedNow(ctx, p); err != nil {
		return async.Acceptance{}, err
	}
	for _, it := range p.Items {
		if _, err := q.svc.Product(ctx, it.ProductID); err != nil {
			return async.Acceptance{}, err
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if k, ok := q.keys[p.Key]; ok && p.Key != "" {
		if !bytes.Equal(k.fingerprint, p.Fingerprint) {
			return async.Acceptance{}, stock.ErrIdempotencyKeyReused
		}
		return async.Acceptance{Order: q.orders[k.order], Replayed: true}, nil
	}
	o := async.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: p.CustomerID, Items: p.Items,
		Status: async.StatusPending, AcceptedAt: time.Now()}
	q.orders[o.ID] = o
	if p.Key != "" {
		q.keys[p.Key] = fakeKey{fingerprint: p.Fingerprint, order: o.ID}
	}
	return async.Acceptance{Order: o}, nil
}

// Find answers as async.Queue.Find does: the service's order first, else the accepted one.
func (q *fakeQueue) Find(ctx context.Context, id uuid.UUID) (async.Found, error) {
	if q.err != nil {
		return async.Found{}, q.err
	}
	if o, err := q.svc.Order(ctx, id); err == nil {
		return async.Found{Confirmed: &o}, nil
	}
	o, err := q.Order(ctx, id)
	if err != nil {
		return async.Found{}, err
	}
	return async.Found{Order: o}, nil
}

func (q *fakeQueue) Order(_ context.Context, id uuid.UUID) (async.Order, error) {
	if q.err != nil {
		return async.Order{}, q.err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	o, ok := q.orders[id]
	if !ok {
		return async.Order{}, stock.ErrOrderNotFound
	}
	return o, nil
}

// add puts o among the accepted orders, as it stands.
func (q *fakeQueue) add(o async.Order) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.orders[o.ID] = o
}

// fakeOptions tune a server-free replica. Zero values take the service defaults, with the
// admin routes on and a queue.
//
// The answers a test chooses are options, fixed before the server starts: the handlers read
// them from other goroutines.
type fakeOptions struct {
	adminToken  string // "-" turns admin off
	maxQuantity int64
	ready       func(context.Context) error
	noQueue     bool
	// serviceErr and queueErr, when set, answer every call of the service or the queue.
	serviceErr error
	queueErr   error
	// placeOrder, when set, answers the service's PlaceOrder.
	placeOrder func(context.Context, stock.OrderRequest) (stock.OrderResult, error)
	// customers, when its mode is set, says who the customers are; else body mode.
	customers stockhttp.CustomerAuth
	// noLines leaves the line out (Config.Lines nil).
	noLines bool
	// requestTimeout is Config.RequestTimeout.
	requestTimeout time.Duration
	// limits are the replica's rate limits; none by default.
	limits stockhttp.Limits
}

// fakeInstance is a Server over fakes, served on a loopback listener of its own so that its
// exchanges go through net/http (and api/openapi.yaml's checks) as a real replica's do.
type fakeInstance struct {
	URL      string
	API      *stockhttp.Server
	Registry *prometheus.Registry
	svc      *fakeService
	queue    *fakeQueue // nil with noQueue
	// lines is the line's service over memory (nil with noLines), and lineStore its store.
	lines     *line.Service
	lineStore *linetest.MemStore
}

func newFakeInstance(t testing.TB, o fakeOptions) *fakeInstance {
	t.Helper()
	reg := prometheus.NewRegistry()
	products := stocktest.NewMemStore()
	svc := stock.NewService(products, &stocktest.LocalLocker{},
		stock.Config{MaxQuantity: o.maxQuantity}, stock.NewMetrics(reg))
	in := &fakeInstance{Registry: reg, svc: &fakeService{svc: svc, err: o.serviceErr, placeOrder: o.placeOrder}}
	cfg := stockhttp.Config{
		Service:        in.svc,
		AdminToken:     adminToken,
		Ready:          o.ready,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
		Registerer:     reg,
		Gatherer:       reg,
		Customers:      stockhttp.CustomerAuth{Mode: identity.ModeBody},
		RequestTimeout: o.requestTimeout,
		Limits:         o.limits,
	}
	if o.customers.Mode != "" {
		cfg.Customers = o.customers
	}
	if o.adminToken == "-" {
		cfg.AdminToken = ""
	} else if o.adminToken != "" {
		cfg.AdminToken = o.adminToken
	}
	if !o.noQueue {
		in.queue = &fakeQueue{svc: svc, err: o.queueErr, orders: map[uuid.UUID]async.Order{}, keys: map[string]fakeKey{}}
		cfg.Queue = in.queue
	}
	if !o.noLines {
		in.lineStore = linetest.NewMemStore()
		lines, err := line.New(context.Background(), in.lineStore, products, svc,
			line.Config{MaxQuantity: o.maxQuantity, Poll: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))},
			line.NewMetrics(reg))
		if err != nil {
			t.Fatal(err)
		}
		lines.Start()
		in.lines, cfg.Lines = lines, lines
	}
	in.API = stockhttp.New(cfg)
	srv := httptest.NewServer(in.API)
	in.URL = srv.URL
	t.Cleanup(func() {
		srv.Close()
		if in.lines != nil {
			in.lines.Stop()
		}
		svc.Close()
	})
	return in
}
