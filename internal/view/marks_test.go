package view

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// purchase is a write that takes 3 units of the world's product, decided from version version
// (and stock 10 at version 0).
func (w *world) purchase(version int64) stock.Write {
	return stock.Write{Decrements: []stock.Decrement{{ProductID: w.id, Quantity: 3, Read: stock.Level{Stock: 10 - 3*version, Version: version}}}}
}

// commitUnheard commits a purchase of 3 units in Postgres that no cache hears of: its replica
// was cut off from Redis (or died) between its commit and the view's update.
func (w *world) commitUnheard() {
	w.t.Helper()
	if _, err := w.pool.Exec(context.Background(), `UPDATE products SET stock = stock - 3, version = version + 1 WHERE id = $1`, w.id); err != nil {
		w.t.Fatal(err)
	}
}

// marks lists the mark fields of the world's view in Redis.
func (w *world) marks() []string {
	w.t.Helper()
	fields, err := w.rdb.HKeys(context.Background(), w.prefix+"view:product:{"+itoa(w.id)+"}").Result()
	if err != nil {
		w.t.Fatal(err)
	}
	var marks []string
	for _, f := range fields {
		if strings.HasPrefix(f, "w:") {
			marks = append(marks, f)
		}
	}
	return marks
}

// TestPurchaseNeverHeardOfIsSeenALeaseAfterItsMark is issue #31's redis-partition finding: a
// replica marked the view, committed, and never moved the view (Redis cut off from it). Every
// other replica served the level before the purchase until the view's TTL, 0.6 s after a read
// had shown the purchase. Now the mark ends that one lease after the write began: the view is
// rebuilt from Postgres, and the mark goes with it.
func TestPurchaseNeverHeardOfIsSeenALeaseAfterItsMark(t *testing.T) {
	w := newWorld(t, 10)
	writer, _ := w.cache(Config{}, nil)
	reader, reg := w.cache(Config{}, nil)
	ctx := context.Background()
	if _, err := reader.Product(ctx, w.id); err != nil { // the view, in Redis, at version 0
		t.Fatal(err)
	}
	// A mark taken just now: the write may not have committed yet, and the view is served,
	// leased no longer than one lease after the mark.
	marked := time.Now()
	if err := writer.mark(ctx, w.purchase(0), marked); err != nil {
		t.Fatal(err)
	}
	reader.forgetLeases()
	v, err := reader.Product(ctx, w.id)
	if err != nil || v.Stock != 10 || v.From != FromRedis {
		t.Fatalf("read during a fresh mark: %+v, %v; want the view in Redis, stock 10", v, err)
	}
	if l, ok := reader.leased(w.id); !ok || l.expires.After(marked.Add(reader.cfg.Lease)) {
		t.Errorf("lease on a marked view ends at %v, want by one lease after the mark (%v)", l.expires, marked.Add(reader.cfg.Lease))
	}

	// The same write, marked over a lease ago (a mark keeps its first time, so this one is
	// taken afresh), committed and never heard of.
	if err := w.rdb.HDel(ctx, w.prefix+"view:product:{"+itoa(w.id)+"}", "w:1").Err(); err != nil {
		t.Fatal(err)
	}
	if err := writer.mark(ctx, w.purchase(0), time.Now().Add(-2*reader.cfg.Lease)); err != nil {
		t.Fatal(err)
	}
	w.commitUnheard()
	reader.forgetLeases()
	if v, err := reader.Product(ctx, w.id); err != nil || v.Stock != 7 || v.Version != 1 {
		t.Fatalf("read a lease after the mark: stock %d at version %d (%v), want 7 at version 1: the view before the purchase was served", v.Stock, v.Version, err)
	}
	if n := testenv.Metric(t, reg, "stocksvc_view_stale_total"); n != 1 {
		t.Errorf("stocksvc_view_stale_total = %v, want 1", n)
	}
	if m := w.marks(); len(m) != 0 {
		t.Errorf("marks left after the rebuild at version 1: %v", m)
	}
	reader.forgetLeases()
	if v, err := reader.Product(ctx, w.id); err != nil || v.From != FromRedis || v.Stock != 7 {
		t.Errorf("the next read: %+v, %v; want the rebuilt view from Redis", v, err)
	}
}

