package asyncpg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/async/asyncpg"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// fixture is a Store over a fresh database, with the purchase path beside it (whose records
// are the orders' decisions).
type fixture struct {
	store *asyncpg.Store
	svc   *stock.Service
}

func newFixture(t *testing.T) fixture {
	t.Helper()
	pool := testenv.Pool(t)
	s, err := asyncpg.New(pool)
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	svc := stock.NewService(stockpg.New(pool), &stocktest.LocalLocker{}, stock.Config{}, nil)
	t.Cleanup(svc.Close)
	return fixture{store: s, svc: svc}
}

func (f fixture) product(t *testing.T, units int64) int64 {
	t.Helper()
	p, err := f.svc.CreateProduct(context.Background(), stock.NewProduct{SKU: uuid.NewString(), Name: "p", Stock: units})
	if err != nil {
		t.Fatalf("create product: %v", err)
	}
	return p.ID
}

func order(customer, key string, items ...stock.Item) async.NewOrder {
	return async.NewOrder{ID: uuid.Must(uuid.NewV7()), Request: stock.Prepared{CustomerID: customer, Items: items, Key: key,
		Fingerprint: stock.Fingerprint(customer, items)}}
}

func one(product, quantity int64) stock.Item {
	return stock.Item{ProductID: product, Quantity: quantity}
}

func pending(o async.NewOrder) stock.Accepted {
	return stock.Accepted{ID: o.ID, CustomerID: o.Request.CustomerID, Items: o.Request.Items}
}

// Accept answers for each order of a group, in its order: in line (with its time), its key
// taken — by an earlier order of the group, or before it — or its product missing; only the
// orders in line are stored, pending, in the order given.
func TestAccept(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	p := f.product(t, 10)
	first, again, other, missing := order("c", "k", one(p, 1)), order("c", "k", one(p, 1)), order("d", "", one(p, 2)), order("c", "", one(p+100, 1))
	out, err := f.store.Accept(ctx, []async.NewOrder{first, again, other, missing})
	if err != nil {
		t.Fatalf("accept: %v", err)
	}
	want := []async.AcceptState{async.Accepted, async.KeyTaken, async.Accepted, async.NoSuchProduct}
	for i, o := range out {
		if o.State != want[i] || (o.State == async.Accepted) == o.At.IsZero() {
			t.Errorf("order %d: %+v, want %v with a time only when accepted", i, o, want[i])
		}
	}
	if later, err := f.store.Accept(ctx, []async.NewOrder{order("c", "k", one(p, 1))}); err != nil || later[0].State != async.KeyTaken {
		t.Errorf("the key sent again: %+v, %v; want it taken", later, err)
	}
	claimed, err := f.store.ClaimLine(ctx, p, time.Minute)
	if err != nil || claimed == nil {
		t.Fatalf("claim: %v, %v", claimed, err)
	}
	defer claimed.Release()
	front, err := claimed.Front(ctx, 10)
	if err != nil || len(front) != 2 || front[0].ID != first.ID || front[1].ID != other.ID {
		t.Errorf("the line = %+v, %v; want %s then %s", front, err, first.ID, other.ID)
	}
	if n, err := f.store.Pending(ctx); err != nil || n != 2 {
		t.Errorf("pending = %d, %v; want 2", n, err)
	}
}

