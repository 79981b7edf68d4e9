package stock_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/view"
)

// unmarkable are views that cannot be told of a write (their Redis is cut off), and count the
// writes they were asked to mark.
type unmarkable struct {
	stock.Views
	asked atomic.Int64
}

func (v *unmarkable) Writing(context.Context, stock.Write) error {
	v.asked.Add(1)
	return fmt.Errorf("%w: mark: redis cut off", stock.ErrUnavailable)
}

// TestUnmarkedPurchaseSellsNothing is the other half of issue #31's redis-partition fix: a
// replica that cannot mark a product's view before its write (Views.Writing) makes no write,
// since nothing would then bound how long the other replicas served the level before it. The
// order is answered unavailable, and nothing is sold.
func TestUnmarkedPurchaseSellsNothing(t *testing.T) {
	w := newMemWorld()
	views := &unmarkable{Views: w.store.Views()}
	r := memReplica(t, w.store, w.locker, stock.Config{Views: views})
	id := createProduct(t, r, "partitioned", 5)
	if _, err := r.svc.PlaceOrder(context.Background(), order("ann", one(id, 2))); !errors.Is(err, stock.ErrUnavailable) {
		t.Fatalf("order with views that cannot be marked = %v, want ErrUnavailable", err)
	}
	if views.asked.Load() == 0 {
		t.Error("the views were never asked to mark the write")
	}
	p, err := w.store.Product(context.Background(), id)
	if err != nil || p.Stock != 5 || p.Version != 0 {
		t.Errorf("product after the refused order: stock %d at version %d (%v), want 5 at version 0", p.Stock, p.Version, err)
	}
	// A refusal sells nothing, so it needs no mark.
	if _, err := r.svc.PlaceOrder(context.Background(), order("bob", one(id, 6))); !errors.Is(err, stock.ErrSoldOut) {
		t.Errorf("order for more than the stock = %v, want a refusal for want of stock", err)
	}
}

// unmarked are views that skip the mark: the purchase path as it was before it.
type unmarked struct{ stock.Views }

func (unmarked) Writing(context.Context, stock.Write) error { return nil }

// BenchmarkPurchaseViewMark is what the view's mark costs the purchase path (Views.Writing: one
// Redis round trip per batch, under the product's lock), side by side with the same path
// without it, over the servers: 16 buyers at once, one unit each, every one a new customer.
//
//	go test -run '^$' -bench PurchaseViewMark -count 6 ./internal/stock/
func BenchmarkPurchaseViewMark(b *testing.B) {
	w := newWorld(b)
	for _, marks := range []bool{false, true} {
		b.Run(fmt.Sprintf("marks=%v", marks), func(b *testing.B) {
			ctx := context.Background()
			pool, err := pgxpool.New(ctx, w.databaseURL)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(pool.Close)
			opts, err := redis.ParseURL(w.redisURL)
			if err != nil {
				b.Fatal(err)
			}
			rdb := redis.NewClient(opts)
			b.Cleanup(func() { _ = rdb.Close() })
			locks := newLockClient(b, rdb, w.prefix)
			store := stockpg.New(pool)
			var views stock.Views = view.New(rdb, locks, store, view.Config{}, nil)
			if !marks {
				views = unmarked{views}
			}
			svc := stock.NewService(store, stocklock.NewRedis(locks, stocklock.Config{Wait: 10 * time.Second}),
				stock.Config{Views: views, QueueWait: 10 * time.Second}, nil)
			b.Cleanup(svc.Close)
			r := &replica{svc: svc, store: store}
			id := createProduct(b, r, "bench-"+rand.Text(), stock.MaxStock)
			var n atomic.Int64
			b.SetParallelism(16)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := svc.PlaceOrder(ctx, order(fmt.Sprintf("c%d", n.Add(1)), one(id, 1))); err != nil {
						b.Errorf("order: %v", err)
						return
					}
				}
			})
		})
	}
}
