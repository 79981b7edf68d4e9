package stock

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The queue's rules need no servers: a test stands in for the batch's decision and holds each
// batch until it lets it go.

// heldDecisions records each batch handed to it and holds it until release is called.
type heldDecisions struct {
	mu      sync.Mutex
	batches [][]*ticket
	arrived chan int // the size of each batch, as it begins
	release chan struct{}
}

func newHeldDecisions() *heldDecisions {
	return &heldDecisions{arrived: make(chan int, 100), release: make(chan struct{}, 100)}
}

func (h *heldDecisions) decide(_ *productQueue, batch []*ticket, _ func() []*ticket) []outcome {
	h.mu.Lock()
	h.batches = append(h.batches, batch)
	h.mu.Unlock()
	h.arrived <- len(batch)
	<-h.release
	out := make([]outcome, len(batch))
	for i, t := range batch {
		out[i].order = Order{ID: t.id}
	}
	return out
}

func newTestBatcher(t *testing.T, maxOrders int, maxUnits int64, patience time.Duration) (*batcher, *heldDecisions) {
	h := newHeldDecisions()
	b := newBatcher(maxOrders, maxUnits, patience, nil)
	b.decide = h.decide
	t.Cleanup(func() {
		close(h.release) // lets every held batch go
		b.close()
	})
	return b, h
}

// submitAsync submits an order for product 1 and returns where its outcome will arrive.
func submitAsync(ctx context.Context, b *batcher, qty int64) <-chan outcome {
	out := make(chan outcome, 1)
	go func() { out <- b.submit(ctx, 1, tk("c", item(1, qty))) }()
	return out
}

// queued waits until product 1's queue holds n orders.
func queued(t *testing.T, b *batcher, n int) {
	t.Helper()
	testenv.Poll(t, 10*time.Second, "the queue to hold "+strconv.Itoa(n)+" orders", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		q := b.queues[1]
		return q != nil && len(q.waiting) == n
	})
}

