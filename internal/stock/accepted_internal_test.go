package stock

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// A key first sent with an order accepted for later is answered with that order, as a result
// (a success that bought nothing), not as an error; the same key on another request of the
// customer is still refused, and another customer's request under the same key is its own.
// No servers: the snapshot is given by hand.
func TestKeyOfAnAcceptedOrderIsAResult(t *testing.T) {
	accepted := uuid.New()
	items := []Item{{ProductID: 1, Quantity: 2}}
	snap := Snapshot{
		Levels: map[int64]Level{1: {Stock: 5, Version: 1}},
		Records: map[RecordKey]IdempotencyRecord{{"c", "k"}: {RecordKey: RecordKey{"c", "k"}, Fingerprint: requestFingerprint("c", items),
			Accepted: &accepted}},
	}
	more := []Item{{ProductID: 1, Quantity: 3}}
	same := &ticket{id: uuid.New(), customerID: "c", items: items, key: "k", fingerprint: requestFingerprint("c", items)}
	reused := &ticket{id: uuid.New(), customerID: "c", items: more, key: "k", fingerprint: requestFingerprint("c", more)}
	other := &ticket{id: uuid.New(), customerID: "d", items: items, key: "k", fingerprint: requestFingerprint("d", items)}

	a := allocate(snap, []*ticket{same, reused, other}, nil, true)

	if got := a.outcomes[0]; got.err != nil {
		t.Fatalf("same request: err = %v, want a result", got.err)
	}
	want := OrderResult{Accepted: &accepted, Replayed: true}
	if diff := cmp.Diff(a.outcomes[0].result(), want); diff != "" {
		t.Errorf("same request: result mismatch (-got +want):\n%s", diff)
	}
	if err := a.outcomes[1].err; !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Errorf("another request of the customer under the key: err = %v, want ErrIdempotencyKeyReused", err)
	}
	if got := a.outcomes[2]; got.err != nil || got.replayed || got.order.ID != other.id {
		t.Errorf("another customer's request under the key = %+v, want its own new order", got)
	}
	if len(a.write.Orders) != 1 || a.write.Orders[0].ID != other.id || len(a.write.Records) != 1 || a.write.Records[0].RecordKey != (RecordKey{"d", "k"}) {
		t.Errorf("write = %+v, want the other customer's order alone, under its own key: the key's order was accepted, not bought now", a.write)
	}
}
