package stockpg_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// BenchmarkCommitBatch is Postgres's own work for the purchase path's write (issue #24): the
// batch statement a replica sends, for batches of one-item orders of one product, each with
// its idempotency key and a customer of its own, as a sale sends them (Write.SkipStored). The
// store has one connection, so one backend does all the work, and pg-µs/order is that
// backend's CPU per order, read from /proc: the server's cost of the rows, indexes, checks and
// commit of an order, without the replica, Redis or the network. ns/order is the wall time
// (the commit's WAL flush included). Batch sizes 1 to 64 separate what a batch costs once from
// what each order costs; at 24 orders (a closed loop's average batch), each sale rule alone
// says what it adds: a sale window, a limit per customer (a customer_purchases row per
// order), a hold (an order written held, with its expiry indexed).
//
//	go test -run '^$' -bench CommitBatch -benchtime 400x -count 6 ./internal/stock/stockpg/
//
// (400x means 400 batches, whatever their size: b.N counts batches, the metrics are per order.)
func BenchmarkCommitBatch(b *testing.B) {
	past, future := time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour)
	cases := []struct {
		name string
		size int
		sale stock.SaleRules
	}{
		{"orders=1", 1, stock.SaleRules{}},
		{"orders=8", 8, stock.SaleRules{}},
		{"orders=24", 24, stock.SaleRules{}},
		{"orders=64", 64, stock.SaleRules{}},
		{"orders=24/window", 24, stock.SaleRules{StartsAt: &past, EndsAt: &future}},
		{"orders=24/limit", 24, stock.SaleRules{MaxPerCustomer: 1000}},
		{"orders=24/hold", 24, stock.SaleRules{HoldFor: time.Hour}},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			ctx := context.Background()
			cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(b))
			if err != nil {
				b.Fatal(err)
			}
			cfg.MaxConns = 1
			pool, err := pgxpool.NewWithConfig(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			var backend int
			if err := pool.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&backend); err != nil {
				b.Fatal(err)
			}
			if backendCPU(backend) < 0 {
				b.Skip("the Postgres server is not on this machine: no CPU to read")
			}
			s := stockpg.New(pool)
			p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "hot", Name: "hot", Stock: stock.MaxStock, Sale: tc.sale})
			if err != nil {
				b.Fatal(err)
			}
			snap, err := s.Snapshot(ctx, []int64{p.ID}, nil, nil)
			if err != nil {
				b.Fatal(err)
			}
			level := snap.Levels[p.ID]
			fingerprint := make([]byte, 32)
			write := func() stock.Write {
				w := stock.Write{SkipStored: true, Decrements: []stock.Decrement{{ProductID: p.ID, Quantity: int64(tc.size)}}}
				w.Orders = make([]stock.Order, tc.size)
				for i := range w.Orders {
					w.Orders[i] = stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: uuid.NewString(), Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}}
					w.Records = append(w.Records, stock.IdempotencyRecord{RecordKey: stock.RecordKey{CustomerID: w.Orders[i].CustomerID, Key: uuid.NewString()}, Fingerprint: fingerprint, Order: &w.Orders[i]})
				}
				return w
			}
			commit := func(w stock.Write) {
				w.Decrements[0].Read = level // the row as the previous write left it
				c, err := s.Commit(ctx, w)
				if err != nil {
					b.Fatalf("commit: %v", err)
				}
				if len(c.Skipped) > 0 || (tc.sale.HoldFor > 0) != (len(c.Holds) == tc.size) {
					b.Fatalf("commit = %+v: want every order written, held if the product holds", c)
				}
				level.Stock -= int64(tc.size)
				level.Version++
			}
			for range 20 { // the statement prepared, its generic plan chosen
				commit(write())
			}
			writes := make([]stock.Write, b.N)
			for i := range writes {
				writes[i] = write()
			}
			b.ResetTimer()
			cpu0 := backendCPU(backend)
			for _, w := range writes {
				commit(w)
			}
			b.StopTimer()
			orders := float64(b.N * tc.size)
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/orders, "ns/order")
			b.ReportMetric(float64((backendCPU(backend)-cpu0).Microseconds())/orders, "pg-µs/order")
		})
	}
}

// backendCPU is the user and system CPU time of a Postgres backend on this machine, -1 when
// it is not on this machine.
func backendCPU(pid int) time.Duration {
	fields := testenv.ProcStat(pid)
	if len(fields) < 13 {
		return -1
	}
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond // USER_HZ is 100
}
