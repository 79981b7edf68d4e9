package stock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// Each test below opens the race window by hand: A's batch reads the stock and is held at the
// gate; purchase B runs to completion on another replica; then A resumes and tries to write.
// Exactly one layer is on, so the layer that refuses A's write is the one under test; A's batch
// then reads again and is decided from what is left. They run on the in-memory store, whose
// write carries the same conditions as Postgres's (the store contract, in package stockpg,
// holds both to them); the races under load run on Postgres.

// race runs the A/B interleaving and returns A's and B's results.
func race(t *testing.T, a, b *replica, g *gate, reqA, reqB stock.OrderRequest, between func()) (resA, resB error) {
	t.Helper()
	ctx := context.Background()
	done := make(chan error, 1)
	go func() {
		_, err := a.svc.PlaceOrder(ctx, reqA)
		done <- err
	}()
	select {
	case <-g.reached:
	case err := <-done:
		t.Fatalf("purchase A finished before reaching the gate: %v", err)
	}
	if between != nil {
		between()
	}
	_, resB = b.svc.PlaceOrder(ctx, reqB)
	close(g.open)
	return <-done, resB
}

func TestVersionLayerCatchesConcurrentWrite(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	d := stock.Defense{Version: true, Check: true}
	a, b := w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{})
	id := createProduct(t, a, "version", 5)
	g := newGate()
	stock.SetAfterRead(a.svc, g.hook)

	errA, errB := race(t, a, b, g, order("a", one(id, 1)), order("b", one(id, 1)), nil)
	if errA != nil || errB != nil {
		t.Fatalf("A: %v, B: %v; want both to succeed (A after a retry)", errA, errB)
	}
	if got := catches(t, a, stock.LayerVersion); got != 1 {
		t.Errorf("version catches = %v, want 1", got)
	}
	if au := mustAudit(t, a, id); au.Stock != 3 || au.Sold != 2 || !au.Consistent() {
		t.Errorf("audit = %+v, want stock 3, sold 2, consistent", au)
	}
}

func TestGuardLayerCatchesLastUnitRace(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	d := stock.Defense{Guard: true, Check: true}
	a, b := w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{})
	id := createProduct(t, a, "guard", 1)
	g := newGate()
	stock.SetAfterRead(a.svc, g.hook)

	errA, errB := race(t, a, b, g, order("a", one(id, 1)), order("b", one(id, 1)), nil)
	if errB != nil {
		t.Fatalf("B: %v, want success", errB)
	}
	var sold *stock.SoldOutError
	if !errors.As(errA, &sold) || sold.ProductID != id || sold.Available != 0 {
		t.Fatalf("A: %v, want a sold-out error for product %d with 0 available", errA, id)
	}
	if got := catches(t, a, stock.LayerGuard); got != 1 {
		t.Errorf("guard catches = %v, want 1", got)
	}
	if au := mustAudit(t, a, id); au.Stock != 0 || au.Sold != 1 || !au.Consistent() {
		t.Errorf("audit = %+v, want stock 0, sold 1, consistent", au)
	}
}

func TestCheckConstraintCatchesWhatNothingElseStops(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	d := stock.Defense{Check: true}
	a, b := w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{})
	id := createProduct(t, a, "check", 1)
	g := newGate()
	stock.SetAfterRead(a.svc, g.hook)

	errA, errB := race(t, a, b, g, order("a", one(id, 1)), order("b", one(id, 1)), nil)
	if errB != nil {
		t.Fatalf("B: %v, want success", errB)
	}
	var sold *stock.SoldOutError
	if !errors.As(errA, &sold) || sold.Available != 0 {
		t.Fatalf("A: %v, want sold out with 0 available", errA)
	}
	if got := catches(t, a, stock.LayerCheck); got != 1 {
		t.Errorf("check catches = %v, want 1", got)
	}
	if au := mustAudit(t, a, id); au.Stock != 0 || au.Sold != 1 || !au.Consistent() {
		t.Errorf("audit = %+v, want stock 0, sold 1, consistent", au)
	}
}