func TestBatcherGathersWhileABatchIsBeingDecided(t *testing.T) {
	b, h := newTestBatcher(t, 3, 100, time.Minute)
	first := submitAsync(context.Background(), b, 1)
	if n := <-h.arrived; n != 1 {
		t.Fatalf("first batch has %d orders, want the lone order at once", n)
	}
	// While it is decided, five more gather: they go in batches of at most three, in order.
	var rest []<-chan outcome
	for range 5 {
		rest = append(rest, submitAsync(context.Background(), b, 1))
		queued(t, b, len(rest))
	}
	h.release <- struct{}{}
	if err := (<-first).err; err != nil {
		t.Fatalf("first order: %v", err)
	}
	if n := <-h.arrived; n != 3 {
		t.Errorf("second batch has %d orders, want 3 (the cap)", n)
	}
	h.release <- struct{}{}
	if n := <-h.arrived; n != 2 {
		t.Errorf("third batch has %d orders, want the remaining 2", n)
	}
	h.release <- struct{}{}
	for i, ch := range rest {
		if o := <-ch; o.err != nil {
			t.Errorf("order %d: %v", i, o.err)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.batches) != 3 {
		t.Fatalf("%d batches, want 3", len(h.batches))
	}
}

func TestBatcherCapsUnits(t *testing.T) {
	b, h := newTestBatcher(t, 100, 5, time.Minute)
	first := submitAsync(context.Background(), b, 1)
	<-h.arrived
	var rest []<-chan outcome
	for _, q := range []int64{3, 2, 1, 4} {
		rest = append(rest, submitAsync(context.Background(), b, q))
		queued(t, b, len(rest))
	}
	h.release <- struct{}{}
	<-first
	if n := <-h.arrived; n != 2 {
		t.Errorf("batch has %d orders, want 2 (3+2 units reach the cap of 5)", n)
	}
	h.release <- struct{}{}
	if n := <-h.arrived; n != 2 {
		t.Errorf("batch has %d orders, want 2 (1+4 units)", n)
	}
	h.release <- struct{}{}
	for _, ch := range rest {
		<-ch
	}
}

func TestBatcherRefusesWhatItCannotReachInTime(t *testing.T) {
	b, h := newTestBatcher(t, 2, 100, 250*time.Millisecond)
	// An idle queue admits whatever its history: the order's batch begins at once.
	b.mu.Lock()
	b.queues[1] = &productQueue{id: 1, rate: 0.001}
	b.mu.Unlock()
	first := submitAsync(context.Background(), b, 1)
	<-h.arrived
	// Draining at 20 orders/s, the queue admits whoever can expect to be reached within
	// 250 ms: five orders (the fifth at 250 ms), not a sixth (300 ms).
	b.mu.Lock()
	b.queues[1].rate = 20
	b.mu.Unlock()
	var admitted []<-chan outcome
	for range 5 {
		admitted = append(admitted, submitAsync(context.Background(), b, 1))
		queued(t, b, len(admitted))
	}
	o := b.submit(context.Background(), 1, tk("late", item(1, 1)))
	var busy *BusyError
	if !errors.As(o.err, &busy) || !errors.Is(o.err, ErrBusy) {
		t.Fatalf("order behind five others at 20 orders/s: %v, want a BusyError", o.err)
	}
	if busy.RetryAfter != 300*time.Millisecond {
		t.Errorf("RetryAfter = %v, want 300ms: six orders at 20 a second", busy.RetryAfter)
	}
	if !busy.Shed {
		t.Errorf("Shed = false, want true: the order was turned away by the queue, not the lock")
	}
	for range 4 {
		h.release <- struct{}{}
	}
	<-first
	for _, ch := range admitted {
		if o := <-ch; o.err != nil {
			t.Errorf("admitted order: %v", o.err)
		}
	}
}

func TestBatcherCallerLeavingTheQueue(t *testing.T) {
	b, h := newTestBatcher(t, 10, 100, time.Minute)
	first := submitAsync(context.Background(), b, 1)
	<-h.arrived
	ctx, cancel := context.WithCancel(context.Background())
	leaving := submitAsync(ctx, b, 1)
	queued(t, b, 1)
	cancel()
	if o := <-leaving; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("order whose caller left while queued: %v, want context.Canceled", o.err)
	}
	queued(t, b, 0) // it left the queue: no batch will see it
	h.release <- struct{}{}
	<-first

	// A caller that leaves once its batch has begun is answered at once, and its ticket is
	// marked so that the batch, if it has not decided it yet, leaves it out.
	ctx, cancel = context.WithCancel(context.Background())
	tkt := tk("g", item(1, 1))
	out := make(chan outcome, 1)
	go func() { out <- b.submit(ctx, 1, tkt) }()
	<-h.arrived
	cancel()
	if o := <-out; !errors.Is(o.err, context.Canceled) {
		t.Fatalf("order whose caller left during its batch: %v, want context.Canceled", o.err)
	}
	if !tkt.gone.Load() {
		t.Errorf("the ticket is not marked gone")
	}
	h.release <- struct{}{}
}

func TestBatcherClosed(t *testing.T) {
	b, _ := newTestBatcher(t, 10, 100, time.Minute)
	b.close()
	if o := b.submit(context.Background(), 1, tk("c", item(1, 1))); !errors.Is(o.err, ErrUnavailable) {
		t.Errorf("order after close: %v, want ErrUnavailable", o.err)
	}
}

