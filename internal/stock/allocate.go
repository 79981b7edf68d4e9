package stock

import (
	"bytes"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// ticket is one order waiting to be decided: validated, with its id chosen and, when it has an
// idempotency key, the fingerprint its key is bound to.
type ticket struct {
	id          uuid.UUID
	customerID  string
	items       []Item // ascending product id, no product twice
	key         string
	fingerprint []byte
	// lockWait is OrderRequest.LockWait.
	lockWait time.Duration
	// gone is set when the caller stopped waiting after the ticket's batch had begun: if the
	// batch has not decided it yet, it is left out, unsold.
	gone atomic.Bool
}

// recordKey is the name of t's idempotency record: its key, in its customer's scope.
func (t *ticket) recordKey() RecordKey { return RecordKey{CustomerID: t.customerID, Key: t.key} }

// outcome is what a ticket was told: an order (new or replayed), the order its key was accepted
// as for later (accepted, replayed), or err — a refusal (*SoldOutError, *ProductNotFoundError,
// ErrIdempotencyKeyReused) or the failure of its batch.
type outcome struct {
	order    Order
	accepted *uuid.UUID
	replayed bool
	err      error
}

// result is the OrderResult of an outcome without err.
func (o outcome) result() OrderResult {
	if o.accepted != nil {
		return OrderResult{Accepted: o.accepted, Replayed: true}
	}
	return OrderResult{Order: o.order, Replayed: o.replayed}
}

// allocation is what one read decides for a batch: an outcome per ticket, in the tickets'
// order, and the write that makes the confirmed ones true.
type allocation struct {
	outcomes []outcome
	write    Write
	// units is what each customer has of each product with a limit, once the write commits.
	units customerUnits
}

// allocate decides a batch from snap: first fit in arrival order. Each ticket in turn is
// confirmed if every one of its items fits in what the tickets before it left, and is refused
// otherwise, whole — so a refusal is true when it is decided: the stock left for that ticket,
// after the ones before it, was short (Available says how much), even if a later, smaller ticket
// fits. A key with a stored record is answered from it; a key seen earlier in the same batch is
// answered with that earlier ticket's outcome. fences holds the batch's fencing token per
// product (nil without the lock). It needs no I/O, so the rules are tested without servers.
//
// With rules, the sale rules are applied from snap: the window at snap.Now, each product's
// limit per customer from what snap says its customers bought, and, for a ticket that would be
// held, each product's cap on a customer's held units from what snap says they hold. Without
// (a demonstration of Postgres holding them alone), they are not looked at.
func allocate(snap Snapshot, tickets []*ticket, fences map[int64]int64, rules bool) allocation {
	a := allocation{outcomes: make([]outcome, len(tickets)), units: customerUnits{}}
	left := make(map[int64]int64, len(snap.Levels))
	for id, l := range snap.Levels {
		left[id] = l.Stock
	}
	taken := map[int64]int64{}
	refused := false             // some ticket was refused for want of stock, or for its limit
	bought := a.units            // per limited product, what each customer has with this batch
	held := customerUnits{}      // per product of a held ticket, what each customer holds with it
	first := map[RecordKey]int{} // key → the ticket of this batch whose outcome it stores
	for i, t := range tickets {
		if t.gone.Load() {
			a.outcomes[i] = outcome{err: errGone}
			continue
		}
		if t.key != "" {
			if rec, ok := snap.Records[t.recordKey()]; ok {
				a.outcomes[i] = replay(rec, t.fingerprint)
				continue
			}
			if j, ok := first[t.recordKey()]; ok {
				a.outcomes[i] = replayTicket(a.outcomes[j], tickets[j].fingerprint, t.fingerprint)
				continue
			}
		}
		if missing, ok := firstMissing(t.items, snap.Levels); ok {
			// Nothing is stored for a product that does not exist: a retry is decided again.
			a.outcomes[i] = outcome{err: &ProductNotFoundError{ProductID: missing}}
			continue
		}
		// The sale rules refuse before the stock is looked at, and store nothing either: a
		// sale not open yet opens, and a retry is decided again. They are decided before the
		// key is taken as this batch's, so that a later ticket with the same key is decided on
		// its own rather than replaying a refusal no record holds.
		if err := closedSale(t.items, snap); rules && err != nil {
			a.outcomes[i] = outcome{err: err}
			continue
		}
		if over := bought.over(t, snap.Levels); rules && over != nil {
			// Counted like a refusal for want of stock: leaving a stored order out of the
			// write could make this refusal untrue (SkipStored).
			refused = true
			a.outcomes[i] = outcome{err: over}
			continue
		}
		if over := held.overHold(t, snap.Levels); rules && over != nil {
			refused = true // as for the limit
			a.outcomes[i] = outcome{err: over}
			continue
		}
		if t.key != "" {
			first[t.recordKey()] = i
		}
		if short := firstShort(t.items, left); short != nil {
			refused = true
			a.outcomes[i] = outcome{err: short}
			if t.key != "" {
				a.write.Records = append(a.write.Records, IdempotencyRecord{RecordKey: t.recordKey(), Fingerprint: t.fingerprint, SoldOut: short})
			}
			continue
		}
		for _, it := range t.items {
			left[it.ProductID] -= it.Quantity
			taken[it.ProductID] += it.Quantity
		}
		bought.take(t, snap.Levels)
		held.takeHold(t, snap.Levels)
		order := Order{ID: t.id, CustomerID: t.customerID, Status: OrderStatusConfirmed, Items: t.items}
		a.outcomes[i] = outcome{order: order}
		a.write.Orders = append(a.write.Orders, order)
		if t.key != "" {
			a.write.Records = append(a.write.Records, IdempotencyRecord{RecordKey: t.recordKey(), Fingerprint: t.fingerprint, Order: &order})
		}
	}
	for id, qty := range taken {
		a.write.Decrements = append(a.write.Decrements, Decrement{ProductID: id, Quantity: qty, Read: snap.Levels[id], Fence: fences[id]})
	}
	slices.SortFunc(a.write.Decrements, func(x, y Decrement) int { return cmpInt64(x.ProductID, y.ProductID) })
	// Only a write with keys has anything to skip; one without keeps the plainer statement.
	a.write.SkipStored = !refused && len(a.write.Records) > 0
	return a
}

// errGone is the outcome of a ticket left out because its caller had gone; nobody reads it.
var errGone = errors.New("stock: the caller stopped waiting before the order was decided")

// empty reports whether the write has nothing to commit.
func (w Write) empty() bool {
	return len(w.Decrements) == 0 && len(w.Orders) == 0 && len(w.Records) == 0
}

// Without returns w less the orders skipped (and their records and units): what a write that
// left them out committed.
func (w Write) Without(skipped []uuid.UUID) Write {
	out := Write{SkipStored: w.SkipStored}
	units := map[int64]int64{}
	for _, o := range w.Orders {
		if slices.Contains(skipped, o.ID) {
			for _, it := range o.Items {
				units[it.ProductID] += it.Quantity
			}
			continue
		}
		out.Orders = append(out.Orders, o)
	}
	for _, r := range w.Records {
		if r.Order == nil || !slices.Contains(skipped, r.Order.ID) {
			out.Records = append(out.Records, r)
		}
	}
	for _, d := range w.Decrements {
		if d.Quantity -= units[d.ProductID]; d.Quantity > 0 {
			out.Decrements = append(out.Decrements, d)
		}
	}
	return out
}

// leaveOut answers, after a write that left out the orders skipped, every ticket whose outcome
// rested on one of them — the ticket itself, and any later ticket of the batch with the same
// key — from its key's record: from stored (the records the write found; see
// Committed.Stored), or, for a key not there, from a read of it later (errStoredMeanwhile,
// for replayStored).
func leaveOut(tickets []*ticket, outcomes []outcome, skipped []uuid.UUID, stored map[RecordKey]IdempotencyRecord) {
	keys := map[RecordKey]bool{}
	for i, o := range outcomes {
		if o.err == nil && tickets[i].key != "" && slices.Contains(skipped, o.order.ID) {
			keys[tickets[i].recordKey()] = true
		}
	}
	for i, t := range tickets {
		if !keys[t.recordKey()] {
			continue
		}
		rec, ok := stored[t.recordKey()]
		if !ok {
			outcomes[i] = outcome{err: errStoredMeanwhile}
			continue
		}
		if rec.Order != nil && bytes.Equal(rec.Fingerprint, t.fingerprint) {
			// The same request as the one stored: its customer and items are this one's.
			o := *rec.Order
			o.CustomerID, o.Items = t.customerID, t.items
			rec.Order = &o
		}
		outcomes[i] = replay(rec, t.fingerprint)
	}
}

// closedSale returns the refusal of the first item whose product's sale is not open at
// snap.Now, or nil.
func closedSale(items []Item, snap Snapshot) error {
	for _, it := range items {
		if err := snap.Levels[it.ProductID].Sale.closed(it.ProductID, snap.Now); err != nil {
			return err
		}
	}
	return nil
}

// customerUnits counts, per product, the units each customer of a batch has: what the read
// says they have, plus what the batch gave them so far — of a product with a limit per
// customer, the units bought (over, take); of a held order's products, the units held
// (overHold, takeHold).
type customerUnits map[int64]map[string]int64

// over returns the refusal of the first item of t that would take t's customer above its
// product's limit, or nil.
func (c customerUnits) over(t *ticket, levels map[int64]Level) *CustomerLimitError {
	for _, it := range t.items {
		l := levels[it.ProductID]
		if !l.Sale.Limited() {
			continue
		}
		if has := c.units(it.ProductID, t.customerID, l.Bought); has+it.Quantity > l.Sale.MaxPerCustomer {
			return &CustomerLimitError{ProductID: it.ProductID, CustomerID: t.customerID,
				Limit: l.Sale.MaxPerCustomer, Bought: has, Requested: it.Quantity}
		}
	}
	return nil
}

// take counts t's items, confirmed, against its customer.
func (c customerUnits) take(t *ticket, levels map[int64]Level) {
	for _, it := range t.items {
		l := levels[it.ProductID]
		if !l.Sale.Limited() {
			continue
		}
		has := c.units(it.ProductID, t.customerID, l.Bought)
		c[it.ProductID][t.customerID] = has + it.Quantity
	}
}

// overHold returns, when t would be held, the refusal of the first item of t that would take
// t's customer's held units of its product above the product's cap, or nil. An order is held
// when any of its products is sold with a hold, and then every one of its products' units are
// held: each counts against its own product's cap.
func (c customerUnits) overHold(t *ticket, levels map[int64]Level) *HoldLimitError {
	if !heldOrder(t.items, levels) {
		return nil
	}
	for _, it := range t.items {
		l := levels[it.ProductID]
		if has := c.units(it.ProductID, t.customerID, l.Held); has+it.Quantity > l.Sale.MaxHeldPerCustomer {
			return &HoldLimitError{ProductID: it.ProductID, CustomerID: t.customerID,
				Limit: l.Sale.MaxHeldPerCustomer, Held: has, Requested: it.Quantity}
		}
	}
	return nil
}

// takeHold counts t's items, held if t is, against its customer.
func (c customerUnits) takeHold(t *ticket, levels map[int64]Level) {
	if !heldOrder(t.items, levels) {
		return
	}
	for _, it := range t.items {
		has := c.units(it.ProductID, t.customerID, levels[it.ProductID].Held)
		c[it.ProductID][t.customerID] = has + it.Quantity
	}
}

// heldOrder reports whether an order of items is written held: one of its products is sold
// with a hold.
func heldOrder(items []Item, levels map[int64]Level) bool {
	for _, it := range items {
		if levels[it.ProductID].Sale.HoldFor > 0 {
			return true
		}
	}
	return false
}

// units is what customer has of product id: counted in c, or else what the read said (read).
func (c customerUnits) units(id int64, customer string, read map[string]int64) int64 {
	m, ok := c[id]
	if !ok {
		m = map[string]int64{}
		c[id] = m
	}
	has, ok := m[customer]
	if !ok {
		has = read[customer]
		m[customer] = has
	}
	return has
}

// firstMissing returns the first item's product that snap does not have.
func firstMissing(items []Item, levels map[int64]Level) (int64, bool) {
	for _, it := range items {
		if _, ok := levels[it.ProductID]; !ok {
			return it.ProductID, true
		}
	}
	return 0, false
}

// firstShort returns the refusal for the first item that does not fit in left, or nil.
func firstShort(items []Item, left map[int64]int64) *SoldOutError {
	for _, it := range items {
		if l := left[it.ProductID]; l < it.Quantity {
			return &SoldOutError{ProductID: it.ProductID, Requested: it.Quantity, Available: l}
		}
	}
	return nil
}

// replay answers a ticket from the record stored under its key.
func replay(rec IdempotencyRecord, fingerprint []byte) outcome {
	if !bytes.Equal(rec.Fingerprint, fingerprint) {
		return outcome{err: ErrIdempotencyKeyReused}
	}
	if rec.Accepted != nil {
		// A success: the key's outcome is that order, whatever it has become since.
		return outcome{accepted: rec.Accepted, replayed: true}
	}
	if rec.GivenUp {
		return outcome{err: ErrGivenUp}
	}
	if rec.SoldOut != nil {
		refusal := *rec.SoldOut
		refusal.Replayed = true
		return outcome{err: &refusal}
	}
	return outcome{order: *rec.Order, replayed: true}
}

// replayTicket answers a ticket whose key an earlier ticket of the same batch used, with that
// ticket's outcome, as a retry arriving after it was stored would be.
func replayTicket(earlier outcome, earlierFingerprint, fingerprint []byte) outcome {
	if !bytes.Equal(earlierFingerprint, fingerprint) {
		return outcome{err: ErrIdempotencyKeyReused}
	}
	if sold, ok := earlier.err.(*SoldOutError); ok {
		refusal := *sold
		refusal.Replayed = true
		return outcome{err: &refusal}
	}
	return outcome{order: earlier.order, replayed: true}
}
