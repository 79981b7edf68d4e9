package stockpg_test

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The Store contract of the purchase path, run against every store: Postgres, and the in-memory
// one that unit tests and benchmarks use. A store that passes decides nothing itself and writes
// a batch all or nothing, under exactly its conditions: every layer's in production, those a
// demonstration mode selects in a demonstration store.

// demos opens a demonstration store, with the conditions d selects, over the data of the store
// under test.
type demos func(d stock.Defense) stock.Store

// opened is a store under test, and a demonstration store over the same data with the
// conditions d selects.
type opened struct {
	store stock.Store
	demo  demos
}

func stores(t *testing.T) map[string]func(t *testing.T) opened {
	return map[string]func(t *testing.T) opened{
		"postgres": func(t *testing.T) opened {
			pool, err := pgxpool.New(context.Background(), testenv.DatabaseURL(t))
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			t.Cleanup(pool.Close)
			return opened{store: stockpg.New(pool), demo: func(d stock.Defense) stock.Store { return stockpg.NewDemo(pool, d) }}
		},
		"memory": func(*testing.T) opened {
			m := stocktest.NewMemStore()
			return opened{store: m, demo: func(d stock.Defense) stock.Store { return m.Demo(d) }}
		},
	}
}

func TestStoreContract(t *testing.T) {
	t.Parallel()
	for name, open := range stores(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range slices.Concat(storeCases, heldCases, saleCases) {
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					o := open(t)
					tc.run(t, o.store, o.demo)
				})
			}
		})
	}
}

type storeCase struct {
	name string
	run  func(t *testing.T, s stock.Store, demo demos)
}

func mustCreate(t *testing.T, s stock.Store, sku string, units int64) int64 {
	t.Helper()
	p, err := s.CreateProduct(context.Background(), stock.NewProduct{SKU: sku, Name: sku, Stock: units})
	if err != nil {
		t.Fatalf("create %s: %v", sku, err)
	}
	return p.ID
}

func mustSnapshot(t *testing.T, s stock.Store, ids []int64, keys ...stock.RecordKey) stock.Snapshot {
	t.Helper()
	snap, err := s.Snapshot(context.Background(), ids, keys, nil)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap
}

func stockOf(t *testing.T, s stock.Store, id int64) int64 {
	t.Helper()
	return mustSnapshot(t, s, []int64{id}).Levels[id].Stock
}

// keyOf is key as customer "c", whose orders sale writes, sends it.
func keyOf(key string) stock.RecordKey { return stock.RecordKey{CustomerID: "c", Key: key} }

// sale is a write of one confirmed order of customer "c", of qty units of product id, read at
// level l.
func sale(id, qty int64, l stock.Level, fence int64, key string) (stock.Write, stock.Order) {
	return saleOf("c", id, qty, l, fence, key)
}

// saleOf is sale for customer.
func saleOf(customer string, id, qty int64, l stock.Level, fence int64, key string) (stock.Write, stock.Order) {
	o := stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: customer, Status: stock.OrderStatusConfirmed, Items: []stock.Item{{ProductID: id, Quantity: qty}}}
	w := stock.Write{Decrements: []stock.Decrement{{ProductID: id, Quantity: qty, Read: l, Fence: fence}}, Orders: []stock.Order{o}}
	if key != "" {
		w.Records = []stock.IdempotencyRecord{{RecordKey: stock.RecordKey{CustomerID: customer, Key: key}, Fingerprint: []byte(key), Order: &o}}
	}
	return w, o
}

