package stock_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// Truthful answers: an order is told "nothing was sold" (busy, lock lost) only when nothing was,
// and an outcome the service cannot know is "unavailable, retry with the same key" whatever
// else went wrong meanwhile. These tests run on the in-memory store and fakes of the lock, so
// that each moment a lease can be lost is chosen exactly.

// lossyLocker grants every lock at once, with a growing fence, and loses them when lose is
// called during the work: the work's context is cancelled, and the work's error comes back
// wrapped with stock.ErrLockLost, as the Redis locker reports it.
type lossyLocker struct {
	fence atomic.Int64
	lost  atomic.Bool
	lose  func() // set while the work runs
}

func (l *lossyLocker) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *stock.Grant) error) error {
	work, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
	defer cancel(nil)
	l.lost.Store(false)
	l.lose = func() {
		l.lost.Store(true)
		cancel(errors.New("lease lost"))
	}
	g := &stock.Grant{Fences: map[int64]int64{}, Notes: map[int64]string{}, Leave: map[int64]string{}}
	for _, id := range ids {
		g.Fences[id] = l.fence.Add(1)
	}
	err := fn(work, g)
	if err != nil && l.lost.Load() {
		return fmt.Errorf("%w: %w", stock.ErrLockLost, err)
	}
	return err
}

// commitFault is what faultyStore does to a Commit.
type commitFault int

const (
	noFault            commitFault = iota
	loseBeforeWrite                // the lease is lost, then the write is tried on the cancelled context
	loseReplyWritten               // the write commits, the lease is lost, the reply is lost
	loseReplyUnwritten             // the write never commits, the lease is lost, the reply is lost
	loseAfterCommit                // the write commits and is answered; then the lease is lost
)

// faultyStore is the in-memory store with a fault injected into its next Commit that confirms
// orders, as the Postgres store reports each case (Store.Commit's contract).
type faultyStore struct {
	*stocktest.MemStore
	locker      *lossyLocker
	fault       commitFault
	records     atomic.Int64 // Records calls
	commits     atomic.Int64 // Commit calls
	failRecords bool
}

