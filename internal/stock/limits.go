package stock

import "sync"

// maxRememberedCustomers bounds the customers a replica remembers for one product with a limit
// per customer. A sale of a few thousand units has fewer buyers; past the bound, orders of
// customers not remembered are refused by their batch's read instead, as before the memory.
const maxRememberedCustomers = 100_000

// customerMemory remembers, per product with a limit per customer, the units each customer was
// seen to have bought — by a read of this replica's batches, or a write they committed — so
// that an order that would take its customer above the limit is refused before it is queued,
// with no query and no lock: the scalper's tenth attempt costs what a sold-out refusal costs.
// What it remembers is never above the truth: units bought are never given back (a customer's
// count in Postgres only grows), so a refusal from it is true whenever the limit it is compared
// with is the product's limit at that moment — the views' (Refusal.Sale), which no replica holds
// across a change of the rules (Service.UpdateSale raises the views).
type customerMemory struct {
	mu       sync.Mutex
	products map[int64]map[string]int64
}

// refusal returns the refusal of qty units of product id for customer under limit when what is
// remembered of the customer already says so, or nil.
func (m *customerMemory) refusal(id int64, limit int64, customer string, qty int64) *CustomerLimitError {
	m.mu.Lock()
	has, ok := m.products[id][customer]
	m.mu.Unlock()
	if !ok || has+qty <= limit {
		return nil
	}
	return &CustomerLimitError{ProductID: id, CustomerID: customer, Limit: limit, Bought: has, Requested: qty}
}

// learn records what a batch knows of its customers: units, per product and customer.
func (m *customerMemory) learn(units customerUnits) {
	if len(units) == 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.products == nil {
		m.products = map[int64]map[string]int64{}
	}
	for id, customers := range units {
		known, ok := m.products[id]
		if !ok {
			known = map[string]int64{}
			m.products[id] = known
		}
		for c, n := range customers {
			if had, ok := known[c]; (ok && n > had) || (!ok && len(known) < maxRememberedCustomers) {
				known[c] = n
			}
		}
	}
}

// forget drops what is remembered of product id: its counts may have been recomputed.
func (m *customerMemory) forget(id int64) {
	m.mu.Lock()
	delete(m.products, id)
	m.mu.Unlock()
}
