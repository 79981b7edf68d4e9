package stock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/clock"
)

// settled is what settle decided: an outcome per ticket, and the write it committed (nil for
// none) with the write's time.
type settled struct {
	outcomes []outcome
	write    *Write
	at       time.Time
	// units is what the batch knows each customer has of each product with a limit.
	units customerUnits
	// holds are the orders the write held, with when each expires.
	holds map[uuid.UUID]time.Time
}

// settle decides tickets under the products' locks (g): it reads, allocates and writes, and
// when the write is refused — a condition of the decrement no longer held — reads again, names
// the layer that refused it, and decides afresh, up to Config.ConflictRetries times. It returns
// what it decided, or the error that failed the whole batch (nothing was sold then, or the
// outcome is unknown and the error says so).
//
// A batch of one product given the lock with the last holder's note — its level after that
// holder's batch — is first decided from the note, without a read: one round trip less while
// the lock is held, which is what every other replica's batch waits for. The version check
// makes that safe for what sells: a stale note is a stale read, refused like one, and the batch
// then reads. What refuses and sells nothing has no write to check, so it is decided from a
// read. On the way out the batch leaves the product's level for the next holder.
func (s *Service) settle(ctx context.Context, ids []int64, tickets []*ticket, g *Grant, h *hint) (settled, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
	defer cancel()
	var r retries
	noted, useNote := notedLevel(ids, g)
	for {
		fromNote := useNote
		useNote = false // any further pass reads
		snap, err := s.settleRead(ctx, ids, tickets, &r, noted, fromNote)
		if err != nil {
			return settled{}, err
		}
		if s.afterRead != nil {
			s.afterRead(ctx, len(tickets))
		}
		a := allocate(snap, tickets, g.Fences, !s.cfg.SkipRuleChecks || r.ruleCaught)
		if fromNote && len(a.write.Decrements) == 0 && refuses(a.outcomes) {
			// A refusal must be true when it is decided, and only a write's version check
			// tells a stale note from a true one: a batch that sells nothing has no such
			// write, so its refusals are decided from a read instead.
			continue
		}
		h.saw(ids[0], snap, a.write)
		if a.write.empty() {
			leaveLevel(g, ids, snap, a.write)
			return settled{outcomes: a.outcomes, units: a.units}, nil
		}
		if err := s.markViews(ctx, a.write); err != nil {
			return settled{}, err
		}
		c, werr := s.store.Commit(ctx, a.write)
		if werr == nil {
			return settleCommitted(ids, tickets, g, snap, a, c), nil
		}
		if err := s.retry(ctx, &r, a.write, werr, tickets); err != nil {
			return settled{}, err
		}
	}
}

// markViews tells the views which products w will take stock from, before it is written
// (Views.Writing): a write the views could not be told of is not made, and the batch fails
// unavailable, with nothing sold.
func (s *Service) markViews(ctx context.Context, w Write) error {
	if s.cfg.Views == nil || len(w.Decrements) == 0 {
		return nil
	}
	return s.cfg.Views.Writing(ctx, w)
}

// retries is what settle carries from a refused write to the passes after it.
type retries struct {
	conflicts int
	// keys are the batch's keys, whose records are read only once a write has been refused:
	// almost every key is new, and the write's insert of the records is what finds one that
	// is not.
	keys []RecordKey
	// refused is the last refusal, of the write refusedWrite, explained by the next read.
	refused      *RefusedError
	refusedWrite Write
	// ruleCaught: Postgres refused a write for a sale rule. From then on the batch applies the
	// rules itself, even when its checks are off (Config.SkipRuleChecks), so that the orders
	// are answered with the rule that refused them rather than retried until busy.
	ruleCaught bool
}

// settleRead is a pass's read: the noted level, when fromNote, on this replica's clock;
// otherwise the stock, what the batch's customers have, and r.keys' records — from which the
// last refused write, if any, is explained (explainRefusal).
func (s *Service) settleRead(ctx context.Context, ids []int64, tickets []*ticket, r *retries, noted Level, fromNote bool) (Snapshot, error) {
	if fromNote {
		return Snapshot{Now: s.cfg.Now(), Levels: map[int64]Level{ids[0]: noted}}, nil
	}
	snap, err := s.store.Snapshot(ctx, ids, r.keys, ticketCustomers(tickets))
	if err != nil {
		return Snapshot{}, err
	}
	if r.refused != nil {
		window, err := s.explainRefusal(r.refusedWrite, r.refused.Conditions, snap)
		if err != nil {
			return Snapshot{}, err
		}
		r.ruleCaught = r.ruleCaught || window
		r.refused = nil
	}
	return snap, nil
}

