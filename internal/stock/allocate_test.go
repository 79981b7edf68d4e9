package stock

import (
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// Allocation needs no servers: these tests give it snapshots by hand.

func tk(customer string, items ...Item) *ticket {
	return &ticket{id: uuid.New(), customerID: customer, items: items}
}

func keyed(t *ticket, key string) *ticket {
	t.key, t.fingerprint = key, requestFingerprint(t.customerID, t.items)
	return t
}

func item(product, qty int64) Item { return Item{ProductID: product, Quantity: qty} }

func levels(l map[int64]int64) Snapshot {
	s := Snapshot{Levels: map[int64]Level{}, Records: map[RecordKey]IdempotencyRecord{}}
	for id, stock := range l {
		s.Levels[id] = Level{Stock: stock, Version: 7, Fence: 3}
	}
	return s
}

// summary is what a test compares: per ticket "ok", "replay", "sold-out <available>",
// "missing <id>" or "reused".
func summary(a allocation) []string {
	out := make([]string, len(a.outcomes))
	for i, o := range a.outcomes {
		var sold *SoldOutError
		var missing *ProductNotFoundError
		switch {
		case o.err == nil && o.replayed:
			out[i] = "replay"
		case o.err == nil:
			out[i] = "ok"
		case errors.As(o.err, &sold):
			out[i] = "sold-out " + strconv.FormatInt(sold.Available, 10)
			if sold.Replayed {
				out[i] += " replayed"
			}
		case errors.As(o.err, &missing):
			out[i] = "missing " + strconv.FormatInt(missing.ProductID, 10)
		case errors.Is(o.err, ErrIdempotencyKeyReused):
			out[i] = "reused"
		case errors.Is(o.err, errGone):
			out[i] = "gone"
		default:
			out[i] = o.err.Error()
		}
	}
	return out
}

func TestAllocateFirstFitInArrivalOrder(t *testing.T) {
	for _, tc := range []struct {
		name      string
		stock     int64
		qtys      []int64
		want      []string
		wantTaken int64
	}{
		{"all fit", 10, []int64{1, 2, 3}, []string{"ok", "ok", "ok"}, 6},
		{"exact sell-out", 6, []int64{1, 2, 3}, []string{"ok", "ok", "ok"}, 6},
		{"the last unit goes to the first who asks", 1, []int64{1, 1, 1}, []string{"ok", "sold-out 0", "sold-out 0"}, 1},
		{"a big order is refused with what was left for it; smaller later ones still fit", 4, []int64{2, 3, 1, 1, 1},
			[]string{"ok", "sold-out 2", "ok", "ok", "sold-out 0"}, 4},
		{"nothing left", 0, []int64{1, 2}, []string{"sold-out 0", "sold-out 0"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tickets []*ticket
			for _, q := range tc.qtys {
				tickets = append(tickets, tk("c", item(1, q)))
			}
			a := allocate(levels(map[int64]int64{1: tc.stock}), tickets, map[int64]int64{1: 42}, true)
			if diff := cmp.Diff(tc.want, summary(a)); diff != "" {
				t.Errorf("outcomes (-want +got):\n%s", diff)
			}
			var taken int64
			for _, d := range a.write.Decrements {
				taken += d.Quantity
				if d.ProductID != 1 || d.Fence != 42 || !reflect.DeepEqual(d.Read, Level{Stock: tc.stock, Version: 7, Fence: 3}) {
					t.Errorf("decrement %+v, want product 1 with fence 42 and the read level", d)
				}
			}
			if taken != tc.wantTaken || len(a.write.Decrements) > 1 {
				t.Errorf("decrements %+v: want one of %d units", a.write.Decrements, tc.wantTaken)
			}
			var confirmed []int
			for i, o := range a.outcomes {
				if o.err == nil {
					confirmed = append(confirmed, i)
				}
			}
			if len(a.write.Orders) != len(confirmed) {
				t.Fatalf("%d orders written for %d confirmed tickets", len(a.write.Orders), len(confirmed))
			}
			for n, i := range confirmed {
				if a.write.Orders[n].ID != tickets[i].id {
					t.Errorf("written order %d is %s, want ticket %d's %s", n, a.write.Orders[n].ID, i, tickets[i].id)
				}
			}
		})
	}
}

func TestAllocateCartIsAllOrNothing(t *testing.T) {
	snap := levels(map[int64]int64{1: 5, 2: 1})
	tickets := []*ticket{
		tk("a", item(1, 2), item(2, 2)), // product 2 short: nothing of product 1 is taken either
		tk("b", item(1, 3), item(2, 1)),
		tk("c", item(1, 1), item(3, 1)), // product 3 does not exist: named, whatever else is short
		tk("d", item(2, 1), item(9, 1)),
	}
	a := allocate(snap, tickets, nil, true)
	want := []string{"sold-out 1", "ok", "missing 3", "missing 9"}
	if diff := cmp.Diff(want, summary(a)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	wantDecrements := []Decrement{
		{ProductID: 1, Quantity: 3, Read: Level{Stock: 5, Version: 7, Fence: 3}},
		{ProductID: 2, Quantity: 1, Read: Level{Stock: 1, Version: 7, Fence: 3}},
	}
	if diff := cmp.Diff(wantDecrements, a.write.Decrements); diff != "" {
		t.Errorf("decrements (-want +got):\n%s", diff)
	}
}

// TestAllocateIdempotencyKeys: a key is its customer's own (issue #31). Within one customer a
// stored key is replayed, or refused with another body; the same key sent by another customer
// is decided as a request of its own, and stored under that customer.
func TestAllocateIdempotencyKeys(t *testing.T) {
	stored := tk("s", item(1, 1))
	storedOrder := Order{ID: stored.id, CustomerID: "s", Status: OrderStatusConfirmed, Items: stored.items, CreatedAt: time.Unix(100, 0)}
	refused := keyed(tk("r", item(1, 9)), "refused")
	snap := levels(map[int64]int64{1: 4})
	snap.Records[RecordKey{"s", "stored"}] = IdempotencyRecord{RecordKey: RecordKey{"s", "stored"}, Fingerprint: requestFingerprint("s", stored.items), Order: &storedOrder}
	snap.Records[RecordKey{"r", "refused"}] = IdempotencyRecord{RecordKey: RecordKey{"r", "refused"}, Fingerprint: refused.fingerprint,
		SoldOut: &SoldOutError{ProductID: 1, Requested: 9, Available: 2}}

	tickets := []*ticket{
		keyed(tk("s", item(1, 1)), "stored"),  // 0: replay of a stored order
		keyed(tk("s", item(1, 2)), "stored"),  // 1: same customer and key, another body
		keyed(tk("x", item(1, 1)), "stored"),  // 2: another customer's key "stored": new, sold (3 left)
		keyed(tk("r", item(1, 9)), "refused"), // 3: replay of a stored refusal
		keyed(tk("n", item(1, 2)), "new"),     // 4: new: sold (1 left)
		keyed(tk("n", item(1, 2)), "new"),     // 5: same key in the same batch: its outcome
		keyed(tk("n", item(1, 1)), "new"),     // 6: same key in the batch, another body
		keyed(tk("m", item(1, 2)), "new"),     // 7: another customer's key "new": refused on its own
		keyed(tk("z", item(1, 2)), "short"),   // 8: new: refused (1 left)
		keyed(tk("z", item(1, 2)), "short"),   // 9: same key: the stored refusal, replayed
		keyed(tk("w", item(1, 1)), "last"),    // 10: the last unit
	}
	a := allocate(snap, tickets, nil, true)
	want := []string{"replay", "reused", "ok", "sold-out 2 replayed", "ok", "replay", "reused", "sold-out 1", "sold-out 1", "sold-out 1 replayed", "ok"}
	if diff := cmp.Diff(want, summary(a)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
	if got := a.outcomes[0].order; got.ID != storedOrder.ID || !got.CreatedAt.Equal(storedOrder.CreatedAt) {
		t.Errorf("replayed order = %+v, want the stored %+v", got, storedOrder)
	}
	if a.outcomes[5].order.ID != tickets[4].id {
		t.Errorf("the batch's second request with key new got order %s, want the first's %s", a.outcomes[5].order.ID, tickets[4].id)
	}
	// One record per new key of a customer: the sales and the refusals; nothing again for
	// stored keys.
	var keys []RecordKey
	for _, r := range a.write.Records {
		keys = append(keys, r.RecordKey)
		switch r.RecordKey {
		case RecordKey{"x", "stored"}:
			if r.Order == nil || r.Order.ID != tickets[2].id {
				t.Errorf("record of x's key stored = %+v, want order %s", r, tickets[2].id)
			}
		case RecordKey{"n", "new"}:
			if r.Order == nil || r.Order.ID != tickets[4].id {
				t.Errorf("record of n's key new = %+v, want order %s", r, tickets[4].id)
			}
		case RecordKey{"m", "new"}, RecordKey{"z", "short"}:
			if r.SoldOut == nil || r.SoldOut.Available != 1 || r.SoldOut.Requested != 2 {
				t.Errorf("record of %v = %+v, want the refusal with 1 available", r.RecordKey, r)
			}
		}
	}
	wantKeys := []RecordKey{{"x", "stored"}, {"n", "new"}, {"m", "new"}, {"z", "short"}, {"w", "last"}}
	if diff := cmp.Diff(wantKeys, keys); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if len(a.write.Decrements) != 1 || a.write.Decrements[0].Quantity != 4 {
		t.Errorf("decrements = %+v, want 4 units of product 1", a.write.Decrements)
	}
}

func TestAllocateLeavesGoneTicketsOut(t *testing.T) {
	gone := tk("g", item(1, 1))
	gone.gone.Store(true)
	a := allocate(levels(map[int64]int64{1: 1}), []*ticket{gone, tk("h", item(1, 1))}, nil, true)
	if diff := cmp.Diff([]string{"gone", "ok"}, summary(a)); diff != "" {
		t.Errorf("outcomes (-want +got):\n%s", diff)
	}
}

func TestAllocateNothingToWrite(t *testing.T) {
	a := allocate(levels(map[int64]int64{}), []*ticket{tk("a", item(1, 1))}, nil, true)
	if !a.write.empty() {
		t.Errorf("write for a missing product = %+v, want nothing", a.write)
	}
	a = allocate(levels(map[int64]int64{1: 0}), []*ticket{tk("a", item(1, 1))}, nil, true)
	if !a.write.empty() {
		t.Errorf("write for an unkeyed refusal = %+v, want nothing", a.write)
	}
}

// TestAllocateSkipsStoredKeysOnlyWhenNothingIsRefused: a write may leave out an order whose
// key turns out to be stored only when no order of the batch was refused for want of stock —
// that refusal was decided counting the order left out — and only when it has keys at all.
func TestAllocateSkipsStoredKeysOnlyWhenNothingIsRefused(t *testing.T) {
	tests := []struct {
		name    string
		stock   int64
		tickets []*ticket
		want    bool
	}{
		{"keyed, all fit", 5, []*ticket{keyed(tk("a", item(1, 2)), "k1"), tk("b", item(1, 1))}, true},
		{"keyed, one refused", 2, []*ticket{keyed(tk("a", item(1, 2)), "k1"), keyed(tk("b", item(1, 1)), "k2")}, false},
		{"unkeyed refusal beside a keyed order", 2, []*ticket{keyed(tk("a", item(1, 2)), "k1"), tk("b", item(1, 1))}, false},
		{"no keys", 5, []*ticket{tk("a", item(1, 2))}, false},
		{"a missing product is no refusal for stock", 5, []*ticket{keyed(tk("a", item(1, 2)), "k1"), tk("b", item(9, 1))}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := allocate(levels(map[int64]int64{1: tt.stock}), tt.tickets, nil, true)
			if a.write.SkipStored != tt.want {
				t.Errorf("SkipStored = %v, want %v (outcomes %v)", a.write.SkipStored, tt.want, summary(a))
			}
		})
	}
}

// TestWriteWithout: what a write that left orders out committed — the rest of its orders and
// records, and only their units.
func TestWriteWithout(t *testing.T) {
	a := tk("a", item(1, 2), item(2, 1))
	b := tk("b", item(1, 3))
	w := allocate(levels(map[int64]int64{1: 10, 2: 10}), []*ticket{keyed(a, "ka"), keyed(b, "kb")}, nil, true).write
	got := w.Without([]uuid.UUID{a.id})
	if len(got.Orders) != 1 || got.Orders[0].ID != b.id || len(got.Records) != 1 || got.Records[0].Key != "kb" {
		t.Errorf("orders %v, records %v; want b's alone", got.Orders, got.Records)
	}
	if len(got.Decrements) != 1 || got.Decrements[0].ProductID != 1 || got.Decrements[0].Quantity != 3 {
		t.Errorf("decrements = %+v, want 3 units of product 1 (product 2 untouched)", got.Decrements)
	}
}
