// Package linetest has an in-memory line.Store for tests and benchmarks: the same contract as
// the Postgres store (package linepg), without a server.
package linetest

import (
	"context"
	"crypto/rand"
	"slices"
	"sync"
	"time"

	"github.com/stocksvc/stocksvc/internal/line"
)

// MemStore is a line.Store in memory. Its clock is time.Now unless SetNow changes it.
type MemStore struct {
	mu      sync.Mutex
	now     func() time.Time
	lines   map[int64]*memLine
	tickets map[int64]*line.Ticket
	nextID  int64
	keys    []line.Key
	// listeners get every change announced.
	listeners map[chan announcement]struct{}
}

type memLine struct {
	// advance serializes the changes of the line, as its row lock does in Postgres.
	advance                 sync.Mutex
	version                 int64
	seed                    []byte
	drawnAt                 time.Time
	drawn, placed, admitted int64
	// admissionFor is how long the last admissions made were for: a leaver's room passes on
	// for as long (Leave).
	admissionFor        time.Duration
	stock               int64
	stockKnown, holding bool
	product             int64
}

type announcement struct{ product, version int64 }

var _ line.Store = (*MemStore)(nil)

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{now: time.Now, lines: map[int64]*memLine{}, tickets: map[int64]*line.Ticket{},
		listeners: map[chan announcement]struct{}{}}
}

// SetNow replaces the store's clock (the one that decides openings and admissions' ends).
func (m *MemStore) SetNow(now func() time.Time) {
	m.mu.Lock()
	m.now = now
	m.mu.Unlock()
}

// Join implements line.Store.
func (m *MemStore) Join(_ context.Context, product int64, customer string) (line.Ticket, bool, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.lines[product]
	if !ok {
		l = &memLine{product: product}
		m.lines[product] = l
	}
	for _, t := range m.tickets {
		if t.ProductID == product && t.CustomerID == customer && t.Status.Open() {
			return *t, false, !l.drawnAt.IsZero(), nil
		}
	}
	m.nextID++
	t := &line.Ticket{ID: m.nextID, ProductID: product, CustomerID: customer, Status: line.TicketWaiting, JoinedAt: m.now()}
	m.tickets[t.ID] = t
	return *t, true, !l.drawnAt.IsZero(), nil
}

// Leave implements line.Store.
func (m *MemStore) Leave(_ context.Context, product, id int64) (line.Ticket, error) {
	m.mu.Lock()
	l, ok := m.lines[product]
	m.mu.Unlock()
	if !ok {
		return line.Ticket{}, line.ErrTicketNotFound
	}
	l.advance.Lock()
	defer l.advance.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tickets[id]
	if !ok || t.ProductID != product {
		return line.Ticket{}, line.ErrTicketNotFound
	}
	if !t.Status.Open() {
		return *t, nil
	}
	l.version++
	running := t.Status == line.TicketAdmitted && m.now().Before(t.AdmittedUntil)
	t.Status, t.Changed = line.TicketLeft, l.version
	if running {
		var first *line.Ticket
		for _, w := range m.tickets {
			if w.ProductID == product && w.Status == line.TicketWaiting && w.Place > 0 && (first == nil || w.Place < first.Place) {
				first = w
			}
		}
		if first != nil {
			first.Status, first.AdmittedUntil, first.Changed = line.TicketAdmitted, m.now().Add(l.admissionFor), l.version
			l.admitted++
		}
	}
	m.announce(product, l.version)
	return *t, nil
}