// AcceptCart stores a cart in no line, or answers ErrKeyTaken or the missing product, writing
// nothing.
func TestAcceptCart(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	a, b := f.product(t, 5), f.product(t, 5)
	cart := order("c", "k", one(a, 1), one(b, 1))
	at, err := f.store.AcceptCart(ctx, cart)
	if err != nil || at.IsZero() {
		t.Fatalf("accept cart = %v, %v", at, err)
	}
	if _, err := f.store.AcceptCart(ctx, order("c", "k", one(a, 1), one(b, 1))); !errors.Is(err, async.ErrKeyTaken) {
		t.Errorf("the key sent again: %v, want ErrKeyTaken", err)
	}
	_, err = f.store.AcceptCart(ctx, order("c", "", one(a, 1), one(b+100, 1)))
	if missing, ok := errors.AsType[*stock.ProductNotFoundError](err); !ok || missing.ProductID != b+100 {
		t.Errorf("a missing product: %v, want product %d not found", err, b+100)
	}
	if waiting, err := f.store.Waiting(ctx, a); err != nil || waiting {
		t.Errorf("a's line waiting = %t, %v; want false: a cart is in no line", waiting, err)
	}
	o, err := f.store.Order(ctx, cart.ID)
	if err != nil || o.Status != async.StatusPending || o.Copied || len(o.Items) != 2 || !o.AcceptedAt.Equal(at) {
		t.Errorf("the cart = %+v, %v; want it pending, accepted at %v", o, err, at)
	}
	if n, err := f.store.Pending(ctx); err != nil || n != 1 {
		t.Errorf("pending = %d, %v; want 1", n, err)
	}
}

// Order shows a decision as soon as its record is stored, before it is copied (Copied false);
// Record copies it once, stores a refusal the purchase path did not, and rejects with the
// reason given what has no record. An id never accepted is stock.ErrOrderNotFound.
func TestOrderAndRecord(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	p := f.product(t, 1)
	bought, refused, gone := order("c", "", one(p, 1)), order("d", "", one(p, 1)), order("e", "", one(p, 1))
	if _, err := f.store.Accept(ctx, []async.NewOrder{bought, refused, gone}); err != nil {
		t.Fatalf("accept: %v", err)
	}
	decisions := f.svc.DecideAccepted(ctx, []stock.Accepted{pending(bought)})
	if decisions[0].Err != nil {
		t.Fatalf("decide: %v", decisions[0].Err)
	}
	if o, err := f.store.Order(ctx, bought.ID); err != nil || o.Status != async.StatusConfirmed || o.Copied {
		t.Errorf("bought, not copied: %+v, %v; want confirmed from its record, not copied", o, err)
	}
	soldOut := stock.Decision{Err: &stock.SoldOutError{ProductID: p, Requested: 1, Available: 0}}
	done, err := f.store.Record(ctx, []stock.Accepted{pending(bought), pending(refused), pending(gone)},
		[]stock.Decision{decisions[0], soldOut, {Err: stock.ErrProductNotFound}}, map[uuid.UUID]async.Reason{gone.ID: async.ReasonProductNotFound})
	if err != nil || len(done) != 3 {
		t.Fatalf("record = %+v, %v; want 3 decided", done, err)
	}
	for id, want := range map[uuid.UUID]async.Rejection{
		refused.ID: {Reason: async.ReasonSoldOut, ProductID: p, Requested: 1},
		gone.ID:    {Reason: async.ReasonProductNotFound},
	} {
		o, err := f.store.Order(ctx, id)
		if err != nil || o.Status != async.StatusRejected || !o.Copied || o.Rejection == nil || *o.Rejection != want {
			t.Errorf("order %s = %+v (rejection %+v), %v; want rejected %+v, copied", id, o, o.Rejection, err, want)
		}
	}
	if o, err := f.store.Order(ctx, bought.ID); err != nil || o.Status != async.StatusConfirmed || !o.Copied || o.DecidedAt.IsZero() {
		t.Errorf("bought, copied: %+v, %v; want confirmed, copied", o, err)
	}
	if again, err := f.store.Record(ctx, []stock.Accepted{pending(bought)}, decisions, nil); err != nil || len(again) != 0 {
		t.Errorf("recorded again = %+v, %v; want nothing more decided", again, err)
	}
	if _, err := f.store.Order(ctx, uuid.Must(uuid.NewV7())); !errors.Is(err, stock.ErrOrderNotFound) {
		t.Errorf("an unknown id: %v, want stock.ErrOrderNotFound", err)
	}
}

