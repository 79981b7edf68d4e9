package stock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// A keyed order is never refused while its key has a stored outcome. A batch that fails as a
// whole (busy, a lock lost, Postgres unreachable) or an order turned away at admission knows
// nothing was written by *this* attempt, but an earlier attempt with the same key — one whose
// answer was lost, on a replica that then died — may have been confirmed; answering "busy,
// nothing was sold" would send the buyer away from an order they have, or back to buy again
// without the key. So before such an answer the keys are looked up (one indexed query, on the
// failure path only) and any stored outcome is replayed instead. The same lookup answers the
// orders a write left out because another request stored their key first (Write.SkipStored).

// errStoredMeanwhile marks an order its write left out because its key had a record by then;
// replayStored replaces it with that record's outcome.
var errStoredMeanwhile = errors.New("stock: the idempotency key was stored by another request meanwhile")

// needsLookup reports whether an order answered err may have a stored outcome that err would
// hide.
func needsLookup(err error) bool {
	return errors.Is(err, errStoredMeanwhile) || errors.Is(err, ErrBusy) || errors.Is(err, ErrLockLost) ||
		errors.Is(err, ErrUnavailable) || refusedByRule(err)
}

// refusedByRule reports whether err is a refusal by a sale rule. Such a refusal stores nothing
// under the order's key, and is decided without reading the key's record; an earlier attempt
// with the key may have been confirmed while the rule allowed it (before an admin ended the
// sale, say), so the key is looked up before the refusal is answered.
func refusedByRule(err error) bool {
	return errors.Is(err, ErrSaleNotOpen) || errors.Is(err, ErrSaleEnded) || errors.Is(err, ErrCustomerLimit) ||
		errors.Is(err, ErrHoldLimit)
}

// unsettled reports whether t's outcome o waits for replayStored.
func unsettled(t *ticket, o outcome) bool { return t.key != "" && needsLookup(o.err) }

// replayStored answers, from the records stored under their keys, the keyed tickets whose
// outcome needsLookup: a stored outcome is replayed; without one the outcome stays, now known
// to hide nothing. When the records cannot be read, a refusal (busy, lock lost) becomes
// ErrUnavailable — whether the key was bought is then unknown, and only a retry with the same
// key can tell — and so does an order left out for a stored key.
func (s *Service) replayStored(ctx context.Context, tickets []*ticket, outcomes []outcome) {
	var keys []RecordKey
	for i, t := range tickets {
		if t.key != "" && needsLookup(outcomes[i].err) {
			keys = append(keys, t.recordKey())
		}
	}
	if len(keys) == 0 {
		return
	}
	records, err := s.lookups.get(ctx, keys)
	for i, t := range tickets {
		o := &outcomes[i]
		if t.key == "" || !needsLookup(o.err) {
			continue
		}
		if rec, ok := records[t.recordKey()]; ok {
			*o = replay(rec, t.fingerprint)
			continue
		}
		switch {
		case err != nil && !errors.Is(o.err, ErrUnavailable):
			o.err = fmt.Errorf("%w: the key's stored outcome could not be looked up (%w) after: %w", ErrUnavailable, err, o.err)
		case errors.Is(o.err, errStoredMeanwhile):
			// Stored, and gone by the time it was read (purged): what it said is unknown.
			o.err = fmt.Errorf("%w: %w: %w, and its record could not be found", ErrUnavailable, ErrOutcomeUnknown, o.err)
		}
	}
}

// recordLookups coalesces the lookups of a replica into few queries: a caller joins the round
// that gathers while the previous one runs, so that a batch of failed orders, or a crowd turned
// away at admission, costs one query per round trip rather than one per order, and no more
// than one such query runs at a time.
type recordLookups struct {
	store Store

	mu      sync.Mutex
	next    *lookupRound // gathering; nil when nobody waits
	running bool
	wg      sync.WaitGroup
}

type lookupRound struct {
	keys    []RecordKey
	done    chan struct{}
	records map[RecordKey]IdempotencyRecord
	err     error
}

// maxLookupKeys bounds the keys one query asks for; a larger round is read in several.
const maxLookupKeys = 1024

// get returns the records stored under keys. It waits for its round as long as ctx allows.
func (l *recordLookups) get(ctx context.Context, keys []RecordKey) (map[RecordKey]IdempotencyRecord, error) {
	l.mu.Lock()
	if l.next == nil {
		l.next = &lookupRound{done: make(chan struct{})}
	}
	r := l.next
	r.keys = append(r.keys, keys...)
	if !l.running {
		l.running = true
		l.wg.Add(1)
		go l.run()
	}
	l.mu.Unlock()
	select {
	case <-r.done:
		return r.records, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("look up idempotency records: %w", context.Cause(ctx))
	}
}

// run reads rounds until none gathers.
func (l *recordLookups) run() {
	defer l.wg.Done()
	for {
		l.mu.Lock()
		r := l.next
		l.next = nil
		if r == nil {
			l.running = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		r.records, r.err = l.read(r.keys)
		close(r.done)
	}
}

// lookupTimeout bounds one round of record lookups: they answer orders already waiting.
const lookupTimeout = 2 * time.Second

func (l *recordLookups) read(keys []RecordKey) (map[RecordKey]IdempotencyRecord, error) {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	records := make(map[RecordKey]IdempotencyRecord, len(keys))
	for len(keys) > 0 {
		n := min(len(keys), maxLookupKeys)
		part, err := l.store.Records(ctx, keys[:n])
		if err != nil {
			return nil, err
		}
		for k, rec := range part {
			records[k] = rec
		}
		keys = keys[n:]
	}
	return records, nil
}

// wait returns once no lookup runs; new ones may start after it.
func (l *recordLookups) wait() { l.wg.Wait() }
