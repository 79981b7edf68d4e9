package stock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// batcher is a replica's queue of orders for each product. Orders for one product join its
// queue; one worker at a time takes what has gathered (up to a cap) and has it decided as one
// batch — one lock acquisition, one read, one write — then takes what gathered meanwhile. There
// is no timer: a quiet product's lone order is decided at once, and a hot product's orders
// share each round trip. Orders that arrive while a batch waits for the lock join it once the
// lock is held (decide's more); those that arrive while it reads and commits form the next.
//
// The queue is also where overload is refused: an order that would not be reached within the
// patience (the lock wait) is turned away at once, with a Retry-After measured from how fast
// the queue drains, instead of waiting to be told "busy" later.
type batcher struct {
	// decide decides a batch of q. It calls more at most once, when it holds the product's
	// lock and before it reads, to add to the batch the orders that joined q while it waited
	// for the lock; the outcomes are for batch and then what more returned, in that order.
	decide func(q *productQueue, batch []*ticket, more func() []*ticket) []outcome
	// unsettled says which outcomes of a batch settle must settle (look up an order's key)
	// before they are answered. The worker answers the others at once and leaves settle to a
	// goroutine of its own, so that a batch's lookups delay neither its other orders nor the
	// next batch.
	unsettled func(t *ticket, o outcome) bool
	settle    func(ctx context.Context, tickets []*ticket, outcomes []outcome)

	maxOrders int
	maxUnits  int64
	patience  time.Duration
	metrics   *Metrics

	mu      sync.Mutex
	queues  map[int64]*productQueue
	closed  bool
	swept   time.Time
	workers sync.WaitGroup
}

// maxWaiting bounds one product's queue whatever the measured drain rate says, so that memory
// stays bounded before the first batch has been measured.
const maxWaiting = 16384

// idleKeep is how long an idle product's queue (and what it learned: drain rate, stock seen) is
// kept before it is forgotten.
const idleKeep = time.Minute

// productQueue is one product's queue on this replica.
type productQueue struct {
	id int64

	// Guarded by batcher.mu.
	waiting []*waiter
	running bool      // a worker is deciding this queue's batches
	idle    time.Time // when the worker last found the queue empty
	rate    float64   // smoothed orders decided per second while the worker runs; 0: none yet

	// Owned by the worker: only the one running at a time reads and writes it.
	hint hint
}

// waiter is an order in a queue.
type waiter struct {
	t    *ticket
	done chan outcome // buffered: answering never blocks the worker
	// taken says the order is in a batch.
	taken bool
}

func newBatcher(maxOrders int, maxUnits int64, patience time.Duration, m *Metrics) *batcher {
	return &batcher{maxOrders: maxOrders, maxUnits: maxUnits, patience: patience, metrics: m, queues: map[int64]*productQueue{}}
}

// submit queues t for product id and returns its outcome. If ctx ends first, the context's
// error is returned: t leaves the queue if it is still there, and if its batch has begun, the
// batch leaves it out unless it has already decided it — then it is sold, and only a retry with
// the same idempotency key can tell the caller so.
func (b *batcher) submit(ctx context.Context, id int64, t *ticket) outcome {
	// Arrays, not slices: the path every order takes allocates no more than its waiter.
	ws := [1]*waiter{{t: t, done: make(chan outcome, 1)}}
	var out [1]outcome
	b.enqueue(ctx, id, ws[:], out[:], true)
	return out[0]
}

// submitAll queues tickets for product id together, in their order, and returns their outcomes
// in that order. It is for orders already accepted and waiting in a durable line: they skip
// admission (they are no crowd to shed: the line lets in one round at a time), and they join
// the queue at once, so that no order submitted later on this replica gets ahead of them.
func (b *batcher) submitAll(ctx context.Context, id int64, tickets []*ticket) []outcome {
	ws := make([]*waiter, len(tickets))
	for i, t := range tickets {
		ws[i] = &waiter{t: t, done: make(chan outcome, 1)}
	}
	out := make([]outcome, len(tickets))
	b.enqueue(ctx, id, ws, out, false)
	return out
}