// Advance implements line.Store.
func (m *MemStore) Advance(ctx context.Context, product int64, used []line.Use, plan func(context.Context, line.Standing) (line.Plan, error)) (line.Advanced, error) {
	m.mu.Lock()
	l, ok := m.lines[product]
	m.mu.Unlock()
	if !ok {
		return line.Advanced{}, nil
	}
	l.advance.Lock()
	defer l.advance.Unlock()

	// What the used marks and the expiries would change, decided first and written only
	// once the plan is made, as a transaction that rolls back on its failure would.
	m.mu.Lock()
	now := m.now()
	uses := map[int64]string{}
	for _, u := range used {
		if t, ok := m.tickets[u.Ticket]; ok && t.ProductID == product && t.Status == line.TicketAdmitted {
			uses[u.Ticket] = u.Key
		}
	}
	var expire []int64
	var active int64
	for id, t := range m.tickets {
		if t.ProductID != product || t.Status != line.TicketAdmitted {
			continue
		}
		if _, use := uses[id]; use {
			continue
		}
		if !now.Before(t.AdmittedUntil) {
			expire = append(expire, id)
		} else {
			active++
		}
	}
	st := line.Standing{Now: now, Version: l.version, Drawn: !l.drawnAt.IsZero(), Active: active}
	m.mu.Unlock()

	p, err := plan(ctx, st)
	if err != nil {
		return line.Advanced{}, err
	}
	if err := ctx.Err(); err != nil {
		return line.Advanced{}, err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	next := l.version + 1
	a := line.Advanced{Exists: true, Version: l.version}
	for id, key := range uses {
		t := m.tickets[id]
		t.Status, t.UsedKey, t.Changed = line.TicketUsed, key, next
		a.Used++
	}
	for _, id := range expire {
		t := m.tickets[id]
		t.Status, t.Changed = line.TicketExpired, next
		a.Expired++
	}
	waiting := func(placed bool) []*line.Ticket {
		var ts []*line.Ticket
		for _, t := range m.tickets {
			if t.ProductID == product && t.Status == line.TicketWaiting && (t.Place > 0) == placed {
				ts = append(ts, t)
			}
		}
		slices.SortFunc(ts, func(a, b *line.Ticket) int {
			if placed {
				return int(a.Place - b.Place)
			}
			return int(a.ID - b.ID)
		})
		return ts
	}
	drew := p.Seed != nil && l.drawnAt.IsZero()
	if drew {
		queued := waiting(false)
		ids := make([]int64, len(queued))
		for i, t := range queued {
			ids[i] = t.ID
		}
		for i, id := range line.Rank(p.Seed, ids) {
			t := m.tickets[id]
			t.Place, t.Changed = int64(i+1), next
		}
		l.seed, l.drawnAt, l.drawn, l.placed = slices.Clone(p.Seed), now, int64(len(ids)), int64(len(ids))
		a.Drawn = int64(len(ids))
	}
	if !l.drawnAt.IsZero() {
		for _, t := range waiting(false) {
			l.placed++
			t.Place, t.Changed = l.placed, next
			a.Placed++
		}
		for _, t := range waiting(true) {
			if a.Admitted >= p.Admit {
				break
			}
			t.Status, t.AdmittedUntil, t.Changed = line.TicketAdmitted, now.Add(p.AdmissionFor), next
			a.Admitted++
			l.admissionFor = p.AdmissionFor
		}
	}
	l.admitted += a.Admitted
	changed := drew || a.Used+a.Expired+a.Admitted+a.Placed > 0 ||
		!l.stockKnown || l.stock != p.Stock || l.holding != p.Holding
	l.stock, l.stockKnown, l.holding = p.Stock, true, p.Holding
	if changed {
		l.version = next
		m.announce(product, next)
	}
	a.Version, a.Changed = l.version, changed
	return a, nil
}

// Line implements line.Store.
func (m *MemStore) Line(_ context.Context, product, since int64, countWaiting bool) (line.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.lines[product]
	if !ok {
		return line.Snapshot{}, nil
	}
	s := line.Snapshot{Exists: true, Version: l.version, DrawnAt: l.drawnAt, Drawn: l.drawn, Placed: l.placed,
		Admissions: l.admitted, Stock: l.stock, StockKnown: l.stockKnown, Holding: l.holding, Unplaced: -1}
	if countWaiting {
		s.Unplaced = 0
	}
	for _, t := range m.tickets {
		if t.ProductID != product {
			continue
		}
		if t.Changed > since {
			s.Tickets = append(s.Tickets, *t)
		}
		if countWaiting && t.Status == line.TicketWaiting && t.Place == 0 {
			s.Unplaced++
		}
	}
	slices.SortFunc(s.Tickets, func(a, b line.Ticket) int { return int(a.ID - b.ID) })
	return s, nil
}

// Ticket implements line.Store.
func (m *MemStore) Ticket(_ context.Context, product, id int64) (line.Ticket, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tickets[id]
	if !ok || t.ProductID != product {
		return line.Ticket{}, line.ErrTicketNotFound
	}
	return *t, nil
}

// Versions implements line.Store.
func (m *MemStore) Versions(_ context.Context, products []int64) (map[int64]int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[int64]int64{}
	for _, id := range products {
		if l, ok := m.lines[id]; ok {
			out[id] = l.version
		}
	}
	return out, nil
}

// Drawn implements line.Store.
func (m *MemStore) Drawn(_ context.Context, product int64) (line.Draw, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	l, ok := m.lines[product]
	if !ok || l.drawnAt.IsZero() {
		return line.Draw{}, line.ErrNotDrawn
	}
	d := line.Draw{ProductID: product, Seed: slices.Clone(l.seed), DrawnAt: l.drawnAt}
	for _, t := range m.tickets {
		if t.ProductID == product && t.Place > 0 && t.Place <= l.drawn {
			d.Tickets = append(d.Tickets, line.Drawn{Ticket: t.ID, CustomerID: t.CustomerID, Place: t.Place})
		}
	}
	slices.SortFunc(d.Tickets, func(a, b line.Drawn) int { return int(a.Place - b.Place) })
	return d, nil
}

// Keys implements line.Store.
func (m *MemStore) Keys(context.Context) ([]line.Key, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.keys) == 0 {
		secret := make([]byte, line.KeySize)
		_, _ = rand.Read(secret)
		m.keys = []line.Key{{ID: 1, Secret: secret}}
	}
	return slices.Clone(m.keys), nil
}

