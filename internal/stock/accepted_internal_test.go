package stock

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"
)

// A key first sent with an order accepted for later is answered with that order, as a result
// (a success that bought nothing), not as an error; the same key on another request is still
// refused. No servers: the snapshot is given by hand.
func TestKeyOfAnAcceptedOrderIsAResult(t *testing.T) {
	accepted := uuid.New()
	items := []Item{{ProductID: 1, Quantity: 2}}
	snap := Snapshot{
		Levels: map[int64]Level{1: {Stock: 5, Version: 1}},
		Records: map[string]IdempotencyRecord{"k": {Key: "k", Fingerprint: requestFingerprint("c", items),
			Accepted: &accepted}},
	}
	same := &ticket{id: uuid.New(), customerID: "c", items: items, key: "k", fingerprint: requestFingerprint("c", items)}
	other := &ticket{id: uuid.New(), customerID: "d", items: items, key: "k", fingerprint: requestFingerprint("d", items)}

	a := allocate(snap, []*ticket{same, other}, nil, true)

	if got := a.outcomes[0]; got.err != nil {
		t.Fatalf("same request: err = %v, want a result", got.err)
	}
	want := OrderResult{Accepted: &accepted, Replayed: true}
	if diff := cmp.Diff(a.outcomes[0].result(), want); diff != "" {
		t.Errorf("same request: result mismatch (-got +want):\n%s", diff)
	}
	if err := a.outcomes[1].err; !errors.Is(err, ErrIdempotencyKeyReused) {
		t.Errorf("another request under the key: err = %v, want ErrIdempotencyKeyReused", err)
	}
	if !a.write.empty() {
		t.Errorf("write = %+v, want nothing: the key's order was accepted, not bought now", a.write)
	}
}
