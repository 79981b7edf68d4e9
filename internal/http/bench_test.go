package stockhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/identity/identitytest"
	"github.com/stocksvc/stocksvc/internal/ratelimit"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The replica's own work per request, with the database and Redis out of the picture (an
// in-memory store, an in-process lock): what an order costs above GET /healthz, the floor of
// any request. Compare the two in one run:
//
//	go test -run '^$' -bench . -benchmem ./internal/http/
//
// The network, the balancer, Postgres and Redis are measured by go run -C loadtest . -throughput.

func benchServer(b *testing.B) (*stockhttp.Server, int64) {
	b.Helper()
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{}, stock.Config{}, nil)
	b.Cleanup(svc.Close)
	p, err := svc.CreateProduct(context.Background(), stock.NewProduct{SKU: "hot", Name: "hot", Stock: stock.MaxStock})
	if err != nil {
		b.Fatal(err)
	}
	return stockhttp.New(stockhttp.Config{Service: svc, Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))}), p.ID
}

func BenchmarkHealthz(b *testing.B) {
	srv, _ := benchServer(b)
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if w.Code != http.StatusOK {
				b.Errorf("status %d", w.Code)
				return
			}
		}
	})
}

func BenchmarkPlaceOrder(b *testing.B) {
	srv, id := benchServer(b)
	// Many buyers at once, as in a sale: the product's queue then has orders to batch, and
	// ns/op is the cost of an order rather than the wait for its batch.
	placeOrders(b, srv, (&buyers{product: id}).request)
}

// buyers make the requests of a sale's buyers of one product: each order one unit, a customer
// of its own and a new idempotency key; with tokens, each customer's token (the customer is
// then the token's subject, and the body names none).
type buyers struct {
	product int64
	tokens  []string
	n       atomic.Int64
}

func (bs *buyers) request() *http.Request {
	i := bs.n.Add(1)
	var body string
	if bs.tokens == nil {
		body = fmt.Sprintf(`{"customer_id":"c%d","items":[{"product_id":%d,"quantity":1}]}`, i, bs.product)
	} else {
		body = fmt.Sprintf(`{"items":[{"product_id":%d,"quantity":1}]}`, bs.product)
	}
	r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	r.Header.Set("Idempotency-Key", uuid.NewString())
	if bs.tokens != nil {
		r.Header.Set("Authorization", "Bearer "+bs.tokens[int(i-1)%len(bs.tokens)])
	}
	return r
}

// placeOrders sends b.N orders made by next to h from 64 buyers at once, each expecting a 201.
func placeOrders(b *testing.B, h http.Handler, next func() *http.Request) {
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, next())
			if w.Code != http.StatusCreated {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}

// soldOutViews is a stock.Views that knows every product to be sold out: the cost of a refusal
// answered from a view, with Redis out of the picture as the store is.
type soldOutViews struct{}

func (soldOutViews) Product(context.Context, int64) (stock.ProductView, error) {
	return stock.ProductView{}, stock.ErrUnavailable
}
func (soldOutViews) Refusal(context.Context, int64) stock.Refusal {
	return stock.Refusal{SoldOut: true, Version: 1}
}
func (soldOutViews) Writing(context.Context, stock.Write) error { return nil }
func (soldOutViews) Committed(int64, int64, int64, time.Time)   {}
func (soldOutViews) Raise(context.Context, int64) (func(*stock.Product), error) {
	return func(*stock.Product) {}, nil
}
func (soldOutViews) Created(int64) {}