// TestRebuildDuringAPurchaseKeepsItsMark: a purchase marks a product with no view; a reader
// rebuilds the view from Postgres before the purchase commits; the purchase's update never
// comes. The rebuilt view must not pass for current: it keeps the mark, and is rebuilt again
// once the mark is a lease old.
func TestRebuildDuringAPurchaseKeepsItsMark(t *testing.T) {
	w := newWorld(t, 10)
	writer, _ := w.cache(Config{}, nil)
	reader, _ := w.cache(Config{}, nil)
	ctx := context.Background()
	if err := writer.mark(ctx, w.purchase(0), time.Now().Add(-2*reader.cfg.Lease)); err != nil {
		t.Fatal(err)
	}
	// Only the mark is there: read as no view, and rebuilt from Postgres (version 0).
	if v, err := reader.Product(ctx, w.id); err != nil || v.Stock != 10 {
		t.Fatalf("read before the commit: %+v, %v; want stock 10", v, err)
	}
	if m := w.marks(); len(m) != 1 || m[0] != "w:1" {
		t.Fatalf("marks after a rebuild at version 0: %v, want [w:1]", m)
	}
	w.commitUnheard()
	reader.forgetLeases()
	if v, err := reader.Product(ctx, w.id); err != nil || v.Stock != 7 {
		t.Errorf("read after the commit: stock %d (%v), want 7: the view rebuilt before it was served", v.Stock, err)
	}
}

// TestUpdatesClearTheirMarksOnly: a purchase's update takes its own mark and older ones away,
// never a newer write's; a view already past a write is not marked.
func TestUpdatesClearTheirMarksOnly(t *testing.T) {
	w := newWorld(t, 10)
	c, _ := w.cache(Config{}, nil)
	ctx := context.Background()
	if _, err := c.Product(ctx, w.id); err != nil {
		t.Fatal(err)
	}
	for v := range int64(3) { // three batches marked: versions 1, 2 and 3
		if err := c.Writing(ctx, w.purchase(v)); err != nil {
			t.Fatal(err)
		}
	}
	c.Committed(w.id, 4, 2, time.Now())
	if m := w.marks(); len(m) != 1 || m[0] != "w:3" {
		t.Errorf("marks after the update to version 2: %v, want [w:3]", m)
	}
	c.Committed(w.id, 1, 3, time.Now())
	if m := w.marks(); len(m) != 0 {
		t.Errorf("marks after the update to version 3: %v, want none", m)
	}
	if err := c.Writing(ctx, w.purchase(1)); err != nil { // decided from a stale level
		t.Fatal(err)
	}
	if m := w.marks(); len(m) != 0 {
		t.Errorf("a write to version 2 marked a view at version 3: %v", m)
	}
}

// TestUnmarkableWriteIsRefused: Redis does not answer, so the mark cannot be taken; the write
// must not be made (ErrUnavailable), since no replica could be told to stop serving the level
// before it.
func TestUnmarkableWriteIsRefused(t *testing.T) {
	w := newWorld(t, 10)
	dead := redis.NewClient(&redis.Options{Addr: testenv.DeadEndpoint(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	c, _ := w.cacheOn(dead, Config{}, nil)
	if err := c.Writing(context.Background(), w.purchase(0)); !errors.Is(err, stock.ErrUnavailable) {
		t.Errorf("Writing with Redis down = %v, want ErrUnavailable", err)
	}
}

// TestOptionalMarkLetsTheWriteGo: with MarkOptional (Redlock mode, whose views live on one node
// of several), a mark the views' Redis cannot take does not stop the purchase.
func TestOptionalMarkLetsTheWriteGo(t *testing.T) {
	w := newWorld(t, 10)
	dead := redis.NewClient(&redis.Options{Addr: testenv.DeadEndpoint(t), MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { _ = dead.Close() })
	c, _ := w.cacheOn(dead, Config{MarkOptional: true}, nil)
	if err := c.Writing(context.Background(), w.purchase(0)); err != nil {
		t.Errorf("Writing with Redis down and the mark optional = %v, want nil", err)
	}
}
