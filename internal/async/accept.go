package async

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
)

// Accepting an order is a commit, and a commit per order is what the purchase path learned not
// to pay (docs/design.md, "Why batches"): at a thousand orders a second the accepts' own
// commits, not the sale, become the bottleneck. So orders of one product each are accepted in
// groups: every request that arrives while a group commits joins the next one, and a group is
// one transaction of one statement (stockpg.Accepted.AcceptGroup) and one insert of River jobs, one per product
// in it, whatever its size. A quiet replica's lone order is accepted at once, as before.

// maxAcceptGroup caps the orders accepted in one transaction.
const maxAcceptGroup = 256

// distinct returns ids without repeats, in first-seen order.
func distinct(ids []int64) []int64 {
	var out []int64
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// acceptLockKeys returns the two int4 keys of products' accept locks, each product once.
func acceptLockKeys(products []int64) (hi, lo []int32) {
	for _, id := range distinct(products) {
		hi, lo = append(hi, int32(id>>32)), append(lo, int32(id))
	}
	return hi, lo
}

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
	state stockpg.AcceptState
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

// acceptGroup writes a group in one transaction: the orders and their keys (AcceptGroup), and a
// drain job for each product in the group.
func (q *Queue) acceptGroup(ctx context.Context, group []*acceptRequest) ([]acceptResult, error) {
	ctx, cancel := context.WithTimeout(ctx, acceptTimeout)
	defer cancel()
	n := len(group)
	orders, products := make([]stockpg.NewAcceptance, n), make([]int64, n)
	for i, req := range group {
		it := req.p.Items[0]
		orders[i] = stockpg.NewAcceptance{ID: req.id, CustomerID: req.p.CustomerID, ProductID: it.ProductID,
			Quantity: it.Quantity, Key: req.p.Key, Fingerprint: req.p.Fingerprint}
		products[i] = it.ProductID
	}
	results := make([]acceptResult, n)
	err := q.accepted.Tx(ctx, func(tx pgx.Tx) error {
		// The drain jobs first, for every product of the group (a job for a product that
		// turns out missing finds an empty line): they need no lock, and the lock below is
		// held until the commit, so what runs under it is kept to one round trip.
		var jobs []river.InsertManyParams
		for _, id := range distinct(products) {
			jobs = append(jobs, river.InsertManyParams{Args: drainArgs{ProductID: id}})
		}
		if _, err := q.river.InsertManyTx(ctx, tx, jobs); err != nil {
			return fmt.Errorf("enqueue drains: %w", err)
		}
		// A line's order is its seq, and a drain reads the committed front of the line: so a
		// product's groups must commit in the order they draw seq, or a drain could decide a
		// later group before an earlier one became visible. Each group therefore holds its
		// products' accept locks (ascending, so groups never deadlock) until it commits; the
		// groups of one product follow each other, each as large as what gathered meanwhile.
		// The lock and the inserts go in one round trip. A replica paused between them and its
		// COMMIT (its connection stays up) would hold every other replica's groups of these
		// products; Postgres ends a transaction left idle that long, and the lock with it.
		hi, lo := acceptLockKeys(products)
		out, err := q.accepted.AcceptGroup(ctx, tx, orders, hi, lo)
		if err != nil {
			return err
		}
		for i, o := range out {
			results[i].state, results[i].at = o.State, o.At
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("accept orders: %w", err)
		}
		// Nothing was accepted, or — a commit on the primary alone (stock.ErrOutcomeUnknown) —
		// nothing is promised yet: either way the client may try again, with its key.
		return nil, fmt.Errorf("%w: accept orders: %w", stock.ErrUnavailable, err)
	}
	return results, nil
}