func BenchmarkSoldOutFromView(b *testing.B) {
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{},
		stock.Config{Views: soldOutViews{}}, nil)
	b.Cleanup(svc.Close)
	srv := stockhttp.New(stockhttp.Config{Service: svc, Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	var n atomic.Int64
	b.SetParallelism(64)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := fmt.Sprintf(`{"customer_id":"c%d","items":[{"product_id":7,"quantity":1}]}`, n.Add(1))
			r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			srv.ServeHTTP(w, r)
			if w.Code != http.StatusConflict {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}

// notOpenViews is a stock.Views whose every product's sale opens in an hour: the cost of an
// order refused before the opening, from the product's view.
type notOpenViews struct{ soldOutViews }

func (notOpenViews) Refusal(context.Context, int64) stock.Refusal {
	opens := time.Now().Add(time.Hour)
	return stock.Refusal{Version: 1, Sale: stock.SaleRules{StartsAt: &opens}, Known: true}
}

// BenchmarkBeforeOpening is an order refused before its product's sale opens, in body mode and
// in token mode with customers sending their tokens again (remembered after the first: the
// signature check of a token's first use is not in these figures), to set beside
// BenchmarkHealthz.
func BenchmarkBeforeOpening(b *testing.B) {
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{}, stock.Config{Views: notOpenViews{}}, nil)
	b.Cleanup(svc.Close)
	is, err := identitytest.NewIssuer("https://issuer.bench", "stocksvc")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "jwks.json")
	if err := is.WriteJWKS(path); err != nil {
		b.Fatal(err)
	}
	v, err := identity.NewVerifier(context.Background(), identity.Config{Issuer: "https://issuer.bench", Audience: "stocksvc", JWKSFile: path})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = v.Close() })
	const customers = 4096
	tokens := make([]string, customers)
	for i := range tokens {
		if tokens[i], err = is.Token(fmt.Sprintf("c%d", i), time.Hour); err != nil {
			b.Fatal(err)
		}
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	for _, tc := range []struct {
		name   string
		auth   stockhttp.CustomerAuth
		tokens int // distinct tokens cycled through; 0 for none
	}{
		{"body", stockhttp.CustomerAuth{Mode: identity.ModeBody}, 0},
		{"token", stockhttp.CustomerAuth{Mode: identity.ModeToken, Verifier: v}, customers},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := stockhttp.New(stockhttp.Config{Service: svc, Customers: tc.auth, Logger: logger})
			var n atomic.Int64
			b.SetParallelism(64)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := n.Add(1)
					body := fmt.Sprintf(`{"items":[{"product_id":7,"quantity":1}],"customer_id":"c%d"}`, i%customers)
					r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
					r.Header.Set("Content-Type", "application/json")
					if tc.tokens > 0 {
						j := i % int64(tc.tokens)
						body = fmt.Sprintf(`{"items":[{"product_id":7,"quantity":1}],"customer_id":"c%d"}`, j)
						r = httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
						r.Header.Set("Content-Type", "application/json")
						r.Header.Set("Authorization", "Bearer "+tokens[j])
					}
					w := httptest.NewRecorder()
					srv.ServeHTTP(w, r)
					if w.Code != http.StatusConflict {
						b.Errorf("status %d: %s", w.Code, w.Body)
						return
					}
				}
			})
		})
	}
}

// BenchmarkPlaceOrderReplica is the per-order work inside one replica as a sale runs it: the
// HTTP handler, the batcher and its lock in Redis, the view's update and the batch's write to
// Postgres, with the real servers of STOCKSVC_TEST_DATABASE_URL and STOCKSVC_TEST_REDIS_URL
// (issue #24). 64 buyers at once form the batches a replica forms under load. Besides ns/op
// (wall time per order: mostly waiting for the batch's commit) it reports the CPU this process
// spent per order (cpu-µs/op: the replica's work, plus the benchmark's making of requests,
// which does not change) and the CPU the Postgres server spent per order (pg-µs/op: the
// server is shared, so an upper bound). Run it as a replica runs, on one core, with a fixed
// count of orders (each call of the function makes a new database):
//
//	go test -run '^$' -bench PlaceOrderReplica -benchmem -cpu 1 -benchtime 3000x -count 10 ./internal/http/ | tee new.txt
//	benchstat old.txt new.txt
//
// The sub-benchmarks put one sale rule at a time on the product (issue #24's third part: the
// cost of each rule per order): none, a sale window open now, a limit per customer (every
// buyer a new customer, so a customer_purchases row per order), a hold (every order written
// held), and customers known by their tokens (each buyer's token new to the replica, so its
// signature is checked: a buyer's first order).
func BenchmarkPlaceOrderReplica(b *testing.B) {
	past, future := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339), time.Now().Add(24*time.Hour).UTC().Format(time.RFC3339)
	for _, tc := range []struct {
		name   string
		rules  map[string]any
		tokens bool
	}{
		{"rules=none", nil, false},
		{"rules=window", map[string]any{"sale_starts_at": past, "sale_ends_at": future}, false},
		{"rules=limit", map[string]any{"max_per_customer": 1000}, false},
		{"rules=hold", map[string]any{"hold_for": 3600}, false},
		{"rules=token", nil, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			// A queue wait far above a batch's time: on a busy machine the default sheds orders
			// (429), and a benchmark of the orders confirmed must not lose some.
			o := instanceOptions{lockWait: 10 * time.Second}
			var tk *tokens
			if tc.tokens {
				tk = newTokens(b)
				o.customers = tk.auth
			}
			in := newInstance(b, o)
			bs := &buyers{product: createRuledProduct(b, in.URL, "hot", stock.MaxStock, tc.rules).ID}
			if tk != nil {
				bs.tokens = make([]string, b.N)
				for i := range bs.tokens {
					var err error
					if bs.tokens[i], err = tk.issuer.Token(fmt.Sprintf("c%d", i), time.Hour); err != nil {
						b.Fatal(err)
					}
				}
			}
			pg := postmasterOf(b, in.Pool)
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, pg0 := selfCPU(b), pg.cpu()
			placeOrders(b, in.API, bs.request)
			b.StopTimer()
			b.ReportMetric(float64((selfCPU(b)-cpu0).Microseconds())/float64(b.N), "cpu-µs/op")
			b.ReportMetric(float64((pg.cpu()-pg0).Microseconds())/float64(b.N), "pg-µs/op")
		})
	}
}