// TestHoldLimitCatchesWhatAStaleReadMissed: the cap on a customer's held units in the store
// (customer_holds' CHECK, in Postgres), on its own. With no lock, A's batch reads that the
// customer holds nothing, B holds the cap for the same customer meanwhile, and A's write —
// decided by the replica's own check, from its stale read — would take the customer above it:
// the CHECK refuses the whole write, and A's next read refuses the order for the cap.
func TestHoldLimitCatchesWhatAStaleReadMissed(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	d := stock.Defense{Check: true}
	a, b := w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{})
	id := createRuled(t, a, "hold-limit", 10, stock.SaleRules{HoldFor: time.Hour, MaxHeldPerCustomer: 2})
	g := newGate()
	stock.SetAfterRead(a.svc, g.hook)

	errA, errB := race(t, a, b, g, order("hoarder", one(id, 1)), order("hoarder", one(id, 2)), nil)
	if errB != nil {
		t.Fatalf("B: %v, want success", errB)
	}
	var over *stock.HoldLimitError
	if !errors.As(errA, &over) || over.Held != 2 || over.Limit != 2 || over.Requested != 1 {
		t.Fatalf("A: %v, want refused for the cap: 2 held of 2", errA)
	}
	if got := catches(t, a, stock.LayerHoldLimit); got != 1 {
		t.Errorf("hold_limit catches = %v, want 1", got)
	}
	if n := heldOf(t, w, id, "hoarder"); n != 2 {
		t.Errorf("customer_holds: %d held, want 2", n)
	}
	if au := mustAudit(t, a, id); au.Held != 2 || au.Stock != 8 || !au.Consistent() {
		t.Errorf("audit = %+v, want 2 held, 8 left, consistent", au)
	}
}

// heldOf is what the in-memory store says customer holds of product id (0 when none), as
// heldCount reads it from Postgres's customer_holds.
func heldOf(t testing.TB, w *memWorld, id int64, customer string) int64 {
	t.Helper()
	snap, err := w.store.Snapshot(context.Background(), []int64{id}, nil, []string{customer})
	if err != nil {
		t.Fatalf("read the held units: %v", err)
	}
	return snap.Levels[id].Held[customer]
}

// TestFenceCatchesHolderWhoseLockExpired ends A's lease while A is between read and write — what
// an expired lease looks like to everyone else — so that B obtains the lock with a newer fencing
// token and sells. A's write must then be refused, although A still believes it holds the lock
// (its next refresh is seconds away).
func TestFenceCatchesHolderWhoseLockExpired(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	d := stock.DefaultDefense()
	a, b := w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{})
	id := createProduct(t, a, "fence", 5)
	g := newGate()
	stock.SetAfterRead(a.svc, g.hook)

	errA, errB := race(t, a, b, g, order("a", one(id, 1)), order("b", one(id, 1)), func() { w.locker.Expire(id) })
	if errB != nil {
		t.Fatalf("B: %v, want success", errB)
	}
	if !errors.Is(errA, stock.ErrLockLost) {
		t.Fatalf("A: %v, want ErrLockLost", errA)
	}
	if got := catches(t, a, stock.LayerFence); got != 1 {
		t.Errorf("fence catches = %v, want 1", got)
	}
	if au := mustAudit(t, a, id); au.Stock != 4 || au.Sold != 1 || !au.Consistent() {
		t.Errorf("audit = %+v, want stock 4, sold 1, consistent", au)
	}
}

// TestNaiveWriteOversells is the control: with no layer on, the same interleaving sells the
// last unit twice.
func TestNaiveWriteOversells(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	var naive stock.Defense
	a, b := w.replica(t, naive, replicaOptions{}), w.replica(t, naive, replicaOptions{})
	id := createProduct(t, a, "naive", 1)
	g := newGate()
	stock.SetAfterRead(a.svc, g.hook)

	errA, errB := race(t, a, b, g, order("a", one(id, 1)), order("b", one(id, 1)), nil)
	if errA != nil || errB != nil {
		t.Fatalf("A: %v, B: %v; the naive write refuses nothing, want both to succeed", errA, errB)
	}
	au := mustAudit(t, a, id)
	if au.Sold != 2 || au.Received != 1 || au.Consistent() {
		t.Fatalf("audit = %+v, want 2 sold out of 1 received and the audit inconsistent: the oversell the layers exist to stop", au)
	}
}

