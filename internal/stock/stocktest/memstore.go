// Package stocktest provides an in-memory stock.Store, with an in-process stock.Locker and
// stock.Views over the store, for unit tests of the service's rules and for benchmarks of
// everything above the database. The store keeps the Store contract — the same conditions on
// every decrement, the same errors — but nothing it holds survives the process, and it is no
// stand-in for Postgres in integration tests: those run against the real one.
package stocktest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// MemStore is a stock.Store in memory. It is safe for concurrent use; every method is atomic.
type MemStore struct {
	mu       sync.Mutex
	products map[int64]*product
	orders   map[uuid.UUID]stock.Order
	records  map[stock.RecordKey]record // by key, in its customer's scope
	restocks map[string]restock         // by idempotency key
	nextID   int64
	now      func() time.Time
}

type product struct {
	p        stock.Product
	fence    int64
	received int64
	sold     int64
	// bought counts units per customer while the product has a limit (customer_purchases).
	bought map[string]int64
	// held counts units per customer in held orders (customer_holds).
	held map[string]int64
}

type restock struct {
	productID   int64
	fingerprint []byte
	after       stock.Product
}

type record struct {
	rec     stock.IdempotencyRecord
	created time.Time
}

var _ stock.Store = (*MemStore)(nil)

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{products: map[int64]*product{}, orders: map[uuid.UUID]stock.Order{},
		records: map[stock.RecordKey]record{}, restocks: map[string]restock{}, now: time.Now}
}

// SetClock sets the store's clock, which stands for Postgres's: it decides whether a sale is
// open to a write, when a hold expires and how old a key's record is. NewMemStore's is
// time.Now; a test moves time by setting another.
func (m *MemStore) SetClock(now func() time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now = now
}

// CreateProduct implements stock.Store.
func (m *MemStore) CreateProduct(_ context.Context, p stock.NewProduct) (stock.Product, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, x := range m.products {
		if x.p.SKU == p.SKU {
			return stock.Product{}, stock.ErrDuplicateSKU
		}
	}
	now := m.now()
	x := &product{p: stock.Product{ID: m.nextID + 1, SKU: p.SKU, Name: p.Name, Stock: p.Stock, CreatedAt: now, UpdatedAt: now,
		SaleStartsAt: p.Sale.StartsAt, SaleEndsAt: p.Sale.EndsAt, MaxPerCustomer: p.Sale.MaxPerCustomer, HoldFor: p.Sale.HoldFor,
		MaxHeldPerCustomer: cmp.Or(p.Sale.MaxHeldPerCustomer, stock.DefaultMaxQuantity),
		LineAdmit:          p.Sale.Line.Admit, LineAdmissionFor: p.Sale.Line.AdmissionFor}, received: p.Stock,
		bought: map[string]int64{}, held: map[string]int64{}}
	if err := refusedRule(x.p); err != nil {
		return stock.Product{}, err
	}
	m.nextID++
	m.products[x.p.ID] = x
	return x.p, nil
}

// Product implements stock.Store.
func (m *MemStore) Product(_ context.Context, id int64) (stock.Product, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x, ok := m.products[id]
	if !ok {
		return stock.Product{}, &stock.ProductNotFoundError{ProductID: id}
	}
	return x.p, nil
}

// HighestProductID implements stock.Store.
func (m *MemStore) HighestProductID(context.Context) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var highest int64
	for id := range m.products {
		highest = max(highest, id)
	}
	return highest, nil
}

// Restock implements stock.Store.
func (m *MemStore) Restock(_ context.Context, r stock.Restocking) (stock.RestockResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if r.Key != "" {
		if done, ok := m.restocks[r.Key]; ok {
			if done.productID != r.ProductID || !bytes.Equal(done.fingerprint, r.Fingerprint) {
				return stock.RestockResult{}, stock.ErrIdempotencyKeyReused
			}
			return stock.RestockResult{Product: done.after, Replayed: true}, nil
		}
	}
	x, ok := m.products[r.ProductID]
	if !ok {
		return stock.RestockResult{}, &stock.ProductNotFoundError{ProductID: r.ProductID}
	}
	if r.Fence > 0 && x.fence > r.Fence {
		return stock.RestockResult{}, &stock.CaughtError{Layer: stock.LayerFence, ProductID: r.ProductID,
			Err: fmt.Errorf("%w: fence %d is older than %d", stock.ErrLockLost, r.Fence, x.fence)}
	}
	x.fence = max(x.fence, r.Fence)
	x.p.Stock += r.Quantity
	x.p.Version++
	x.p.UpdatedAt = m.now()
	x.received += r.Quantity
	if r.Key != "" {
		m.restocks[r.Key] = restock{productID: r.ProductID, fingerprint: r.Fingerprint, after: x.p}
	}
	return stock.RestockResult{Product: x.p}, nil
}