// enqueue queues ws for product id, in their order (refused whole when admit says the queue is
// too long), waits for them, and writes each one's outcome to out.
func (b *batcher) enqueue(ctx context.Context, id int64, ws []*waiter, out []outcome, admit bool) {
	fail := func(err error) {
		for i := range out {
			out[i] = outcome{err: err}
		}
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		fail(fmt.Errorf("%w: the replica is shutting down", ErrUnavailable))
		return
	}
	b.sweepIdle()
	q := b.queues[id]
	if q == nil {
		q = &productQueue{id: id}
		b.queues[id] = q
	}
	if admit {
		if wait, ok := b.admit(q, ws[0].t.lockWait); !ok {
			ahead := len(q.waiting) // read under the lock: the worker takes from it
			b.mu.Unlock()
			b.metrics.shed()
			fail(&BusyError{RetryAfter: wait, Shed: true,
				Reason: fmt.Sprintf("%d orders for product %d are queued ahead on this replica, about %v of work", ahead, id, wait.Round(time.Millisecond))})
			return
		}
	}
	q.waiting = append(q.waiting, ws...)
	b.metrics.queue(len(ws))
	if !q.running {
		q.running = true
		b.workers.Add(1)
		go b.work(q)
	}
	b.mu.Unlock()

	for i, w := range ws {
		select {
		case out[i] = <-w.done:
			continue
		case <-ctx.Done():
		}
		// The caller gave up: the rest leave the queue, or, if their batch has begun, are left
		// out of it unless it has decided them already.
		b.mu.Lock()
		for j := i; j < len(ws); j++ {
			select {
			case out[j] = <-ws[j].done:
				continue
			default:
			}
			out[j] = outcome{err: fmt.Errorf("waiting for the order to be decided: %w", context.Cause(ctx))}
			if ws[j].taken {
				ws[j].t.gone.Store(true)
				continue
			}
			for k, x := range q.waiting {
				if x == ws[j] {
					q.waiting = append(q.waiting[:k:k], q.waiting[k+1:]...)
					b.metrics.queue(-1)
					break
				}
			}
		}
		b.mu.Unlock()
		return
	}
}

// admit decides whether one more order may join q: only if it can expect its batch to begin
// within the patience, judged from how fast q has been draining (orders decided per second of
// batches, smoothed), or within lockWait when that is longer (an order the line admitted). It
// returns the expected wait. An idle queue always admits: its order's batch begins at once.
// b.mu is held.
func (b *batcher) admit(q *productQueue, lockWait time.Duration) (time.Duration, bool) {
	ahead := len(q.waiting)
	if ahead >= maxWaiting {
		return time.Second, false
	}
	if !q.running || q.rate == 0 {
		return 0, true
	}
	wait := time.Duration(float64(ahead+1) / q.rate * float64(time.Second))
	return wait, wait <= max(b.patience, lockWait)
}

// work decides q's batches until the queue is empty.
func (b *batcher) work(q *productQueue) {
	defer b.workers.Done()
	for {
		b.mu.Lock()
		if len(q.waiting) == 0 {
			q.running, q.idle = false, time.Now()
			b.mu.Unlock()
			return
		}
		batch := b.take(q)
		b.mu.Unlock()

		start := time.Now()
		tickets := make([]*ticket, len(batch))
		for i, w := range batch {
			tickets[i] = w.t
		}
		// Orders that arrive while the batch waits for the product's lock join it once the
		// lock is held: with several replicas taking turns at the lock, most of a batch's
		// time is that wait, and a batch formed only when the wait began left them for the
		// next one — a lock, a read and a commit more for the same orders
		// (docs/benchmarks.md §10: 24 orders a batch became 37–38 in the closed loop).
		more := func() []*ticket {
			b.mu.Lock()
			joined := b.takeAfter(q, batch)
			b.mu.Unlock()
			batch = append(batch, joined...)
			ts := make([]*ticket, len(joined))
			for i, w := range joined {
				ts[i] = w.t
			}
			tickets = append(tickets, ts...)
			return ts
		}
		outcomes := b.decide(q, tickets, more)
		b.answer(batch, tickets, outcomes)
		// Measured from the batch's start to its answers: under overload batches are full and
		// this is the rate the queue drains at; a batch that waited out a stalled lock counts
		// as slow, which is what it was.
		rate := float64(len(batch)) / max(time.Since(start), time.Microsecond).Seconds()
		b.mu.Lock()
		q.rate = smooth(q.rate, rate)
		b.mu.Unlock()
	}
}

