package stockpg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// saleCases are the Store contract of a product's sale window and of changes to its rules, run
// against every store with the rest of the contract: the core's tests of the rules rely on the
// in-memory store to behave so (internal/stock, memWorld).
var saleCases = []storeCase{
	{"a write outside the sale window is refused, by the store's clock, and allowed once it opens", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		opens := time.Now().Add(time.Hour)
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "window", Name: "window", Stock: 5, Sale: stock.SaleRules{StartsAt: &opens}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		w, o := sale(p.ID, 1, mustSnapshot(t, s, []int64{p.ID}).Levels[p.ID], 1, "")
		wantRefused(t, s, w, p.ID, 5, o.ID)
		if _, err := s.UpdateSale(ctx, p.ID, stock.SaleChange{ClearStartsAt: true}); err != nil {
			t.Fatalf("open the sale: %v", err)
		}
		w, _ = sale(p.ID, 1, mustSnapshot(t, s, []int64{p.ID}).Levels[p.ID], 1, "")
		if _, err := s.Commit(ctx, w); err != nil {
			t.Fatalf("a write once the sale is open: %v", err)
		}
	}},
	{"a change of the sale rules moves the version; ending now ends on the store's clock; an end before the start is refused", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		id := mustCreate(t, s, "rules", 5)
		read := mustSnapshot(t, s, []int64{id}).Levels[id]
		// A change that sets nothing still moves the version: a batch decided from the rules
		// before it is refused by its version check.
		if p, err := s.UpdateSale(ctx, id, stock.SaleChange{}); err != nil || p.Version != read.Version+1 {
			t.Fatalf("a change = %+v, %v; want version %d", p, err, read.Version+1)
		}
		stale, o := sale(id, 1, read, 1, "")
		wantRefused(t, s, stale, id, 5, o.ID)
		before := time.Now()
		p, err := s.UpdateSale(ctx, id, stock.SaleChange{EndNow: true})
		if err != nil || p.SaleEndsAt == nil || p.SaleEndsAt.Before(before.Add(-time.Second)) || p.SaleEndsAt.After(time.Now().Add(time.Second)) {
			t.Fatalf("end now = %+v, %v; want an end at about %v", p.SaleEndsAt, err, before)
		}
		w, o := sale(id, 1, mustSnapshot(t, s, []int64{id}).Levels[id], 1, "")
		wantRefused(t, s, w, id, 5, o.ID)
		var invalid *stock.ValidationError
		if _, err := s.UpdateSale(ctx, id, stock.SaleChange{StartsAt: ptr(p.SaleEndsAt.Add(time.Hour))}); !errors.As(err, &invalid) || invalid.Field != "sale_ends_at" {
			t.Errorf("a start after the end = %v, want invalid sale_ends_at", err)
		}
	}},
}
