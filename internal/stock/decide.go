package stock

import (
	"context"
	"errors"
	"time"
)

// decideQueued decides one batch of a product's queue. It runs detached from every caller: a
// client that leaves does not cancel its batch-mates.
func (s *Service) decideQueued(q *productQueue, tickets []*ticket, more func() []*ticket) []outcome {
	return s.decide(context.Background(), []int64{q.id}, tickets, &q.hint, more)
}

// decide decides tickets, which all want the products ids (ascending), and returns an outcome
// per ticket; an outcome that needsLookup is for the caller to settle with replayStored, once
// the batch's lock is released (the batcher does it beside its next batch). When the hint says
// so (or there is none) it first reads the stock without the lock: a batch that would sell
// nothing — products missing, too little stock, replays — is answered from that read, which is
// true at the moment it was made, without locking. Everything that sells is decided under the
// products' locks. more, when not nil, is called once the locks are held, before the read: the
// tickets it returns (orders that queued while the lock was awaited) join the batch, and their
// outcomes follow those of tickets.
func (s *Service) decide(ctx context.Context, ids []int64, tickets []*ticket, h *hint, more func() []*ticket) []outcome {
	start := time.Now()
	if h.worthLooking(tickets) {
		if outcomes, ok := s.decideWithoutLock(ctx, ids, tickets, h); ok {
			s.metrics.batch(len(tickets), time.Since(start), false)
			return outcomes
		}
	}
	var (
		res    settled
		locked bool
	)
	if w := longestLockWait(tickets); w > 0 {
		ctx = WithLockWait(ctx, w)
	}
	err := s.locker.WithProducts(ctx, ids, func(ctx context.Context, g *Grant) error {
		locked = len(g.Fences) > 0
		if more != nil { // once, even if the lock layer runs this again
			tickets = append(tickets, more()...)
			more = nil
		}
		var err error
		res, err = s.settle(ctx, ids, tickets, g, h)
		return err
	})
	if res.write != nil {
		// Outside the lock, which the next batch is waiting for; before the answers, so that
		// a read that starts after a 201 sees its order.
		s.tellViews(*res.write, res.at)
	}
	if layer, ok := caughtBy(err); ok {
		s.metrics.caught(layer)
	}
	if err != nil {
		res.outcomes = failAll(len(tickets), err)
	} else {
		s.customers.learn(res.units)
		s.scheduleExpiries(res.holds)
	}
	s.metrics.batch(len(tickets), time.Since(start), locked)
	return res.outcomes
}

// longestLockWait is the longest lockWait of tickets: the batch waits for its locks as long as
// its most patient order may (an admitted one), which delays no order that would otherwise be
// answered sooner but busy.
func longestLockWait(tickets []*ticket) time.Duration {
	var w time.Duration
	for _, t := range tickets {
		w = max(w, t.lockWait)
	}
	return w
}

// decideWithoutLock answers tickets from a read made without the lock, if that read sells
// nothing; ok is false when something would sell, which only the lock may decide.
func (s *Service) decideWithoutLock(ctx context.Context, ids []int64, tickets []*ticket, h *hint) (outcomes []outcome, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
	defer cancel()
	snap, err := s.store.Snapshot(ctx, ids, ticketKeys(tickets), ticketCustomers(tickets))
	if err != nil {
		return failAll(len(tickets), err), true
	}
	a := allocate(snap, tickets, nil, !s.cfg.SkipRuleChecks)
	h.saw(ids[0], snap, a.write)
	if len(a.write.Decrements) > 0 {
		return nil, false
	}
	s.customers.learn(a.units)
	if len(a.write.Records) > 0 {
		// The refusals are true whether or not their records are stored: a retry whose record
		// is missing is decided afresh, which is also a true answer. But a key that another
		// request stored meanwhile must be answered from its record: that needs a new read.
		if _, err := s.store.Commit(ctx, a.write); errors.Is(err, ErrConflict) {
			return nil, false
		}
	}
	return a.outcomes, true
}

// tellViews keeps the views current with a committed write. The store's version check means
// the write applied to exactly the row it was decided from, so the level it left is known
// without a read. (A demonstration store without that check comes with views that ignore this
// and learn of the purchase when their TTL makes them read again: demo.Parts.)
func (s *Service) tellViews(w Write, at time.Time) {
	if s.cfg.Views == nil {
		return
	}
	for _, d := range w.Decrements {
		s.cfg.Views.Committed(d.ProductID, d.Read.Stock-d.Quantity, d.Read.Version+1, at)
	}
}

// ticketCustomers lists the tickets' customers, each once.
func ticketCustomers(tickets []*ticket) []string {
	customers := make([]string, 0, len(tickets))
	seen := make(map[string]bool, len(tickets))
	for _, t := range tickets {
		if !seen[t.customerID] {
			seen[t.customerID] = true
			customers = append(customers, t.customerID)
		}
	}
	return customers
}

// ticketKeys lists the tickets' idempotency keys, for those that have one.
func ticketKeys(tickets []*ticket) []RecordKey {
	var keys []RecordKey
	for _, t := range tickets {
		if t.key != "" {
			keys = append(keys, t.recordKey())
		}
	}
	return keys
}

// failAll is n outcomes, each the failure err of their whole batch.
func failAll(n int, err error) []outcome {
	outcomes := make([]outcome, n)
	for i := range outcomes {
		outcomes[i].err = err
	}
	return outcomes
}