// Fail counts failures and gives the order up at the cap, as a record the purchase path then
// replays (stock.ErrGivenUp); it writes nothing for an order decided first.
func TestFail(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	p := f.product(t, 5)
	failing, decided := order("c", "", one(p, 1)), order("d", "", one(p, 1))
	if _, err := f.store.Accept(ctx, []async.NewOrder{failing, decided}); err != nil {
		t.Fatalf("accept: %v", err)
	}
	if got, err := f.store.Fail(ctx, pending(failing), 2, "first"); err != nil || got.Status != async.StatusPending || got.Attempts != 1 {
		t.Errorf("first failure = %+v, %v; want pending after 1 attempt", got, err)
	}
	if got, err := f.store.Fail(ctx, pending(failing), 2, "second"); err != nil || got.Status != async.StatusRejected || got.Attempts != 2 {
		t.Errorf("second failure = %+v, %v; want rejected at 2 attempts", got, err)
	}
	if o, err := f.store.Order(ctx, failing.ID); err != nil || o.Status != async.StatusRejected || o.Rejection == nil || o.Rejection.Reason != async.ReasonInternal {
		t.Errorf("the order given up = %+v, %v; want rejected, internal", o, err)
	}
	if d := f.svc.DecideAccepted(ctx, []stock.Accepted{pending(failing)}); !errors.Is(d[0].Err, stock.ErrGivenUp) {
		t.Errorf("deciding it after = %+v, want stock.ErrGivenUp", d[0])
	}
	if d := f.svc.DecideAccepted(ctx, []stock.Accepted{pending(decided)}); d[0].Err != nil {
		t.Fatalf("decide: %v", d[0].Err)
	}
	if got, err := f.store.Fail(ctx, pending(decided), 1, "late"); err != nil || got != (async.Failure{}) {
		t.Errorf("a failure after the decision = %+v, %v; want nothing written", got, err)
	}
}

// A line is claimed by one drain at a time; Waiting sees its orders claimed or not; the line's
// age and Sweep see its front once it has waited.
func TestLinesAndSweep(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	ctx := context.Background()
	p := f.product(t, 5)
	if _, err := f.store.Accept(ctx, []async.NewOrder{order("c", "", one(p, 1))}); err != nil {
		t.Fatalf("accept: %v", err)
	}
	held, err := f.store.ClaimLine(ctx, p, time.Minute)
	if err != nil || held == nil {
		t.Fatalf("claim: %v, %v", held, err)
	}
	if other, err := f.store.ClaimLine(ctx, p, time.Minute); err != nil || other != nil {
		t.Errorf("a second claim = %v, %v; want nil, nil", other, err)
	}
	if waiting, err := f.store.Waiting(ctx, p); err != nil || !waiting {
		t.Errorf("waiting = %t, %v; want true", waiting, err)
	}
	held.Release()
	held.Release() // safe twice
	again, err := f.store.ClaimLine(ctx, p, time.Minute)
	if err != nil || again == nil {
		t.Fatalf("claim after the release: %v, %v", again, err)
	}
	again.Release()

	testenv.Poll(t, 10*time.Second, "the line's front to wait a moment", func() bool {
		ages, err := f.store.OldestPending(ctx, 10)
		if err != nil {
			t.Fatalf("oldest pending: %v", err)
		}
		return len(ages) == 1 && ages[0].Seconds > 0.05
	})
	if n, err := f.store.Sweep(ctx, 50*time.Millisecond, time.Hour); err != nil || n != 1 {
		t.Errorf("sweep = %d, %v; want a drain made for the line", n, err)
	}
	if n, err := f.store.Sweep(ctx, time.Hour, time.Hour); err != nil || n != 0 {
		t.Errorf("sweep of what has not waited an hour = %d, %v; want 0", n, err)
	}
}