// selfCPU is the user and system time this process has used.
func selfCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatalf("getrusage: %v", err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// postmaster is the Postgres server's main process, on this machine.
type postmaster int

// postmasterOf finds the postmaster of pool's server: the parent of one of its backends. The
// benchmark skips when it is not on this machine.
func postmasterOf(b *testing.B, pool *pgxpool.Pool) postmaster {
	var backend int
	if err := pool.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&backend); err != nil {
		b.Fatalf("backend pid: %v", err)
	}
	fields := testenv.ProcStat(backend)
	if len(fields) < 2 {
		b.Skip("the Postgres server is not on this machine: no CPU to count")
	}
	ppid, _ := strconv.Atoi(fields[1])
	return postmaster(ppid)
}

// cpu is the CPU time of the postmaster, of its live children and of those that ended (which
// it reaps: cutime and cstime), so that a backend ending between two readings is not lost.
func (p postmaster) cpu() time.Duration {
	ticks := func(fields []string, from, to int) (n int64) {
		for _, f := range fields[from:min(to, len(fields))] {
			v, _ := strconv.ParseInt(f, 10, 64)
			n += v
		}
		return n
	}
	total := ticks(testenv.ProcStat(int(p)), 11, 15)
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if f := testenv.ProcStat(pid); len(f) > 12 && f[1] == strconv.Itoa(int(p)) {
			total += ticks(f, 11, 13)
		}
	}
	return time.Duration(total) * 10 * time.Millisecond // USER_HZ is 100
}

// BenchmarkRateLimited is a request answered 429 rate-limited, with the default limits, to set
// beside BenchmarkHealthz (docs/benchmarks.md §6): an order with a forged token (a known kid,
// a bad signature, a new one each time) from an address that has spent its refusals, and an
// order of one customer past its budget.
func BenchmarkRateLimited(b *testing.B) {
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{}, stock.Config{}, nil)
	b.Cleanup(svc.Close)
	is, err := identitytest.NewIssuer("https://issuer.bench", "stocksvc")
	if err != nil {
		b.Fatal(err)
	}
	path := filepath.Join(b.TempDir(), "jwks.json")
	if err := is.WriteJWKS(path); err != nil {
		b.Fatal(err)
	}
	v, err := identity.NewVerifier(context.Background(), identity.Config{Issuer: "https://issuer.bench", Audience: "stocksvc", JWKSFile: path})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = v.Close() })
	tok, err := is.Token("flooder", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	frozen := time.Now()
	head := tok[:strings.LastIndexByte(tok, '.')+1]
	forged := func(i int64) string { return head + fmt.Sprintf("%085d", i) + tok[len(tok)-1:] }
	order := func(token string) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(`{"items":[{"product_id":1,"quantity":1}]}`))
		r.Header.Set("Content-Type", "application/json")
		r.Header.Set("Authorization", "Bearer "+token)
		return r
	}
	for _, tc := range []struct {
		name  string
		token func(i int64) string
	}{
		{"forged-token", forged},
		{"one-customer", func(int64) string { return tok }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			srv := stockhttp.New(stockhttp.Config{Service: svc, Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn})),
				Customers: stockhttp.CustomerAuth{Mode: identity.ModeToken, Verifier: v},
				Limits: stockhttp.Limits{
					Customer: ratelimit.Limit{Events: 5, Per: time.Second, Burst: 20},
					Address:  ratelimit.Limit{Events: 20, Per: time.Second, Burst: 100},
					// A clock that stands still: no budget is earned back during the run.
					Now: func() time.Time { return frozen }}})
			// Spend the budget first: what follows is answered 429.
			var n atomic.Int64
			for range 200 {
				srv.ServeHTTP(httptest.NewRecorder(), order(tc.token(n.Add(1))))
			}
			b.SetParallelism(64)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					w := httptest.NewRecorder()
					srv.ServeHTTP(w, order(tc.token(n.Add(1))))
					if w.Code != http.StatusTooManyRequests {
						b.Errorf("status %d: %s", w.Code, w.Body)
						return
					}
				}
			})
		})
	}
}