var storeCases = []storeCase{
	{"a product's line is stored, changed with the other rules kept, and removed", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		line := stock.LineRules{Admit: 50, AdmissionFor: 2 * time.Minute}
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "lined", Name: "lined", Stock: 9,
			Sale: stock.SaleRules{MaxPerCustomer: 1, Line: line}})
		if err != nil || p.Sale().Line != line {
			t.Fatalf("create = %+v, %v; want the line %+v", p.Sale().Line, err, line)
		}
		if got, err := s.Product(ctx, p.ID); err != nil || got.Sale().Line != line {
			t.Fatalf("read back %+v, %v; want %+v", got.Sale().Line, err, line)
		}
		changed := stock.LineRules{Admit: 3, AdmissionFor: time.Hour}
		if p, err = s.UpdateSale(ctx, p.ID, stock.SaleChange{Line: &changed}); err != nil || p.Sale().Line != changed || p.MaxPerCustomer != 1 {
			t.Fatalf("change the line = %+v, %v; want %+v and the limit kept", p.Sale(), err, changed)
		}
		limit := int64(2)
		if p, err = s.UpdateSale(ctx, p.ID, stock.SaleChange{MaxPerCustomer: &limit}); err != nil || p.Sale().Line != changed {
			t.Fatalf("change the limit = %+v, %v; want the line kept", p.Sale(), err)
		}
		if p, err = s.UpdateSale(ctx, p.ID, stock.SaleChange{ClearLine: true}); err != nil || p.Sale().Line.Lined() || p.MaxPerCustomer != 2 {
			t.Fatalf("remove the line = %+v, %v; want no line, the limit kept", p.Sale(), err)
		}
	}},
	{"the highest product id is the newest product's, not an id a failed insert took", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		if got, err := s.HighestProductID(ctx); err != nil || got != 0 {
			t.Fatalf("highest id with no products = %d, %v; want 0", got, err)
		}
		mustCreate(t, s, "older", 1)
		newest := mustCreate(t, s, "newest", 1)
		// Postgres takes an identity value for the insert it then refuses.
		if _, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "newest", Name: "again", Stock: 1}); !errors.Is(err, stock.ErrDuplicateSKU) {
			t.Fatalf("duplicate SKU: %v", err)
		}
		if got, err := s.HighestProductID(ctx); err != nil || got != newest {
			t.Errorf("highest id = %d, %v; want %d", got, err, newest)
		}
	}},
	{"a snapshot has what exists, and nothing for what does not", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "snap", 7)
		snap := mustSnapshot(t, s, []int64{id, id + 1000}, keyOf("no-such-key"))
		if l, ok := snap.Levels[id]; !ok || l.Stock != 7 {
			t.Errorf("level of %d = %+v (%v), want stock 7", id, l, ok)
		}
		if _, ok := snap.Levels[id+1000]; ok || len(snap.Records) != 0 {
			t.Errorf("snapshot %+v, want no level for a missing product and no records", snap)
		}
	}},
	{"a commit writes the decrement, the orders and the records together", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "commit", 10)
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		w, o := sale(id, 3, l, 5, "k-"+uuid.NewString())
		refusal := stock.IdempotencyRecord{RecordKey: keyOf("r-" + uuid.NewString()), Fingerprint: []byte("r"),
			SoldOut: &stock.SoldOutError{ProductID: id, Requested: 9, Available: 7}}
		w.Records = append(w.Records, refusal)
		c, err := s.Commit(context.Background(), w)
		if err != nil || c.At.IsZero() || len(c.Skipped) != 0 {
			t.Fatalf("commit = %+v, %v; want a time, nothing skipped and no error", c, err)
		}
		snap := mustSnapshot(t, s, []int64{id}, w.Records[0].RecordKey, refusal.RecordKey)
		if got := snap.Levels[id]; got.Stock != 7 || got.Version != l.Version+1 || got.Fence != 5 {
			t.Errorf("level after = %+v, want stock 7, version +1, fence 5", got)
		}
		rec := snap.Records[w.Records[0].RecordKey]
		if rec.Order == nil || rec.Order.ID != o.ID || len(rec.Order.Items) != 1 || rec.Order.Items[0].Quantity != 3 || rec.Order.CreatedAt.IsZero() {
			t.Errorf("record of the sale = %+v, want order %s with its item and time", rec, o.ID)
		}
		if got := snap.Records[refusal.RecordKey].SoldOut; got == nil || *got != *refusal.SoldOut {
			t.Errorf("record of the refusal = %+v, want %+v", got, refusal.SoldOut)
		}
		if got, err := s.Order(context.Background(), o.ID); err != nil || got.ID != o.ID {
			t.Errorf("order = %+v, %v", got, err)
		}
	}},
	{"the version layer refuses a write read at an older version", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "version", 10)
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		l.Version--
		w, o := sale(id, 1, l, 0, "")
		wantRefused(t, demo(stock.Defense{Version: true, Check: true}), w, id, 10, o.ID)
		w, o = sale(id, 1, l, 1, "")
		wantRefused(t, s, w, id, 10, o.ID)
	}},
	{"the guard refuses a sum larger than the stock", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "guard", 2)
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		w, o := sale(id, 3, l, 0, "")
		wantRefused(t, demo(stock.Defense{Guard: true, Check: true}), w, id, 2, o.ID)
		w, o = sale(id, 3, l, 1, "")
		wantRefused(t, s, w, id, 2, o.ID)
	}},
	{"the fence refuses an older fencing token", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "fence", 10)
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		first, _ := sale(id, 1, l, 8, "")
		if _, err := s.Commit(context.Background(), first); err != nil {
			t.Fatalf("first write: %v", err)
		}
		l = mustSnapshot(t, s, []int64{id}).Levels[id]
		w, o := sale(id, 1, l, 7, "")
		wantRefused(t, s, w, id, 9, o.ID)
	}},
	{"the CHECK constraint refuses what no condition stopped", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "check", 1)
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		w, o := sale(id, 2, l, 0, "")
		_, err := demo(stock.Defense{Check: true}).Commit(context.Background(), w)
		var caught *stock.CaughtError
		if !errors.As(err, &caught) || caught.Layer != stock.LayerCheck || !errors.Is(err, stock.ErrConflict) {
			t.Fatalf("commit = %v, want the check layer's ErrConflict", err)
		}
		wantNothingWritten(t, s, id, 1, o.ID)
	}},
	{"the naive write writes back what it computed", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "naive", 5)
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		first, _ := sale(id, 1, l, 0, "")
		second, _ := sale(id, 1, l, 0, "") // read before the first wrote
		for _, w := range []stock.Write{first, second} {
			if _, err := demo(stock.Defense{}).Commit(context.Background(), w); err != nil {
				t.Fatalf("naive commit: %v", err)
			}
		}
		if got := stockOf(t, s, id); got != 4 {
			t.Errorf("stock = %d after two naive sales of 1 from 5, want 4: the lost update", got)
		}
	}},
	{"a key that already has a record refuses the whole write", func(t *testing.T, s stock.Store, demo demos) {
		id := mustCreate(t, s, "dup-key", 10)
		key := "dup-" + uuid.NewString()
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		first, _ := sale(id, 1, l, 1, key)
		if _, err := s.Commit(context.Background(), first); err != nil {
			t.Fatalf("first: %v", err)
		}
		l = mustSnapshot(t, s, []int64{id}).Levels[id]
		again, o := sale(id, 1, l, 2, key)
		if _, err := s.Commit(context.Background(), again); !errors.Is(err, stock.ErrConflict) {
			t.Fatalf("second write under the same key = %v, want ErrConflict", err)
		}
		wantNothingWritten(t, s, id, 9, o.ID)
	}},
	{"a write that may skip leaves out the orders whose key has a record, with their units", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		id := mustCreate(t, s, "skip", 10)
		stored := "stored-" + uuid.NewString()
		first, firstOrder := sale(id, 1, mustSnapshot(t, s, []int64{id}).Levels[id], 1, stored)
		if _, err := s.Commit(ctx, first); err != nil {
			t.Fatalf("first: %v", err)
		}
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		retry, retryOrder := sale(id, 2, l, 2, stored)
		fresh, freshOrder := sale(id, 3, l, 2, "fresh-"+uuid.NewString())
		_, plainOrder := sale(id, 4, l, 2, "")
		w := stock.Write{SkipStored: true,
			Decrements: []stock.Decrement{{ProductID: id, Quantity: 9, Read: l, Fence: 2}},
			Orders:     []stock.Order{retryOrder, freshOrder, plainOrder},
			Records:    append(retry.Records, fresh.Records...)}
		c, err := s.Commit(ctx, w)
		if err != nil || len(c.Skipped) != 1 || c.Skipped[0] != retryOrder.ID || c.At.IsZero() {
			t.Fatalf("commit = %+v, %v; want the retry's order skipped, the rest written", c, err)
		}
		firstStored, err := s.Order(ctx, firstOrder.ID)
		if err != nil {
			t.Fatalf("the first order: %v", err)
		}
		if rec, ok := c.Stored[keyOf(stored)]; !ok || rec.Order == nil || rec.Order.ID != firstOrder.ID ||
			!rec.Order.CreatedAt.Equal(firstStored.CreatedAt) || string(rec.Fingerprint) != stored {
			t.Errorf("stored records the write found = %+v, want the first order's (id %s, created %v) under %s", c.Stored, firstOrder.ID, firstStored.CreatedAt, stored)
		}
		if got := mustSnapshot(t, s, []int64{id}).Levels[id]; got.Stock != 2 || got.Version != l.Version+1 {
			t.Errorf("level = %+v, want 9 - 1 - 3 - 4 = 2 left, one version more: the skipped order's units kept", got)
		}
		if _, err := s.Order(ctx, retryOrder.ID); !errors.Is(err, stock.ErrOrderNotFound) {
			t.Errorf("the skipped order: %v, want not found", err)
		}
		for _, o := range []stock.Order{freshOrder, plainOrder} {
			if _, err := s.Order(ctx, o.ID); err != nil {
				t.Errorf("order %s: %v, want written", o.ID, err)
			}
		}
		freshKey := fresh.Records[0].RecordKey
		recs, err := s.Records(ctx, []stock.RecordKey{keyOf(stored), freshKey, keyOf("none-" + uuid.NewString())})
		if err != nil || len(recs) != 2 || recs[keyOf(stored)].Order == nil || recs[keyOf(stored)].Order.ID != firstOrder.ID ||
			recs[freshKey].Order == nil || recs[freshKey].Order.ID != freshOrder.ID {
			t.Errorf("records = %+v, %v; want the first order's under the stored key and the fresh one's", recs, err)
		}
	}},
	{"a write that may skip, refused, writes nothing: no claim is left behind", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		id := mustCreate(t, s, "skip-refused", 10)
		for name, d := range map[string]stock.Defense{"version": {Version: true, Check: true}, "guard": {Guard: true, Check: true}, "fence": stock.DefaultDefense()} {
			l := mustSnapshot(t, s, []int64{id}).Levels[id]
			qty, fence := int64(1), int64(0)
			switch name {
			case "version":
				l.Version--
			case "guard":
				qty = 11
			case "fence":
				bump, _ := sale(id, 1, l, 100, "")
				if _, err := s.Commit(ctx, bump); err != nil {
					t.Fatalf("fence bump: %v", err)
				}
				l, fence = mustSnapshot(t, s, []int64{id}).Levels[id], 99
			}
			left := mustSnapshot(t, s, []int64{id}).Levels[id].Stock
			w, o := sale(id, qty, l, fence, "claim-"+uuid.NewString())
			w.SkipStored = true
			wantRefused(t, demo(d), w, id, left, o.ID)
			if recs, err := s.Records(ctx, []stock.RecordKey{w.Records[0].RecordKey}); err != nil || len(recs) != 0 {
				t.Errorf("%s: records after a refused write = %+v, %v; want its key unclaimed", name, recs, err)
			}
		}
	}},
	{"a write that may skip, all of whose orders are left out, writes nothing", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		id := mustCreate(t, s, "skip-all", 10)
		key := "all-" + uuid.NewString()
		first, _ := sale(id, 1, mustSnapshot(t, s, []int64{id}).Levels[id], 1, key)
		if _, err := s.Commit(ctx, first); err != nil {
			t.Fatalf("first: %v", err)
		}
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		w, o := sale(id, 1, l, 2, key)
		w.SkipStored = true
		wantRefused(t, s, w, id, 9, o.ID)
		if got := mustSnapshot(t, s, []int64{id}).Levels[id]; !reflect.DeepEqual(got, l) {
			t.Errorf("level = %+v, want %+v untouched", got, l)
		}
	}},
	{"a cart is all or nothing", func(t *testing.T, s stock.Store, demo demos) {
		a, b := mustCreate(t, s, "cart-a", 5), mustCreate(t, s, "cart-b", 5)
		snap := mustSnapshot(t, s, []int64{a, b})
		stale := snap.Levels[b]
		stale.Version--
		o := stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c", Status: stock.OrderStatusConfirmed,
			Items: []stock.Item{{ProductID: a, Quantity: 1}, {ProductID: b, Quantity: 1}}}
		w := stock.Write{Orders: []stock.Order{o}, Decrements: []stock.Decrement{
			{ProductID: a, Quantity: 1, Read: snap.Levels[a], Fence: 1},
			{ProductID: b, Quantity: 1, Read: stale, Fence: 1},
		}}
		if _, err := s.Commit(context.Background(), w); !errors.Is(err, stock.ErrConflict) {
			t.Fatalf("cart with one stale product = %v, want ErrConflict", err)
		}
		wantNothingWritten(t, s, a, 5, o.ID)
		w.Decrements[1].Read = snap.Levels[b]
		if _, err := s.Commit(context.Background(), w); err != nil {
			t.Fatalf("cart: %v", err)
		}
		if stockOf(t, s, a) != 4 || stockOf(t, s, b) != 4 {
			t.Errorf("stocks after the cart: %d, %d; want 4 and 4", stockOf(t, s, a), stockOf(t, s, b))
		}
	}},
	{"a restock with a key is done once, and replayed as it left the product", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		id := mustCreate(t, s, "restock-key", 1)
		r := stock.Restocking{ProductID: id, Quantity: 5, Key: "rk-" + uuid.NewString(), Fingerprint: []byte("5 units")}
		first, err := s.Restock(ctx, r)
		if err != nil || first.Replayed || first.Product.Stock != 6 {
			t.Fatalf("first restock = %+v, %v; want stock 6, not replayed", first, err)
		}
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		sold, _ := sale(id, 2, l, 0, "")
		if _, err := demo(stock.Defense{Version: true, Guard: true, Check: true}).Commit(ctx, sold); err != nil {
			t.Fatalf("sale: %v", err)
		}
		again, err := s.Restock(ctx, r)
		if err != nil || !again.Replayed || again.Product.Stock != 6 || again.Product.Version != first.Product.Version {
			t.Errorf("retried restock = %+v, %v; want the first one's product (stock 6, version %d), replayed", again, err, first.Product.Version)
		}
		if got := stockOf(t, s, id); got != 4 {
			t.Errorf("stock = %d, want 4: the restock added once, the sale taken", got)
		}
		other := r
		other.Fingerprint = []byte("7 units")
		if _, err := s.Restock(ctx, other); !errors.Is(err, stock.ErrIdempotencyKeyReused) {
			t.Errorf("same key, another restock = %v, want ErrIdempotencyKeyReused", err)
		}
		elsewhere := r
		elsewhere.ProductID = mustCreate(t, s, "restock-key-2", 1)
		if _, err := s.Restock(ctx, elsewhere); !errors.Is(err, stock.ErrIdempotencyKeyReused) {
			t.Errorf("same key, another product = %v, want ErrIdempotencyKeyReused", err)
		}
		if a, err := s.Audit(ctx, id); err != nil || a.Received != 6 {
			t.Errorf("audit = %+v, %v; want 6 received", a, err)
		}
	}},
	{"a key is its customer's own: the same key from another customer is another record", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		id := mustCreate(t, s, "scoped-key", 10)
		key := "shared-" + uuid.NewString()
		cKey, dKey := keyOf(key), stock.RecordKey{CustomerID: "d", Key: key}
		first, cOrder := sale(id, 1, mustSnapshot(t, s, []int64{id}).Levels[id], 1, key)
		if _, err := s.Commit(ctx, first); err != nil {
			t.Fatalf("c's order: %v", err)
		}
		// All or nothing: nothing of d's is stored under the key, so nothing refuses it.
		second, dOrder := saleOf("d", id, 2, mustSnapshot(t, s, []int64{id}).Levels[id], 2, key)
		if c, err := s.Commit(ctx, second); err != nil || len(c.Skipped) != 0 {
			t.Fatalf("d's order under the same key = %+v, %v; want it written", c, err)
		}
		recs, err := s.Records(ctx, []stock.RecordKey{cKey, dKey, {CustomerID: "e", Key: key}})
		if err != nil || len(recs) != 2 || recs[cKey].Order == nil || recs[cKey].Order.ID != cOrder.ID ||
			recs[dKey].Order == nil || recs[dKey].Order.ID != dOrder.ID || recs[dKey].CustomerID != "d" {
			t.Fatalf("records = %+v, %v; want c's order under c's key, d's under d's, none for e", recs, err)
		}
		if keys, err := s.StoredKeys(ctx, id, 10); err != nil || len(keys) != 2 || !slices.Contains(keys, cKey) || !slices.Contains(keys, dKey) {
			t.Errorf("stored keys of the product = %v, %v; want c's and d's", keys, err)
		}
		// A write that may skip leaves out c's retry, not e's first order under the key.
		l := mustSnapshot(t, s, []int64{id}).Levels[id]
		retry, retryOrder := sale(id, 1, l, 3, key)
		other, eOrder := saleOf("e", id, 3, l, 3, key)
		w := stock.Write{SkipStored: true, Decrements: []stock.Decrement{{ProductID: id, Quantity: 4, Read: l, Fence: 3}},
			Orders: []stock.Order{retryOrder, eOrder}, Records: append(retry.Records, other.Records...)}
		c, err := s.Commit(ctx, w)
		if err != nil || len(c.Skipped) != 1 || c.Skipped[0] != retryOrder.ID {
			t.Fatalf("commit = %+v, %v; want c's retry left out, e's order written", c, err)
		}
		if rec, ok := c.Stored[cKey]; !ok || rec.Order == nil || rec.Order.ID != cOrder.ID {
			t.Errorf("stored records the write found = %+v, want c's order under c's key", c.Stored)
		}
		if got := stockOf(t, s, id); got != 10-1-2-3 {
			t.Errorf("stock = %d, want %d: three customers' orders under one key, each sold once", got, 10-1-2-3)
		}
	}},
	{"a write with only refusals needs no decrement", func(t *testing.T, s stock.Store, demo demos) {
		key := keyOf("refused-" + uuid.NewString())
		w := stock.Write{Records: []stock.IdempotencyRecord{{RecordKey: key, Fingerprint: []byte("f"),
			SoldOut: &stock.SoldOutError{ProductID: 1, Requested: 2, Available: 0}}}}
		if _, err := s.Commit(context.Background(), w); err != nil {
			t.Fatalf("commit: %v", err)
		}
		if rec := mustSnapshot(t, s, nil, key).Records[key]; rec.SoldOut == nil {
			t.Errorf("record = %+v, want the refusal", rec)
		}
	}},
}

// wantRefused commits w, expects ErrConflict, and checks that nothing was written.
func wantRefused(t *testing.T, s stock.Store, w stock.Write, id, stockLeft int64, order uuid.UUID) {
	t.Helper()
	_, err := s.Commit(context.Background(), w)
	if !errors.Is(err, stock.ErrConflict) {
		t.Fatalf("commit = %v, want ErrConflict", err)
	}
	if _, refused := errors.AsType[*stock.RefusedError](err); !refused && len(w.Decrements) > 0 && !w.SkipStored {
		t.Errorf("commit = %v, want a *stock.RefusedError naming the write's conditions", err)
	}
	wantNothingWritten(t, s, id, stockLeft, order)
}

func wantNothingWritten(t *testing.T, s stock.Store, id, stockLeft int64, order uuid.UUID) {
	t.Helper()
	if got := stockOf(t, s, id); got != stockLeft {
		t.Errorf("stock = %d, want %d untouched", got, stockLeft)
	}
	if _, err := s.Order(context.Background(), order); !errors.Is(err, stock.ErrOrderNotFound) {
		t.Errorf("order %s after a refused write: %v, want ErrOrderNotFound", order, err)
	}
}