// Audit implements stock.Store.
func (m *MemStore) Audit(_ context.Context, id int64) (stock.Audit, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x, ok := m.products[id]
	if !ok {
		return stock.Audit{}, &stock.ProductNotFoundError{ProductID: id}
	}
	a := stock.Audit{ProductID: id, Stock: x.p.Stock, Received: x.received}
	for _, o := range m.orders {
		for _, it := range o.Items {
			switch {
			case it.ProductID != id:
			case o.Status == stock.OrderStatusConfirmed:
				a.Sold += it.Quantity
			case o.Status == stock.OrderStatusHeld:
				a.Held += it.Quantity
			}
		}
	}
	return a, nil
}

// Order implements stock.Store.
func (m *MemStore) Order(_ context.Context, id uuid.UUID) (stock.Order, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.orders[id]
	if !ok {
		return stock.Order{}, stock.ErrOrderNotFound
	}
	return o, nil
}

// Snapshot implements stock.Store.
func (m *MemStore) Snapshot(_ context.Context, ids []int64, keys []stock.RecordKey, customers []string) (stock.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := stock.Snapshot{Now: m.now(), Levels: make(map[int64]stock.Level, len(ids)), Records: map[stock.RecordKey]stock.IdempotencyRecord{}}
	for _, id := range ids {
		if x, ok := m.products[id]; ok {
			l := stock.Level{Stock: x.p.Stock, Version: x.p.Version, Fence: x.fence, Sale: x.p.Sale()}
			if l.Sale.Limited() {
				l.Bought = counts(x.bought, customers)
			}
			if l.Sale.HoldFor > 0 || len(ids) > 1 {
				l.Held = counts(x.held, customers)
			}
			s.Levels[id] = l
		}
	}
	for _, k := range keys {
		if r, ok := m.records[k]; ok {
			s.Records[k] = r.rec
		}
	}
	return s, nil
}

// counts returns what of has for customers, those with more than 0; nil when none has.
func counts(of map[string]int64, customers []string) map[string]int64 {
	var out map[string]int64
	for _, c := range customers {
		if n := of[c]; n > 0 {
			if out == nil {
				out = map[string]int64{}
			}
			out[c] = n
		}
	}
	return out
}

// Records implements stock.Store.
func (m *MemStore) Records(_ context.Context, keys []stock.RecordKey) (map[stock.RecordKey]stock.IdempotencyRecord, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[stock.RecordKey]stock.IdempotencyRecord{}
	for _, k := range keys {
		if r, ok := m.records[k]; ok {
			out[k] = r.rec
		}
	}
	return out, nil
}

// Demo returns a store over m's data whose writes carry only the conditions d selects, as
// stockpg.NewDemo's do.
func (m *MemStore) Demo(d stock.Defense) stock.Store { return demoStore{m, d} }

type demoStore struct {
	*MemStore
	conditions stock.Defense
}

func (s demoStore) Commit(ctx context.Context, w stock.Write) (stock.Committed, error) {
	return s.commit(w, s.conditions)
}

// Commit implements stock.Store with every condition of the defense, as the Postgres store
// applies them: all or nothing, except that with w.SkipStored the orders whose key has a record
// are left out, with their units.
func (m *MemStore) Commit(_ context.Context, w stock.Write) (stock.Committed, error) {
	return m.commit(w, stock.DefaultDefense())
}

func (m *MemStore) commit(w stock.Write, cond stock.Defense) (stock.Committed, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var c stock.Committed
	if w.SkipStored {
		c.Skipped, c.Stored = m.stored(w.Records)
		if len(c.Skipped) > 0 {
			w = w.Without(c.Skipped)
			if len(w.Orders) == 0 {
				return stock.Committed{}, &stock.RefusedError{Conditions: cond, Reason: "every order's key was stored meanwhile"}
			}
		}
	}
	if err := m.refused(w, cond); err != nil {
		return stock.Committed{}, err
	}
	bought, err := m.bought(w.Orders)
	if err != nil {
		return stock.Committed{}, err
	}
	held, err := m.held(w.Orders)
	if err != nil {
		return stock.Committed{}, err
	}
	c.At = m.now()
	c.Holds = m.apply(w, cond, c.At, bought, held)
	return c, nil
}

