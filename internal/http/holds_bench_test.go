package stockhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// BenchmarkHoldDecision is a held order's confirm, and its cancel, from the HTTP handler to
// Postgres and back (issue #32, item 3): the real Service over the real store, on a pool whose
// tracer counts the statements sent (stmts/op, BEGIN and COMMIT included), with an in-process
// lock and no view cache, so that Postgres is the only server, and without waiting for the
// commit's flush (synchronous_commit off, on these connections only). Each op decides an order of its
// own, held beforehand (not timed). It drives the route only, so that the same file measures
// any version of the code: build it beside another commit's and run the two in turns.
//
//	go test -run '^$' -bench HoldDecision -benchtime 400x -count 5 ./internal/http/
func BenchmarkHoldDecision(b *testing.B) {
	for _, action := range []string{"confirm", "cancel"} {
		b.Run("action="+action, func(b *testing.B) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(b))
			if err != nil {
				b.Fatal(err)
			}
			var sent statementCount
			cfg.ConnConfig.Tracer = &sent
			// The commit's WAL flush, the same one per decision before and after, and on a shared
			// machine's disk most of the time and all of its noise, is left out: the figures are
			// the statements' own work and round trips.
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = "off"
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			// A queue wait far above a commit's time: on a busy machine the default refuses some
			// of the holds placed beforehand (busy).
			svc := stock.NewService(stockpg.New(pool), &stocktest.LocalLocker{}, stock.Config{QueueWait: 10 * time.Second}, nil)
			b.Cleanup(svc.Close)
			p, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: "held", Name: "held", Stock: stock.MaxStock,
				Sale: stock.SaleRules{HoldFor: time.Hour}})
			if err != nil {
				b.Fatal(err)
			}
			held := make([]string, b.N)
			for i := range held {
				res, err := svc.PlaceOrder(ctx, stock.OrderRequest{CustomerID: fmt.Sprintf("c%d", i), Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}})
				if err != nil || res.Order.Status != stock.OrderStatusHeld {
					b.Fatalf("hold %d = %+v, %v", i, res, err)
				}
				held[i] = res.Order.ID.String()
			}
			srv := stockhttp.New(stockhttp.Config{Service: svc, Logger: slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
			sent.n.Store(0)
			b.ResetTimer()
			for i := range b.N {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/orders/"+held[i]+"/"+action, nil))
				if w.Code != http.StatusOK {
					b.Fatalf("%s %s: %d %s", action, held[i], w.Code, w.Body)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(sent.n.Load())/float64(b.N), "stmts/op")
		})
	}
}

// statementCount is a pgx.QueryTracer that counts the statements sent.
type statementCount struct{ n atomic.Int64 }

func (c *statementCount) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (*statementCount) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
