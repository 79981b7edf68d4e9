package view

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// insert begins an insert of a product and returns its id and the transaction, not committed.
func (w *world) insert(sku string) (int64, pgx.Tx) {
	w.t.Helper()
	tx, err := w.pool.Begin(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { _ = tx.Rollback(context.Background()) })
	var id int64
	if err := tx.QueryRow(context.Background(), `INSERT INTO products (sku, name, stock, initial_stock) VALUES ($1, $1, 1, 1) RETURNING id`, sku).Scan(&id); err != nil {
		w.t.Fatal(err)
	}
	return id, tx
}

// gap returns an id below the highest product id that no product has: one an insert took and
// rolled back.
func (w *world) gap() int64 {
	w.t.Helper()
	id, tx := w.insert("rolled-back")
	if err := tx.Rollback(context.Background()); err != nil {
		w.t.Fatal(err)
	}
	w.create("after-the-gap")
	return id
}

func (w *world) create(sku string) stock.Product {
	w.t.Helper()
	p, err := w.store.CreateProduct(context.Background(), stock.NewProduct{SKU: sku, Name: sku, Stock: 1})
	if err != nil {
		w.t.Fatalf("create %s: %v", sku, err)
	}
	return p
}

// commandCount is a go-redis hook that counts the commands a client sends.
type commandCount struct{ n atomic.Int64 }

func (c *commandCount) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *commandCount) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmd)
	}
}
func (c *commandCount) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(int64(len(cmds)))
		return next(ctx, cmds)
	}
}

// TestRandomMissingIDsCostOneQuery: a flood of orders and reads for random ids nobody created
// costs one read of the highest id for as long as it is fresh — no read of a product, no
// Redis command. (The lease is long here so that the one read stays fresh for the whole flood.)
func TestRandomMissingIDsCostOneQuery(t *testing.T) {
	w := newWorld(t, 3)
	c, _ := w.cache(Config{Lease: 10 * time.Second}, nil)
	var commands commandCount
	w.rdb.AddHook(&commands)
	ctx := context.Background()
	const flood = 500
	for i := range flood {
		id := w.id + 1 + rand.Int64N(1<<62)
		if i%2 == 0 {
			if r := c.Refusal(ctx, id); !r.Missing || r.SoldOut {
				t.Fatalf("order for random id %d: %+v, want missing", id, r)
			}
		} else if _, err := c.Product(ctx, id); !errors.Is(err, stock.ErrProductNotFound) {
			t.Fatalf("read of random id %d: %v, want not found", id, err)
		}
	}
	if n := w.highs.Load(); n != 1 {
		t.Errorf("%d reads of the highest product id for %d random ids, want 1", n, flood)
	}
	if n := w.loads.Load(); n != 0 {
		t.Errorf("%d reads of products for %d random ids, want 0", n, flood)
	}
	if n := commands.n.Load(); n != 0 {
		t.Errorf("%d Redis commands for %d random ids, want 0", n, flood)
	}
	for _, use := range []string{"order", "read"} {
		if got := counted(c.metrics.notFounds.WithLabelValues(use, "memory")); got != flood/2 {
			t.Errorf("stocksvc_view_not_found_total{use=%q,from=memory} = %v, want %d", use, got, flood/2)
		}
	}
	// The product that exists is still found, and never counted missing.
	if v, err := c.Product(ctx, w.id); err != nil || v.Stock != 3 {
		t.Errorf("read of the product that exists: %+v, %v", v, err)
	}
}

