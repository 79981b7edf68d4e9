package stocktest

import (
	"context"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// holdOf is the hold an order is written with: the shortest of its products' (0: none).
// m.mu is held.
func (m *MemStore) holdOf(o stock.Order) time.Duration {
	var hold time.Duration
	for _, it := range o.Items {
		if x := m.products[it.ProductID]; x != nil && x.p.HoldFor > 0 && (hold == 0 || x.p.HoldFor < hold) {
			hold = x.p.HoldFor
		}
	}
	return hold
}

// ConfirmHold implements stock.Store.
func (m *MemStore) ConfirmHold(_ context.Context, id uuid.UUID, customer string) (stock.Order, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.orders[id]
	if !ok || customer != "" && o.CustomerID != customer {
		return stock.Order{}, false, stock.ErrOrderNotFound
	}
	now := m.now()
	switch {
	case o.Status == stock.OrderStatusHeld && now.Before(*o.ExpiresAt):
		o.Status, o.DecidedAt = stock.OrderStatusConfirmed, &now
		m.orders[id] = o
		m.unhold(o)
		return o, true, nil
	case o.Status == stock.OrderStatusConfirmed:
		return o, false, nil
	case o.Status == stock.OrderStatusCancelled:
		return stock.Order{}, false, stock.ErrOrderCancelled
	}
	return stock.Order{}, false, stock.ErrHoldExpired
}

// CancelHold implements stock.Store.
func (m *MemStore) CancelHold(ctx context.Context, id uuid.UUID, customer string, products []int64) (stock.Cancel, error) {
	m.mu.Lock()
	o, ok := m.orders[id]
	m.mu.Unlock()
	if !ok || customer != "" && o.CustomerID != customer {
		return stock.Cancel{}, stock.ErrOrderNotFound
	}
	rel, err := m.ReleaseHolds(ctx, []uuid.UUID{id}, products, false)
	if err != nil {
		return stock.Cancel{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return stock.Cancel{Order: m.orders[id], Cancelled: len(rel.Lag) == 1, Products: rel.Products}, nil
}

// Replicated implements stock.Store: a write in memory is as lasting as it gets at once.
func (m *MemStore) Replicated(context.Context) error { return nil }

// ReleaseHolds implements stock.Store.
func (m *MemStore) ReleaseHolds(_ context.Context, ids []uuid.UUID, _ []int64, expire bool) (stock.Released, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	rel := stock.Released{Lag: map[uuid.UUID]time.Duration{}}
	raised := map[int64]bool{}
	for _, id := range ids {
		o, ok := m.orders[id]
		if !ok || o.Status != stock.OrderStatusHeld || expire && now.Before(*o.ExpiresAt) {
			continue
		}
		o.Status, o.DecidedAt = stock.OrderStatusCancelled, &now
		if expire {
			o.Status = stock.OrderStatusExpired
		}
		m.orders[id] = o
		rel.Lag[id] = now.Sub(*o.ExpiresAt)
		for _, it := range o.Items {
			x := m.products[it.ProductID]
			x.p.Stock += it.Quantity
			x.p.Version++
			x.sold -= it.Quantity
			if n, ok := x.bought[o.CustomerID]; ok {
				x.bought[o.CustomerID] = n - it.Quantity
			}
			raised[it.ProductID] = true
			rel.Units += it.Quantity
		}
		m.unhold(o)
	}
	for id := range raised {
		rel.Products = append(rel.Products, m.products[id].p)
	}
	slices.SortFunc(rel.Products, func(a, b stock.Product) int { return int(a.ID - b.ID) })
	return rel, nil
}

// unhold takes a hold's units off its customer's held units, never below 0, as the Postgres
// store does. m.mu is held.
func (m *MemStore) unhold(o stock.Order) {
	for _, it := range o.Items {
		x := m.products[it.ProductID]
		x.held[o.CustomerID] = max(x.held[o.CustomerID]-it.Quantity, 0)
	}
}

// DueHolds implements stock.Store.
func (m *MemStore) DueHolds(_ context.Context, among []uuid.UUID, grace time.Duration, limit int) (map[uuid.UUID][]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cutoff := m.now().Add(-grace)
	due := map[uuid.UUID][]int64{}
	for id, o := range m.orders {
		if len(due) >= limit {
			break
		}
		if o.Status == stock.OrderStatusHeld && !o.ExpiresAt.After(cutoff) && (among == nil || slices.Contains(among, id)) {
			var products []int64
			for _, it := range o.Items {
				products = append(products, it.ProductID)
			}
			due[id] = products
		}
	}
	return due, nil
}
