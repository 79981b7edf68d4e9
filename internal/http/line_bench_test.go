package stockhttp_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/line/linetest"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// The line's costs on a replica, Postgres and Redis out of the picture as in bench_test.go: an
// order refused for want of a pass — what a flood of scripts' orders costs at an opening —
// beside GET /healthz, and the pass check itself. Compare in one run:
//
//	go test -run '^$' -bench 'Healthz|Line' -benchmem ./internal/http/

// linedBench is a server with a line service over memory, and a product sold through a line
// that one customer joined (so that this replica serves the line) and was admitted to.
type linedBench struct {
	srv     *stockhttp.Server
	lines   *line.Service
	product int64
	pass    string
}

func newLinedBench(b *testing.B) *linedBench {
	b.Helper()
	products := stocktest.NewMemStore()
	svc := stock.NewService(products, &stocktest.LocalLocker{}, stock.Config{}, nil)
	b.Cleanup(svc.Close)
	ctx := context.Background()
	p, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: "lined", Name: "lined", Stock: stock.MaxStock,
		Sale: stock.SaleRules{Line: stock.LineRules{Admit: 1, AdmissionFor: time.Hour}}})
	if err != nil {
		b.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))
	lines, err := line.New(ctx, linetest.NewMemStore(), products, svc, line.Config{Poll: 50 * time.Millisecond, Logger: logger}, nil)
	if err != nil {
		b.Fatal(err)
	}
	lines.Start()
	b.Cleanup(lines.Stop)
	j, err := lines.Join(ctx, p.ID, "admitted")
	if err != nil {
		b.Fatal(err)
	}
	st := j.Status
	for st.State != line.Admitted {
		if st, err = lines.Wait(ctx, p.ID, j.Token, st.ETag, 5*time.Second); err != nil {
			b.Fatal(err)
		}
	}
	srv := stockhttp.New(stockhttp.Config{Service: svc, Lines: lines, Logger: logger})
	return &linedBench{srv: srv, lines: lines, product: p.ID, pass: st.Pass}
}

// BenchmarkLineRefusal is an order for a lined product without a pass, answered 409
// not-admitted: the flood of scripts' orders at an opening, to set beside BenchmarkHealthz
// (the ratio of their ns/op is the ratio of what a replica answers of each).
func BenchmarkLineRefusal(b *testing.B) {
	lb := newLinedBench(b)
	var n atomic.Int64
	b.SetParallelism(64)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			body := fmt.Sprintf(`{"customer_id":"c%d","items":[{"product_id":%d,"quantity":1}]}`, n.Add(1), lb.product)
			r := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(body))
			r.Header.Set("Content-Type", "application/json")
			w := httptest.NewRecorder()
			lb.srv.ServeHTTP(w, r)
			if w.Code != http.StatusConflict {
				b.Errorf("status %d: %s", w.Code, w.Body)
				return
			}
		}
	})
}

// BenchmarkLinePassCheck is the check of a valid pass alone (line.Service.Admit): its
// signature, the line's memory of its ticket.
func BenchmarkLinePassCheck(b *testing.B) {
	lb := newLinedBench(b)
	ctx := context.Background()
	products, passes := []int64{lb.product}, []string{lb.pass}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := lb.lines.Admit(ctx, products, passes, "", "", 0); err != nil {
				b.Errorf("admit: %v", err)
				return
			}
		}
	})
}