// TestMissingIDBelowTheHighestIsRemembered: an id below the highest that no product has is read
// once (through a rebuild) and then answered from memory for the lease.
func TestMissingIDBelowTheHighestIsRemembered(t *testing.T) {
	w := newWorld(t, 3)
	gap := w.gap()
	c, _ := w.cache(Config{Lease: 10 * time.Second}, nil)
	var commands commandCount
	w.rdb.AddHook(&commands)
	ctx := context.Background()
	if r := c.Refusal(ctx, gap); !r.Missing {
		t.Fatalf("first order for id %d below the highest: %+v, want missing", gap, r)
	}
	loads, sent := w.loads.Load(), commands.n.Load()
	if loads != 1 {
		t.Errorf("first order for the gap read %d products, want 1", loads)
	}
	for range 100 {
		if r := c.Refusal(ctx, gap); !r.Missing {
			t.Fatalf("order for id %d: %+v, want missing", gap, r)
		}
		if _, err := c.Product(ctx, gap); !errors.Is(err, stock.ErrProductNotFound) {
			t.Fatalf("read of id %d: %v, want not found", gap, err)
		}
	}
	if n := w.loads.Load() - loads; n != 0 {
		t.Errorf("200 more calls for the remembered id read %d products, want 0", n)
	}
	if n := commands.n.Load() - sent; n != 0 {
		t.Errorf("200 more calls for the remembered id sent %d Redis commands, want 0", n)
	}
}

// TestCreationIsNeverHiddenByAReplicasMemory: replica B has just learnt that an id above the
// highest, and an id whose insert has not committed, do not exist; replica A creates both.
// Once each creation is answered (Created has returned), B finds the product at once — for an
// order and for a read — however fresh what it remembered was.
func TestCreationIsNeverHiddenByAReplicasMemory(t *testing.T) {
	w := newWorld(t, 1)
	a, _ := w.cache(Config{}, nil)
	b, _ := w.cache(Config{}, nil)
	ctx := context.Background()
	found := func(round int, how string, id int64) {
		t.Helper()
		if r := b.Refusal(ctx, id); r.Missing {
			t.Fatalf("round %d (%s): an order on B after the creation of %d was answered: missing", round, how, id)
		}
		if v, err := b.Product(ctx, id); err != nil || v.ID != id {
			t.Fatalf("round %d (%s): a read on B after the creation of %d was answered: %+v, %v", round, how, id, v, err)
		}
	}
	for round := range 20 {
		// Above the highest: B reads the highest id just before the insert commits.
		if r := b.Refusal(ctx, 1<<60); !r.Missing {
			t.Fatalf("round %d: B does not know a random id to be missing: %+v", round, r)
		}
		p := w.create("above-" + itoa(int64(round)))
		a.Created(p.ID)
		found(round, "above the highest", p.ID)

		// Below the highest: the insert took its id, then a later product committed first.
		id, tx := w.insert("uncommitted-" + itoa(int64(round)))
		w.create("overtaking-" + itoa(int64(round)))
		if r := b.Refusal(ctx, id); !r.Missing {
			t.Fatalf("round %d: B does not find uncommitted product %d missing: %+v", round, id, r)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		a.Created(id)
		found(round, "committed after a higher id", id)
	}
}

// TestLateJoinerDoesNotTakeAnOldNotFound: a read that joins a flight begun more than a lease
// before it asked does not take that flight's "not found": the flight read Postgres before a
// creation that was answered before this read began.
func TestLateJoinerDoesNotTakeAnOldNotFound(t *testing.T) {
	w := newWorld(t, 1)
	id, tx := w.insert("late")
	w.create("overtaking")
	loaded := make(chan struct{})
	proceed := make(chan struct{})
	var once sync.Once
	c, _ := w.cache(Config{}, source{w: w, after: func() {
		once.Do(func() {
			close(loaded) // the first read of the product has found it missing
			<-proceed
		})
	}})
	joins := make(chan struct{}, 2)
	c.joined = func(int64) { joins <- struct{}{} }
	ctx := context.Background()
	first := make(chan error, 1)
	go func() {
		_, err := c.Product(ctx, id)
		first <- err
	}()
	<-joins
	<-loaded
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	c.Created(id) // the creation is answered: the flight's read is now over a lease old
	second := make(chan error, 1)
	go func() {
		v, err := c.Product(ctx, id)
		if err == nil && v.ID != id {
			err = errors.New("wrong product")
		}
		second <- err
	}()
	<-joins // the second read waits on the flight held after its read of Postgres
	close(proceed)
	if err := <-first; !errors.Is(err, stock.ErrProductNotFound) {
		t.Errorf("the read that began before the commit: %v, want not found", err)
	}
	if err := <-second; err != nil {
		t.Errorf("the read that began after the creation was answered: %v, want the product", err)
	}
}