// answer gives each order of a batch its outcome: at once, or, for those that must be settled
// first, from a goroutine of the batcher's that settles them (close waits for it).
func (b *batcher) answer(batch []*waiter, tickets []*ticket, outcomes []outcome) {
	var later []int
	for i, w := range batch {
		if b.unsettled != nil && b.unsettled(tickets[i], outcomes[i]) {
			later = append(later, i)
			continue
		}
		w.done <- outcomes[i]
	}
	if len(later) == 0 {
		return
	}
	ts, outs := make([]*ticket, len(later)), make([]outcome, len(later))
	for j, i := range later {
		ts[j], outs[j] = tickets[i], outcomes[i]
	}
	b.workers.Go(func() {
		b.settle(context.Background(), ts, outs)
		for j, i := range later {
			batch[i].done <- outs[j]
		}
	})
}

// take removes the next batch from q: the oldest orders, up to maxOrders and maxUnits (at least
// one order). b.mu is held.
func (b *batcher) take(q *productQueue) []*waiter { return b.takeAfter(q, nil) }

// takeAfter removes from q the oldest orders that fit in a batch beside batch (within
// maxOrders and maxUnits; at least one order when batch is empty). b.mu is held.
func (b *batcher) takeAfter(q *productQueue, batch []*waiter) []*waiter {
	have, units := len(batch), int64(0)
	for _, w := range batch {
		units += w.t.items[0].Quantity
	}
	n := 0
	for n < len(q.waiting) && have+n < b.maxOrders {
		u := units + q.waiting[n].t.items[0].Quantity
		if have+n > 0 && u > b.maxUnits {
			break
		}
		units = u
		n++
	}
	taken := q.waiting[:n:n]
	// A new slice for the rest, so that the batch's waiters are not kept alive by the queue.
	q.waiting = append([]*waiter(nil), q.waiting[n:]...)
	for _, w := range taken {
		w.taken = true
	}
	b.metrics.queue(-n)
	return taken
}

// sweepIdle forgets queues idle for longer than idleKeep, at most every few seconds. b.mu is
// held.
func (b *batcher) sweepIdle() {
	now := time.Now()
	if now.Sub(b.swept) < idleKeep/10 {
		return
	}
	b.swept = now
	for id, q := range b.queues {
		if !q.running && len(q.waiting) == 0 && now.Sub(q.idle) > idleKeep {
			delete(b.queues, id)
		}
	}
}

// close refuses new orders and waits for the queued ones to be decided.
func (b *batcher) close() {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.workers.Wait()
}

// smooth folds sample into an exponentially weighted average (weight 1/4), so that one slow
// batch does not make the queue refuse everybody.
func smooth(avg, sample float64) float64 {
	if avg == 0 {
		return sample
	}
	return avg + (sample-avg)/4
}

// hint is what a product's worker remembers between batches, to decide whether a batch is worth
// a look at the stock before taking the lock.
type hint struct {
	known bool  // the product exists
	stock int64 // its stock after the last batch, as this replica saw it
}

// worthLooking reports whether the batch should read the stock before taking the lock: when the
// product is not known to exist (a missing product takes no lock, and leaves no fencing counter
// behind in Redis), or when the last batch left too little for any of these orders (then the
// batch is most likely refused whole, and refusing needs no lock). A stale hint costs one read
// or one lock, never a wrong answer: whatever is sold is decided under the lock.
func (h *hint) worthLooking(tickets []*ticket) bool {
	if h == nil || !h.known {
		return true
	}
	for _, t := range tickets {
		if t.items[0].Quantity <= h.stock {
			return false
		}
	}
	return true
}

// saw records what a read of product id showed and what the batch takes from it.
func (h *hint) saw(id int64, snap Snapshot, w Write) {
	if h == nil {
		return
	}
	l, ok := snap.Levels[id]
	h.known, h.stock = ok, l.Stock
	for _, d := range w.Decrements {
		if d.ProductID == id {
			h.stock -= d.Quantity
		}
	}
}