// stored returns the orders of records whose key has a record already, and those records.
// m.mu is held.
func (m *MemStore) stored(records []stock.IdempotencyRecord) ([]uuid.UUID, map[stock.RecordKey]stock.IdempotencyRecord) {
	var skipped []uuid.UUID
	var stored map[stock.RecordKey]stock.IdempotencyRecord
	for _, r := range records {
		if have, taken := m.records[r.RecordKey]; taken && r.Order != nil {
			skipped = append(skipped, r.Order.ID)
			if stored == nil {
				stored = map[stock.RecordKey]stock.IdempotencyRecord{}
			}
			stored[r.RecordKey] = have.rec
		}
	}
	return skipped, stored
}

// refused returns the refusal of w by the conditions cond selects, the sale window, the CHECK
// on the stock or a key that has a record, as the Postgres store reports each; nil when w may
// be written. m.mu is held.
func (m *MemStore) refused(w stock.Write, cond stock.Defense) error {
	for _, dec := range w.Decrements {
		x, ok := m.products[dec.ProductID]
		if !ok {
			return fmt.Errorf("%w: product %d is gone", stock.ErrConflict, dec.ProductID)
		}
		refused := cond.Version && x.p.Version != dec.Read.Version ||
			cond.Guard && x.p.Stock < dec.Quantity ||
			cond.Lock && x.fence > dec.Fence ||
			!saleOpen(x.p, m.now())
		if refused {
			return &stock.RefusedError{Conditions: cond, Reason: fmt.Sprintf("the decrement of product %d matched no row", dec.ProductID)}
		}
		left := x.p.Stock - dec.Quantity
		if cond.Naive() {
			left = dec.Read.Stock - dec.Quantity
		}
		if left < 0 {
			return &stock.CaughtError{Layer: stock.LayerCheck, ProductID: dec.ProductID,
				Err: fmt.Errorf("%w: stock would be %d", stock.ErrConflict, left)}
		}
	}
	for _, r := range w.Records {
		if _, taken := m.records[r.RecordKey]; taken {
			return fmt.Errorf("%w: key %q of customer %q has a record", stock.ErrConflict, r.Key, r.CustomerID)
		}
	}
	return nil
}

// bought returns what the customers of orders will have bought of each product with a limit,
// or the refusal of customer_purchases' CHECK. m.mu is held.
func (m *MemStore) bought(orders []stock.Order) (map[int64]map[string]int64, error) {
	bought := map[int64]map[string]int64{}
	for _, o := range orders {
		for _, it := range o.Items {
			x := m.products[it.ProductID]
			if x == nil || x.p.MaxPerCustomer == 0 {
				continue
			}
			if bought[it.ProductID] == nil {
				bought[it.ProductID] = map[string]int64{}
			}
			n, ok := bought[it.ProductID][o.CustomerID]
			if !ok {
				n = x.bought[o.CustomerID]
			}
			n += it.Quantity
			if n > x.p.MaxPerCustomer {
				return nil, &stock.CaughtError{Layer: stock.LayerLimit, ProductID: it.ProductID,
					Err: fmt.Errorf("%w: customer %q would have %d", stock.ErrConflict, o.CustomerID, n)}
			}
			bought[it.ProductID][o.CustomerID] = n
		}
	}
	return bought, nil
}

// apply writes w, which refused found nothing against, at now, with what its customers will
// have bought and hold, and returns the orders it held with when each expires. m.mu is held.
func (m *MemStore) apply(w stock.Write, cond stock.Defense, now time.Time, bought, held map[int64]map[string]int64) map[uuid.UUID]time.Time {
	for id, customers := range bought {
		for c, n := range customers {
			m.products[id].bought[c] = n
		}
	}
	for id, customers := range held {
		for c, n := range customers {
			m.products[id].held[c] = n
		}
	}
	for _, dec := range w.Decrements {
		x := m.products[dec.ProductID]
		if cond.Naive() {
			x.p.Stock = dec.Read.Stock - dec.Quantity
		} else {
			x.p.Stock -= dec.Quantity
		}
		x.p.Version++
		x.p.UpdatedAt = now
		x.sold += dec.Quantity
		if cond.Lock {
			x.fence = dec.Fence
		}
	}
	var holds map[uuid.UUID]time.Time
	for _, o := range w.Orders {
		o.CreatedAt = now
		if hold := m.holdOf(o); hold > 0 {
			expires := now.Add(hold)
			o.Status, o.ExpiresAt = stock.OrderStatusHeld, &expires
			if holds == nil {
				holds = map[uuid.UUID]time.Time{}
			}
			holds[o.ID] = expires
		}
		m.orders[o.ID] = o
	}
	for _, r := range w.Records {
		if r.Order != nil {
			o := m.orders[r.Order.ID]
			r.Order = &o
		}
		m.records[r.RecordKey] = record{rec: r, created: now}
	}
	return holds
}

