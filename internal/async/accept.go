package async

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Accepting an order is a commit, and a commit per order is what the purchase path learned not
// to pay (docs/design.md, "Why batches"): at a thousand orders a second the accepts' own
// commits, not the sale, become the bottleneck. So orders of one product each are accepted in
// groups: every request that arrives while a group commits joins the next one, and a group is
// one transaction (Store.Accept) with a drain job per product in it, whatever its size. A quiet
// replica's lone order is accepted at once, as before.

// maxAcceptGroup caps the orders accepted in one transaction.
const maxAcceptGroup = 256

// acceptTimeout bounds a group's transaction. It is also how long after its own deadline a
// request may still be answered (see acceptor.accept): cmd/stocksvc gives the HTTP server a
// write timeout 5 s beyond the request timeout, and this leaves a second of that for the
// answer.
const acceptTimeout = 4 * time.Second

// acceptRequest is one order waiting to join a group.
type acceptRequest struct {
	id   uuid.UUID
	p    stock.Prepared
	done chan acceptResult // buffered: answering never blocks the group
	// taken is set, under acceptor.mu, when the request joins a group whose transaction is
	// about to begin: from then on its outcome is the group's.
	taken bool
}

type acceptResult struct {
	state AcceptState
	at    time.Time
	err   error
}

// acceptor gathers a replica's single-product orders into groups.
type acceptor struct {
	q *Queue
	// limit is how many requests may wait to be grouped; more are refused at once.
	limit int

	mu      sync.Mutex
	waiting []*acceptRequest
	running bool
}

// accept has req accepted in the next group and returns what became of it.
//
// A request whose caller leaves (ctx ends) before its group begins leaves the queue: nothing
// is written for it, and it is answered with the context's error. Once its group has begun, it
// is answered with the group's outcome even if ctx ends meanwhile — the request timeout firing
// mid-commit, say. That is the only answer that is true whichever way the commit goes: an error
// there would tell the client that nothing was accepted when an order may be in line, and a
// client without a key would never learn of it. The wait is bounded by acceptTimeout.
//
// When as many requests as the acceptor's limit already wait, req is refused at once with a
// *stock.BusyError: nothing is written for it.
func (a *acceptor) accept(ctx context.Context, req *acceptRequest) acceptResult {
	if err := ctx.Err(); err != nil {
		return acceptResult{err: fmt.Errorf("waiting to be accepted (nothing was): %w", context.Cause(ctx))}
	}
	a.mu.Lock()
	if n := len(a.waiting); n >= a.limit {
		a.mu.Unlock()
		a.q.metrics.acceptRefused.Inc()
		// Not Shed: Shed marks the busy that sending the order with Prefer: respond-async
		// avoids (the HTTP layer then suggests it), and this order was sent so.
		return acceptResult{err: &stock.BusyError{RetryAfter: time.Second,
			Reason: fmt.Sprintf("%d orders wait to be accepted on this replica", n)}}
	}
	a.waiting = append(a.waiting, req)
	a.q.metrics.acceptWaiting.Inc()
	if !a.running {
		a.running = true
		go a.work()
	}
	a.mu.Unlock()
	select {
	case r := <-req.done:
		return r
	case <-ctx.Done():
	}
	a.mu.Lock()
	if !req.taken {
		// Still waiting: it leaves, and no group will write it.
		if i := slices.Index(a.waiting, req); i >= 0 {
			a.waiting = slices.Delete(a.waiting, i, i+1)
			a.q.metrics.acceptWaiting.Dec()
		}
		a.mu.Unlock()
		return acceptResult{err: fmt.Errorf("waiting to be accepted (nothing was): %w", context.Cause(ctx))}
	}
	a.mu.Unlock()
	return <-req.done
}

// work commits groups until no request waits. Its transactions run detached from every
// caller: a client that leaves does not cancel its group-mates.
func (a *acceptor) work() {
	for {
		a.mu.Lock()
		n := min(len(a.waiting), maxAcceptGroup)
		if n == 0 {
			a.running = false
			a.mu.Unlock()
			return
		}
		group := a.waiting[:n:n]
		for _, req := range group {
			req.taken = true
		}
		a.waiting = append([]*acceptRequest(nil), a.waiting[n:]...)
		a.q.metrics.acceptWaiting.Sub(float64(n))
		a.mu.Unlock()

		results, err := a.q.acceptGroup(context.Background(), group)
		for i, req := range group {
			if err != nil {
				req.done <- acceptResult{err: err}
			} else {
				req.done <- results[i]
			}
		}
	}
}

// acceptGroup writes a group in one transaction (Store.Accept): the orders, their keys, and a
// drain job for each product in the group.
func (q *Queue) acceptGroup(ctx context.Context, group []*acceptRequest) ([]acceptResult, error) {
	ctx, cancel := context.WithTimeout(ctx, acceptTimeout)
	defer cancel()
	orders := make([]NewOrder, len(group))
	for i, req := range group {
		orders[i] = NewOrder{ID: req.id, Request: req.p}
	}
	out, err := q.store.Accept(ctx, orders)
	if err != nil {
		// Nothing was accepted, or — a commit on the primary alone (stock.ErrOutcomeUnknown) —
		// nothing is promised yet: either way the client may try again, with its key.
		return nil, fmt.Errorf("accept orders: %w", err)
	}
	results := make([]acceptResult, len(group))
	for i, o := range out {
		results[i].state, results[i].at = o.State, o.At
	}
	return results, nil
}