var errReplyLost = fmt.Errorf("%w: %w: commit batch: %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown, io.ErrUnexpectedEOF)

func (s *faultyStore) Commit(ctx context.Context, w stock.Write) (stock.Committed, error) {
	s.commits.Add(1)
	fault := s.fault
	if len(w.Orders) == 0 {
		fault = noFault
	}
	switch fault {
	case loseBeforeWrite:
		s.locker.lose()
		if err := ctx.Err(); err != nil {
			return stock.Committed{}, fmt.Errorf("commit batch: %w", err) // never sent: nothing written
		}
	case loseReplyWritten:
		if _, err := s.MemStore.Commit(ctx, w); err != nil {
			return stock.Committed{}, err
		}
		s.locker.lose()
		return stock.Committed{}, errReplyLost
	case loseReplyUnwritten:
		s.locker.lose()
		return stock.Committed{}, errReplyLost
	case loseAfterCommit:
		c, err := s.MemStore.Commit(ctx, w)
		s.locker.lose()
		return c, err
	}
	return s.MemStore.Commit(ctx, w)
}

func (s *faultyStore) Records(ctx context.Context, keys []stock.RecordKey) (map[stock.RecordKey]stock.IdempotencyRecord, error) {
	s.records.Add(1)
	if s.failRecords {
		return nil, fmt.Errorf("%w: read idempotency records: connection refused", stock.ErrUnavailable)
	}
	return s.MemStore.Records(ctx, keys)
}

// TestLockLostAnswers: a lease lost at each moment of a batch's write, with and without an
// Idempotency-Key. Before the write: nothing sold, busy (lock lost). During it, with the reply
// lost: unknown — unavailable, whatever the lost lease says — and a keyed order whose write did
// commit is answered with it. After the commit: sold.
func TestLockLostAnswers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fault commitFault
		keyed bool
		// want: "sold" (a new order), "replayed" (the order, found under its key), "lock-lost"
		// (nothing sold, and known so), "unknown" (unavailable; the outcome unknown)
		want string
		sold int64
	}{
		{"before the write", loseBeforeWrite, false, "lock-lost", 0},
		{"before the write, keyed", loseBeforeWrite, true, "lock-lost", 0},
		{"during it, committed, reply lost", loseReplyWritten, false, "unknown", 1},
		{"during it, committed, reply lost, keyed", loseReplyWritten, true, "replayed", 1},
		{"during it, not committed, reply lost", loseReplyUnwritten, false, "unknown", 0},
		{"during it, not committed, reply lost, keyed", loseReplyUnwritten, true, "unknown", 0},
		{"after the commit", loseAfterCommit, false, "sold", 1},
		{"after the commit, keyed", loseAfterCommit, true, "sold", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			locker := &lossyLocker{}
			store := &faultyStore{MemStore: stocktest.NewMemStore(), locker: locker, fault: tc.fault}
			reg := prometheus.NewRegistry()
			svc := stock.NewService(store, locker, stock.Config{}, stock.NewMetrics(reg))
			t.Cleanup(svc.Close)
			p, err := store.CreateProduct(context.Background(), stock.NewProduct{SKU: "p", Name: "p", Stock: 5})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			req := order("c", one(p.ID, 1))
			if tc.keyed {
				req.IdempotencyKey = "k-" + uuid.NewString()
			}
			res, err := svc.PlaceOrder(context.Background(), req)
			got := "other: " + fmt.Sprint(err)
			switch {
			case err == nil && res.Replayed:
				got = "replayed"
			case err == nil:
				got = "sold"
			case errors.Is(err, stock.ErrUnavailable) && errors.Is(err, stock.ErrOutcomeUnknown):
				got = "unknown"
			case errors.Is(err, stock.ErrLockLost) && !errors.Is(err, stock.ErrUnavailable):
				got = "lock-lost"
			}
			if got != tc.want {
				t.Errorf("answer = %s (%+v, %v), want %s", got, res, err, tc.want)
			}
			if a, _ := store.Audit(context.Background(), p.ID); a.Sold != tc.sold {
				t.Errorf("sold = %d, want %d", a.Sold, tc.sold)
			}
			// The metrics say what the API answers: unknown is unavailable, never busy.
			wantOutcome := map[string]string{"sold": "confirmed", "replayed": "replayed", "lock-lost": "busy", "unknown": "unavailable"}[tc.want]
			if n := testenv.Metric(t, reg, "stocksvc_orders_total", "outcome", wantOutcome); n != 1 {
				t.Errorf("orders counted %s = %v, want 1", wantOutcome, n)
			}
		})
	}
}

// busyLocker never grants a lock: every batch is answered busy.
type busyLocker struct{}

func (busyLocker) WithProducts(context.Context, []int64, func(context.Context, *stock.Grant) error) error {
	return &stock.BusyError{RetryAfter: 1, Reason: "held by another replica"}
}