// held returns what the customers of orders will hold of each product of a held order, or
// the refusal of customer_holds' CHECK. m.mu is held.
func (m *MemStore) held(orders []stock.Order) (map[int64]map[string]int64, error) {
	held := map[int64]map[string]int64{}
	for _, o := range orders {
		if m.holdOf(o) == 0 {
			continue
		}
		for _, it := range o.Items {
			x := m.products[it.ProductID]
			if held[it.ProductID] == nil {
				held[it.ProductID] = map[string]int64{}
			}
			n, ok := held[it.ProductID][o.CustomerID]
			if !ok {
				n = x.held[o.CustomerID]
			}
			n += it.Quantity
			if n > x.p.MaxHeldPerCustomer {
				return nil, &stock.CaughtError{Layer: stock.LayerHoldLimit, ProductID: it.ProductID,
					Err: fmt.Errorf("%w: customer %q would hold %d", stock.ErrConflict, o.CustomerID, n)}
			}
			held[it.ProductID][o.CustomerID] = n
		}
	}
	return held, nil
}

// StoredKeys implements stock.Store.
func (m *MemStore) StoredKeys(_ context.Context, id int64, limit int) ([]stock.RecordKey, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var keys []stock.RecordKey
	for k, r := range m.records {
		if len(keys) >= limit {
			break
		}
		refused := r.rec.SoldOut != nil && r.rec.SoldOut.ProductID == id
		bought := r.rec.Order != nil && slices.ContainsFunc(r.rec.Order.Items, func(it stock.Item) bool { return it.ProductID == id })
		if refused || bought {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// PurgeIdempotencyKeys implements stock.Store: the records of orders accepted for later are
// left to package async, as stock.Store says.
func (m *MemStore) PurgeIdempotencyKeys(_ context.Context, retention time.Duration) (int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	cutoff := m.now().Add(-retention)
	var n int64
	for k, r := range m.records {
		if r.created.Before(cutoff) && r.rec.Accepted == nil && !strings.HasPrefix(k.Key, stock.AcceptedKeyPrefix) {
			delete(m.records, k)
			n++
		}
	}
	return n, nil
}

// LocalLocker is a stock.Locker for a single process: one lock per product, taken in ascending
// id order, with a fencing token that grows with every grant. It serialises the holders of
// one process only; replicas need the Redis locker.
type LocalLocker struct {
	mu    sync.Mutex
	locks map[int64]*localLock
	notes map[int64]string // what the last holder of each product's lock left
	fence int64
}

// localLock is one product's lock: held while held holds a value, by the grant whose fencing
// token is holder (0 while free, or once the holder's lease has ended: Expire).
type localLock struct {
	held   chan struct{}
	holder int64
}

var _ stock.Locker = (*LocalLocker)(nil)

// WithProducts implements stock.Locker. It waits as long as ctx allows. A holder whose lease
// ended meanwhile (Expire) lets go of nothing, and leaves no note.
func (l *LocalLocker) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *stock.Grant) error) error {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	g := &stock.Grant{Fences: make(map[int64]int64, len(ids)), Notes: map[int64]string{}, Leave: map[int64]string{}}
	var held []int64
	ran := false
	defer func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, id := range held {
			lk := l.locks[id]
			if lk.holder != g.Fences[id] {
				continue // its lease ended: the lock is another's, or free
			}
			if ran {
				l.notes[id] = g.Leave[id]
			}
			lk.holder = 0
			<-lk.held
		}
	}()
	for _, id := range ids {
		l.mu.Lock()
		if l.locks == nil {
			l.locks, l.notes = map[int64]*localLock{}, map[int64]string{}
		}
		lk := l.locks[id]
		if lk == nil {
			lk = &localLock{held: make(chan struct{}, 1)}
			l.locks[id] = lk
		}
		l.mu.Unlock()
		select {
		case lk.held <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", stock.ErrBusy, ctx.Err())
		}
		l.mu.Lock()
		l.fence++
		lk.holder = l.fence
		g.Fences[id], g.Notes[id] = l.fence, l.notes[id]
		l.mu.Unlock()
		held = append(held, id)
	}
	ran = true
	return fn(ctx, g)
}

// Expire ends the lease of product id's lock now, as a lease runs out while its holder is
// paused: the next caller is granted the lock at once, with a newer fencing token, while the
// holder goes on unaware until its write meets the fence, and lets go of nothing when it ends
// (the note stays the last one left by a holder that still held the lock). Without a holder,
// it does nothing.
func (l *LocalLocker) Expire(id int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lk := l.locks[id]; lk != nil && lk.holder != 0 {
		lk.holder = 0
		<-lk.held
	}
}