// loadResult summarises a concurrent sale.
type loadResult struct {
	confirmedUnits int64
	confirmed      int64
	orderIDs       map[uuid.UUID]int64 // confirmed order → units
	otherErrors    []error
}

// sell runs orders purchases of 1..3 units from workers goroutines against the replicas in
// turn, and tallies what the service answered.
func sell(t *testing.T, replicas []*replica, id int64, workers, orders int) loadResult {
	t.Helper()
	var (
		mu   sync.Mutex
		res  = loadResult{orderIDs: map[uuid.UUID]int64{}}
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for w := range workers {
		wg.Go(func() {
			for {
				n := next.Add(1)
				if n > int64(orders) {
					return
				}
				qty := rand.Int64N(3) + 1
				r := replicas[int(n)%len(replicas)]
				out, err := r.svc.PlaceOrder(context.Background(), order(fmt.Sprintf("w%d", w), one(id, qty)))
				mu.Lock()
				switch {
				case err == nil:
					res.confirmed++
					res.confirmedUnits += qty
					res.orderIDs[out.Order.ID] = qty
				case errors.Is(err, stock.ErrSoldOut), errors.Is(err, stock.ErrBusy):
				default:
					res.otherErrors = append(res.otherErrors, err)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return res
}

// TestEachLayerAloneHoldsUnderLoad sells 50 units to 600 orders from 64 goroutines through
// three replicas, with one layer at a time. Every configuration but "none" must sell at most
// the stock, keep the audit exact and confirm exactly the orders that exist.
func TestEachLayerAloneHoldsUnderLoad(t *testing.T) {
	t.Parallel()
	for _, spec := range []string{"lock", "version", "guard", "check", "lock,version,guard"} {
		t.Run(spec, func(t *testing.T) {
			t.Parallel()
			d, err := stock.ParseDefense(spec)
			if err != nil {
				t.Fatal(err)
			}
			w := newWorld(t)
			replicas := []*replica{w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{}), w.replica(t, d, replicaOptions{})}
			const initial = 50
			id := createProduct(t, replicas[0], "load-"+spec, initial)

			res := sell(t, replicas, id, 64, 600)
			if len(res.otherErrors) > 0 {
				t.Fatalf("%d unexpected errors, first: %v", len(res.otherErrors), res.otherErrors[0])
			}
			au := mustAudit(t, replicas[0], id)
			if res.confirmedUnits > initial {
				t.Errorf("confirmed %d units of %d: oversold", res.confirmedUnits, initial)
			}
			if au.Sold != res.confirmedUnits || au.Stock != initial-res.confirmedUnits || !au.Consistent() {
				t.Errorf("audit = %+v, confirmed units %d: the database and the answers disagree", au, res.confirmedUnits)
			}
			assertOrdersMatch(t, replicas[0], id, res)
			layerCatches := 0.0
			for _, r := range replicas {
				for _, l := range []stock.Layer{stock.LayerVersion, stock.LayerGuard, stock.LayerFence, stock.LayerCheck} {
					layerCatches += catches(t, r, l)
				}
			}
			t.Logf("%s: %d orders confirmed, %d units, stock left %d, catches beyond the first layer %v",
				spec, res.confirmed, res.confirmedUnits, au.Stock, layerCatches)
		})
	}
}

// TestNaiveOversellsUnderLoad runs the same load with no layer at all, and asserts that it
// oversells: the demonstration is real, not a story. Batches of a few orders make sure the
// replicas' read-decide-write rounds overlap many times before the stock is gone (one batch of
// the default size may take all 50 units at once); TestNaiveWriteOversells shows the same lost
// update, deterministically, with batches of the default size.
func TestNaiveOversellsUnderLoad(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	var naive stock.Defense
	o := replicaOptions{maxBatch: 4}
	replicas := []*replica{w.replica(t, naive, o), w.replica(t, naive, o), w.replica(t, naive, o)}
	const initial = 50
	id := createProduct(t, replicas[0], "load-none", initial)
	res := sell(t, replicas, id, 64, 600)
	if len(res.otherErrors) > 0 {
		t.Fatalf("%d unexpected errors, first: %v", len(res.otherErrors), res.otherErrors[0])
	}
	au := mustAudit(t, replicas[0], id)
	if res.confirmedUnits <= initial || au.Consistent() {
		t.Fatalf("confirmed %d units of %d, audit %+v: the naive write was expected to oversell", res.confirmedUnits, initial, au)
	}
	t.Logf("none: confirmed %d units of %d (oversold by %d); audit %+v", res.confirmedUnits, initial, res.confirmedUnits-initial, au)
}

// assertOrdersMatch checks that the confirmed answers and the order rows are the same set.
func assertOrdersMatch(t *testing.T, r *replica, productID int64, res loadResult) {
	t.Helper()
	rows, err := r.pool.Query(context.Background(), `SELECT order_id, quantity FROM order_items WHERE product_id = $1`, productID)
	if err != nil {
		t.Fatalf("list orders: %v", err)
	}
	defer rows.Close()
	inDB := map[uuid.UUID]int64{}
	for rows.Next() {
		var id uuid.UUID
		var qty int64
		if err := rows.Scan(&id, &qty); err != nil {
			t.Fatalf("scan order: %v", err)
		}
		inDB[id] = qty
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("list orders: %v", err)
	}
	for id, qty := range res.orderIDs {
		if inDB[id] != qty {
			t.Errorf("confirmed order %s (%d units) has %d units in the database", id, qty, inDB[id])
		}
	}
	for id := range inDB {
		if _, ok := res.orderIDs[id]; !ok {
			t.Errorf("order %s is in the database but was never confirmed to a client", id)
		}
	}
}

// TestFenceRefusesAWholeBatchWhoseLeaseRanOut gathers four orders into one batch of replica A
// (a first order whose batch waits for a lock held elsewhere, and three that queue meanwhile and
// join it once it has the lock), holds that batch between its read and its write, and ends A's
// lease meanwhile — what an expired lease looks like to the others. Replica B takes the lock
// with a newer fencing token and sells. A's write is refused by the fence: none of its four
// orders is sold, each is answered ErrLockLost, and the audit is exact.
func TestFenceRefusesAWholeBatchWhoseLeaseRanOut(t *testing.T) {
	t.Parallel()
	w := newMemWorld()
	locks := &askingLocker{Locker: w.locker, asked: make(chan struct{}, 4)}
	a := memReplica(t, w.store, locks, stock.Config{ConflictRetries: 50, QueueWait: 20 * time.Second})
	b := w.replica(t, stock.DefaultDefense(), replicaOptions{})
	id := createProduct(t, a, "fence-batch", 10)
	ctx := context.Background()

	release := holdLock(t, w.locker, id)
	g := newGateFor(4)
	stock.SetAfterRead(a.svc, g.hook)
	results := make(chan error, 4)
	place := func(customer string) {
		_, err := a.svc.PlaceOrder(ctx, order(customer, one(id, 1)))
		results <- err
	}
	go place("plug")
	<-locks.asked // the plug's batch waits for the lock
	for _, c := range []string{"x", "y", "z"} {
		go place(c)
	}
	waitForCondition(t, func() bool {
		return testenv.Gauge(t, a.registry, "stocksvc_orders_queued") == 3
	})
	release()
	<-g.reached // the batch of four has read, and holds the lock
	w.locker.Expire(id)
	if _, err := b.svc.PlaceOrder(ctx, order("b", one(id, 1))); err != nil {
		t.Fatalf("B: %v", err)
	}
	close(g.open)
	for range 4 {
		if err := <-results; !errors.Is(err, stock.ErrLockLost) {
			t.Errorf("an order of the refused batch: %v, want ErrLockLost", err)
		}
	}
	if got := catches(t, a, stock.LayerFence); got != 1 {
		t.Errorf("fence catches = %v, want 1", got)
	}
	if au := mustAudit(t, a, id); au.Sold != 1 || au.Stock != 9 || !au.Consistent() {
		t.Errorf("audit = %+v, want 1 sold (B's), consistent", au)
	}
}