// TestBusyNeverHidesAStoredOutcome: a keyed order whose batch could not get the lock is
// answered with its key's stored outcome when it has one — an earlier attempt, confirmed on a
// replica that died before answering, must not be told "busy, nothing was sold". One with no
// stored outcome is busy; one whose key could not be looked up is unavailable.
func TestBusyNeverHidesAStoredOutcome(t *testing.T) {
	t.Parallel()
	mem := stocktest.NewMemStore()
	ctx := context.Background()
	p, err := mem.CreateProduct(ctx, stock.NewProduct{SKU: "p", Name: "p", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	earlier := order("c", one(p.ID, 1))
	earlier.IdempotencyKey = "k-" + uuid.NewString()
	first, err := newMemService(t, mem, &stocktest.LocalLocker{}).PlaceOrder(ctx, earlier)
	if err != nil {
		t.Fatalf("earlier attempt: %v", err)
	}

	store := &faultyStore{MemStore: mem}
	svc := newMemService(t, store, busyLocker{})
	// The product's first batch on this replica looks at the stock before the lock, and would
	// replay a stored key from that read; the ones after go straight to the lock.
	if _, err := svc.PlaceOrder(ctx, order("c", one(p.ID, 1))); !errors.Is(err, stock.ErrBusy) {
		t.Fatalf("first order while busy = %v, want busy", err)
	}
	res, err := svc.PlaceOrder(ctx, earlier)
	if err != nil || !res.Replayed || res.Order.ID != first.Order.ID {
		t.Errorf("retry of the confirmed key while busy = %+v, %v; want order %s replayed", res, err, first.Order.ID)
	}
	fresh := order("c", one(p.ID, 1))
	fresh.IdempotencyKey = "k-" + uuid.NewString()
	if _, err := svc.PlaceOrder(ctx, fresh); !errors.Is(err, stock.ErrBusy) || errors.Is(err, stock.ErrUnavailable) {
		t.Errorf("new key while busy = %v, want busy", err)
	}
	if _, err := svc.PlaceOrder(ctx, order("c", one(p.ID, 1))); !errors.Is(err, stock.ErrBusy) {
		t.Errorf("no key while busy = %v, want busy", err)
	}
	lookups := store.records.Load()
	if lookups != 2 {
		t.Errorf("record lookups = %d, want 2: one per keyed order's failed batch, none without a key", lookups)
	}

	store.failRecords = true
	if _, err := svc.PlaceOrder(ctx, fresh); !errors.Is(err, stock.ErrUnavailable) {
		t.Errorf("busy, and the key could not be looked up = %v, want unavailable: whether it was bought is unknown", err)
	}
}

// TestShedNeverHidesAStoredOutcome: an order turned away at admission (its product's queue on
// this replica is too long) is looked up too when it has a key.
func TestShedNeverHidesAStoredOutcome(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store := &faultyStore{MemStore: stocktest.NewMemStore()}
	locker := &stocktest.LocalLocker{}
	asking := &askingLocker{Locker: locker, asked: make(chan struct{}, 8)}
	// A queue wait of a nanosecond: once the queue has a measured rate and a batch running,
	// every further order is shed.
	svc := stock.NewService(store, asking, stock.Config{QueueWait: 1}, nil)
	t.Cleanup(svc.Close)
	p, err := store.CreateProduct(ctx, stock.NewProduct{SKU: "p", Name: "p", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	earlier := order("c", one(p.ID, 1))
	earlier.IdempotencyKey = "k-" + uuid.NewString()
	first, err := svc.PlaceOrder(ctx, earlier) // also measures the queue's rate
	if err != nil {
		t.Fatalf("earlier attempt: %v", err)
	}
	<-asking.asked // its batch's

	// Hold the product's lock, and let one order's batch wait for it: the queue is running.
	held, release := make(chan struct{}), make(chan struct{})
	holder := make(chan error, 1)
	go func() {
		holder <- locker.WithProducts(ctx, []int64{p.ID}, func(context.Context, *stock.Grant) error {
			close(held)
			<-release
			return nil
		})
	}()
	<-held
	waiting := make(chan error, 1)
	go func() {
		_, err := svc.PlaceOrder(ctx, order("w", one(p.ID, 1)))
		waiting <- err
	}()
	// Its batch asks for the lock once the queue's worker has measured the first batch.
	<-asking.asked

	res, err := svc.PlaceOrder(ctx, earlier)
	if err != nil || !res.Replayed || res.Order.ID != first.Order.ID {
		t.Errorf("retry shed at admission = %+v, %v; want order %s replayed", res, err, first.Order.ID)
	}
	var busy *stock.BusyError
	if _, err := svc.PlaceOrder(ctx, order("x", one(p.ID, 1))); !errors.As(err, &busy) || !busy.Shed {
		t.Errorf("unkeyed order while the queue is long = %v, want shed busy", err)
	}
	close(release)
	if err := <-holder; err != nil {
		t.Errorf("holder: %v", err)
	}
	if err := <-waiting; err != nil {
		t.Errorf("the waiting order: %v", err)
	}
}

func newMemService(t *testing.T, store stock.Store, locker stock.Locker) *stock.Service {
	t.Helper()
	svc := stock.NewService(store, locker, stock.Config{}, nil)
	t.Cleanup(svc.Close)
	return svc
}

// askingLocker tells, on asked, each time a batch asks for its locks.
type askingLocker struct {
	stock.Locker
	asked chan struct{}
}

func (l *askingLocker) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *stock.Grant) error) error {
	l.asked <- struct{}{}
	return l.Locker.WithProducts(ctx, ids, fn)
}