// AddKey adds a signing key, as an operator rotating keys inserts a row.
func (m *MemStore) AddKey(k line.Key) {
	m.mu.Lock()
	m.keys = append(m.keys, k)
	m.mu.Unlock()
}

// Listen implements line.Store. An announcement a listener has no room for is lost, as one
// made while a connection is down is.
func (m *MemStore) Listen(ctx context.Context, listening func(), changed func(product, version int64)) error {
	ch := make(chan announcement, 1024)
	m.mu.Lock()
	m.listeners[ch] = struct{}{}
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		delete(m.listeners, ch)
		m.mu.Unlock()
	}()
	listening()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case a := <-ch:
			changed(a.product, a.version)
		}
	}
}

// announce tells every listener that product's line reached version. m.mu is held.
func (m *MemStore) announce(product, version int64) {
	for ch := range m.listeners {
		select {
		case ch <- announcement{product, version}:
		default:
		}
	}
}

// Update changes ticket id as change says, moving its line's version as any change does (and
// announcing it): a test's way to put a line in a state no rule would, as an operator's SQL
// update does in Postgres.
func (m *MemStore) Update(id int64, change func(t *line.Ticket)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tickets[id]
	if !ok {
		return
	}
	l := m.lines[t.ProductID]
	l.version++
	change(t)
	t.Changed = l.version
	m.announce(t.ProductID, l.version)
}

// Lose deletes ticket id, as a failover that lost its join would: the ticket's token verifies,
// and the store no longer knows it.
func (m *MemStore) Lose(id int64) {
	m.mu.Lock()
	delete(m.tickets, id)
	m.mu.Unlock()
}