// saleOpen reports whether p's sale window holds at now, as the purchase statement checks it.
func saleOpen(p stock.Product, now time.Time) bool {
	return (p.SaleStartsAt == nil || !now.Before(*p.SaleStartsAt)) && (p.SaleEndsAt == nil || now.Before(*p.SaleEndsAt))
}

// UpdateSale implements stock.Store.
func (m *MemStore) UpdateSale(_ context.Context, id int64, c stock.SaleChange) (stock.Product, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	x, ok := m.products[id]
	if !ok {
		return stock.Product{}, &stock.ProductNotFoundError{ProductID: id}
	}
	p := x.p
	switch {
	case c.ClearStartsAt:
		p.SaleStartsAt = nil
	case c.StartsAt != nil:
		p.SaleStartsAt = c.StartsAt
	}
	switch {
	case c.EndNow:
		now := m.now()
		p.SaleEndsAt = &now
	case c.ClearEndsAt:
		p.SaleEndsAt = nil
	case c.EndsAt != nil:
		p.SaleEndsAt = c.EndsAt
	}
	switch {
	case c.ClearMaxPerCustomer:
		p.MaxPerCustomer = 0
	case c.MaxPerCustomer != nil:
		p.MaxPerCustomer = *c.MaxPerCustomer
	}
	switch {
	case c.ClearHoldFor:
		p.HoldFor = 0
	case c.HoldFor != nil:
		p.HoldFor = *c.HoldFor
	}
	switch {
	case c.MaxHeldPerCustomer != nil:
		p.MaxHeldPerCustomer = *c.MaxHeldPerCustomer
	case c.DefaultMaxHeld > 0:
		p.MaxHeldPerCustomer = cmp.Or(p.MaxPerCustomer, c.DefaultMaxHeld)
	}
	switch {
	case c.ClearLine:
		p.LineAdmit, p.LineAdmissionFor = 0, 0
	case c.Line != nil:
		p.LineAdmit, p.LineAdmissionFor = c.Line.Admit, c.Line.AdmissionFor
	}
	if err := refusedRule(p); err != nil {
		return stock.Product{}, err
	}
	p.Version++
	p.UpdatedAt = m.now()
	if c.MaxPerCustomer != nil {
		// Counted again from the orders confirmed or held, as the Postgres store does.
		x.bought = map[string]int64{}
		for _, o := range m.orders {
			if o.Status != stock.OrderStatusConfirmed && o.Status != stock.OrderStatusHeld {
				continue
			}
			for _, it := range o.Items {
				if it.ProductID == id {
					x.bought[o.CustomerID] += it.Quantity
				}
			}
		}
	}
	x.p = p
	return p, nil
}

// refusedRule refuses what the CHECKs of the products table refuse, as the Postgres store
// reports it.
func refusedRule(p stock.Product) error {
	switch {
	case p.SaleStartsAt != nil && p.SaleEndsAt != nil && !p.SaleEndsAt.After(*p.SaleStartsAt):
		return &stock.ValidationError{Field: "sale_ends_at", Reason: "must be after sale_starts_at"}
	case p.HoldFor < 0 || p.HoldFor > stock.MaxHoldFor:
		return &stock.ValidationError{Field: "hold_for", Reason: fmt.Sprintf("must be whole seconds between 1 and %d", int(stock.MaxHoldFor/time.Second))}
	case p.MaxHeldPerCustomer < 1:
		return &stock.ValidationError{Field: "max_held_per_customer", Reason: "must be at least 1"}
	}
	return nil
}

// Products implements stock.Store.
func (m *MemStore) Products(_ context.Context, after int64, limit int, onSale bool) ([]stock.Product, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	var list []stock.Product
	for _, x := range m.products {
		if x.p.ID <= after || onSale && (x.p.Stock == 0 || x.p.SaleEndsAt != nil && !now.Before(*x.p.SaleEndsAt)) {
			continue
		}
		list = append(list, x.p)
	}
	slices.SortFunc(list, func(a, b stock.Product) int { return int(a.ID - b.ID) })
	if len(list) > limit {
		list = list[:limit]
	}
	return list, nil
}

// Holding reports whether units of product id are held now, as stockpg.Store.Holding does.
func (m *MemStore) Holding(_ context.Context, id int64) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, o := range m.orders {
		if o.Status != stock.OrderStatusHeld {
			continue
		}
		for _, it := range o.Items {
			if it.ProductID == id {
				return true, nil
			}
		}
	}
	return false, nil
}