// retry takes in the refusal werr of the write w and returns nil when the batch is to be
// decided again, after a pause from the second retry on; otherwise the error that fails the
// batch: werr itself when it is no refusal (ErrConflict), a *BusyError after
// Config.ConflictRetries refusals in a row.
func (s *Service) retry(ctx context.Context, r *retries, w Write, werr error, tickets []*ticket) error {
	if !errors.Is(werr, ErrConflict) {
		return werr
	}
	if layer, ok := caughtBy(werr); ok {
		// A CHECK constraint: the read shows what is left, and what each customer has.
		s.metrics.caught(layer)
		r.ruleCaught = r.ruleCaught || layer == LayerLimit || layer == LayerHoldLimit
	} else if errors.As(werr, &r.refused) {
		r.refusedWrite = w
	}
	r.keys = ticketKeys(tickets)
	r.conflicts++
	if r.conflicts > s.cfg.ConflictRetries {
		return &BusyError{RetryAfter: time.Second, Reason: fmt.Sprintf("%d conflicting writes in a row: %v", r.conflicts, werr)}
	}
	// The first retry is at once: most refusals are a stored key, whose writer has
	// committed. After that, a short random pause lets a writer that keeps beating us
	// finish, and keeps a crowd of losers from colliding again in lockstep.
	if r.conflicts > 1 {
		if clock.Sleep(ctx, time.Duration(rand.Int64N(int64(r.conflicts)*int64(time.Millisecond)))) != nil {
			return fmt.Errorf("%w: %w", ErrBusy, ctx.Err())
		}
	}
	return nil
}

// settleCommitted settles a batch whose write committed: the orders left out because another
// request stored their key first are answered from the records the write found (or read once
// the lock is released), the rest carry the write's time, and the level the write left is
// noted for the next holder.
func settleCommitted(ids []int64, tickets []*ticket, g *Grant, snap Snapshot, a allocation, c Committed) settled {
	w := a.write
	if len(c.Skipped) > 0 {
		w = w.Without(c.Skipped)
		leaveOut(tickets, a.outcomes, c.Skipped, c.Stored)
	}
	leaveLevel(g, ids, snap, w)
	for i := range a.outcomes {
		o := &a.outcomes[i].order
		if a.outcomes[i].err != nil || !o.CreatedAt.IsZero() {
			continue
		}
		o.CreatedAt = c.At
		if expires, held := c.Holds[o.ID]; held {
			o.Status, o.ExpiresAt = OrderStatusHeld, &expires
		}
	}
	units := a.units
	if len(c.Skipped) > 0 {
		// The counts included orders the write left out: not something to remember.
		units = nil
	}
	return settled{outcomes: a.outcomes, write: &w, at: c.At, units: units, holds: c.Holds}
}

// explainRefusal names, from a fresh read, the layer among the write's conditions that refused
// w's decrement and counts it; window reports that the sale window did (then the batch applies
// the rules from this read, whatever its checks: see settle).
// A fencing token newer than the batch's means its lease ran out and another holder wrote: the
// batch must not go on, and the error says so. A version that moved, or stock now short, was a
// conflict: the batch is decided again from this read. A sale not open at the read's time (the
// store's clock) refused a write decided by a clock that ran ahead (a lock note's, this
// replica's). (A key stored meanwhile by another request refuses the write too; no layer is
// named for it, and the new read replays it.)
func (s *Service) explainRefusal(w Write, d Defense, snap Snapshot) (window bool, err error) {
	for _, dec := range w.Decrements {
		now, ok := snap.Levels[dec.ProductID]
		switch {
		case !ok:
		case d.Lock && now.Fence > dec.Fence:
			return false, &CaughtError{Layer: LayerFence, ProductID: dec.ProductID,
				Err: fmt.Errorf("%w: fence %d is older than %d", ErrLockLost, dec.Fence, now.Fence)}
		case d.Version && now.Version != dec.Read.Version:
			s.metrics.caught(LayerVersion)
			s.metrics.conflict()
		case now.Sale.closed(dec.ProductID, snap.Now) != nil:
			s.metrics.caught(LayerWindow)
			window = true
		case d.Guard && now.Stock < dec.Quantity:
			s.metrics.caught(LayerGuard)
		}
	}
	return window, nil
}

// refuses reports whether some outcome is a refusal for want of stock or by a sale rule.
func refuses(outcomes []outcome) bool {
	for _, o := range outcomes {
		if errors.Is(o.err, ErrSoldOut) || refusedByRule(o.err) {
			return true
		}
	}
	return false
}