// Orders already accepted for later join the queue together, in their order, and are not
// turned away however long the queue: they are no crowd, and they have waited their turn.
func TestBatcherSubmitAllKeepsOrderAndSkipsAdmission(t *testing.T) {
	b, h := newTestBatcher(t, 4, 100, 50*time.Millisecond)
	first := submitAsync(context.Background(), b, 1)
	<-h.arrived
	b.mu.Lock()
	b.queues[1].rate = 20 // one order more would wait 100 ms: past the patience
	b.mu.Unlock()
	tickets := make([]*ticket, 6)
	for i := range tickets {
		tickets[i] = tk("accepted-"+strconv.Itoa(i), item(1, 1))
	}
	done := make(chan []outcome, 1)
	go func() { done <- b.submitAll(context.Background(), 1, tickets) }()
	queued(t, b, 6)
	if o := b.submit(context.Background(), 1, tk("late", item(1, 1))); !errors.Is(o.err, ErrBusy) {
		t.Errorf("a synchronous order behind them: %v, want busy", o.err)
	}
	for range 3 {
		h.release <- struct{}{}
	}
	<-first
	for i, o := range <-done {
		if o.err != nil || o.order.ID != tickets[i].id {
			t.Errorf("outcome %d = %+v, want ticket %d's order", i, o, i)
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var got []*ticket
	for _, batch := range h.batches[1:] {
		got = append(got, batch...)
	}
	for i := range tickets {
		if i >= len(got) || got[i] != tickets[i] {
			t.Fatalf("batches took the tickets out of order: %d tickets, want %d in submission order", len(got), len(tickets))
		}
	}
}

// A caller of submitAll that gives up takes its orders that no batch has begun out of the
// queue, and marks the ones whose batch has begun, as submit does for one.
func TestBatcherSubmitAllCallerLeaving(t *testing.T) {
	b, h := newTestBatcher(t, 2, 100, time.Minute)
	first := submitAsync(context.Background(), b, 1)
	<-h.arrived
	ctx, cancel := context.WithCancel(context.Background())
	tickets := []*ticket{tk("a", item(1, 1)), tk("b", item(1, 1)), tk("c", item(1, 1))}
	done := make(chan []outcome, 1)
	go func() { done <- b.submitAll(ctx, 1, tickets) }()
	queued(t, b, 3)
	h.release <- struct{}{}
	<-first
	<-h.arrived // a and b are in a batch; c waits
	cancel()
	out := <-done
	for i, o := range out {
		if !errors.Is(o.err, context.Canceled) {
			t.Errorf("outcome %d = %v, want context.Canceled", i, o.err)
		}
	}
	queued(t, b, 0)
	if !tickets[0].gone.Load() || !tickets[1].gone.Load() || tickets[2].gone.Load() {
		t.Errorf("gone = %t %t %t, want the two in the batch marked, the queued one not", tickets[0].gone.Load(), tickets[1].gone.Load(), tickets[2].gone.Load())
	}
	h.release <- struct{}{}
}

// TestBatcherLetsOrdersQueuedDuringTheLockWaitJoin: a batch's decision calls more once it holds
// the lock; the orders that queued meanwhile join the batch, oldest first, within the caps on
// orders and units, and every order is answered with its own outcome.
func TestBatcherLetsOrdersQueuedDuringTheLockWaitJoin(t *testing.T) {
	b := newBatcher(4, 5, time.Minute, nil)
	asked, locked := make(chan struct{}, 10), make(chan struct{})
	var (
		mu    sync.Mutex
		sizes [][2]int // each batch: the orders it was given, the orders that joined
	)
	b.decide = func(_ *productQueue, batch []*ticket, more func() []*ticket) []outcome {
		asked <- struct{}{}
		<-locked // waiting for the product's lock
		joined := more()
		mu.Lock()
		sizes = append(sizes, [2]int{len(batch), len(joined)})
		mu.Unlock()
		all := append(append([]*ticket(nil), batch...), joined...)
		out := make([]outcome, len(all))
		for i, t := range all {
			out[i].order = Order{ID: t.id}
		}
		return out
	}
	t.Cleanup(b.close)
	type sent struct {
		t   *ticket
		out chan outcome
	}
	submit := func(qty int64) sent {
		s := sent{tk("c", item(1, qty)), make(chan outcome, 1)}
		go func() { s.out <- b.submit(context.Background(), 1, s.t) }()
		return s
	}
	all := []sent{submit(1)}
	<-asked // the first batch, one order, waits for the lock
	// Meanwhile 2, 1, 3, 1 and 1 units queue. With the first order's unit, 2 and 1 fit the
	// cap of 5 units; 3 does not, and the orders behind it do not jump it.
	for i, qty := range []int64{2, 1, 3, 1, 1} {
		all = append(all, submit(qty))
		queued(t, b, i+1)
	}
	locked <- struct{}{}
	close(locked) // the batches after it have the lock at once
	for _, s := range all {
		if o := <-s.out; o.err != nil || o.order.ID != s.t.id {
			t.Errorf("order %s answered %+v, want its own outcome", s.t.id, o)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The next batch is what was left: 3 + 1 + 1 units.
	if want := [][2]int{{1, 2}, {3, 0}}; !slices.Equal(sizes, want) {
		t.Errorf("batches (given, joined) = %v, want %v", sizes, want)
	}
}
