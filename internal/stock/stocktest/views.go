package stocktest

import (
	"context"
	"errors"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Views returns stock.Views over m that are never stale: each answer is read from m when it is
// asked for. That keeps every promise of the interface — a view never above the stock, never
// from before a raise, a change of the rules or a creation that has returned — as package
// view's caches keep them with a lease of zero, so that the Service's refusals before the queue
// (a product missing, sold out, its sale not open or ended, a customer at the limit) are tested
// without Redis. What a view costs, and what replicas see of each other's, is package view's,
// tested on Redis.
func (m *MemStore) Views() stock.Views { return memViews{m} }

type memViews struct{ m *MemStore }

var _ stock.Views = memViews{}

func (v memViews) Product(ctx context.Context, id int64) (stock.ProductView, error) {
	p, err := v.m.Product(ctx, id)
	if err != nil {
		return stock.ProductView{}, err
	}
	v.m.mu.Lock()
	read := v.m.now()
	v.m.mu.Unlock()
	return stock.ProductView{Product: p, Read: read, From: stock.FromPostgres}, nil
}

func (v memViews) Refusal(ctx context.Context, id int64) stock.Refusal {
	p, err := v.m.Product(ctx, id)
	switch {
	case errors.Is(err, stock.ErrProductNotFound):
		return stock.Refusal{Missing: true}
	case err != nil:
		return stock.Refusal{}
	}
	return stock.Refusal{SoldOut: p.Stock == 0, Version: p.Version, Sale: p.Sale(), Known: true}
}

// Writing, Committed, Raise and Created have nothing to do: no view is kept between calls.

func (memViews) Writing(context.Context, stock.Write) error { return nil }

func (memViews) Committed(int64, int64, int64, time.Time) {}

func (memViews) Raise(context.Context, int64) (func(*stock.Product), error) {
	return func(*stock.Product) {}, nil
}

func (memViews) Created(int64) {}
