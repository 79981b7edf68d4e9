package model

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// hold takes qty units of product as order id, answered held.
func (b *h) hold(product int64, id string, qty int64, start, end int) *h {
	b.add(product, KindOrder, qty, Output{Outcome: Held}, start, end)
	p := b.ops[len(b.ops)-1]
	p.Hold, p.OrderID, p.Customer = true, id, "c-"+id
	return b
}

// on adds an operation of hold id's own (confirm, cancel, expiry, final status).
func (b *h) on(id string, kind Kind, out Output, start, end int) *h {
	b.add(0, kind, 0, out, start, end)
	b.ops[len(b.ops)-1].In.Hold = id
	return b
}

func (b *h) confirm(id string, oc Outcome, start, end int) *h {
	return b.on(id, KindConfirm, Output{Outcome: oc}, start, end)
}
func (b *h) cancel(id string, oc Outcome, start, end int) *h {
	return b.on(id, KindCancel, Output{Outcome: oc}, start, end)
}
func (b *h) expire(id string, start, end int) *h {
	return b.on(id, KindExpire, Output{Outcome: Confirmed}, start, end)
}

// lapse is hold id's expires_at, at ms (widened by 10 ms either side).
func (b *h) lapse(id string, ms int) *h {
	return b.on(id, KindLapse, Output{Outcome: Confirmed}, ms-10, ms+10)
}
func (b *h) status(id string, st HoldStatus, at int) *h {
	return b.on(id, KindStatus, Output{Outcome: Confirmed, Status: st}, at, at+1)
}

// release puts hold id's qty units of product back, somewhere in [start, end].
func (b *h) release(product int64, id string, qty int64, start, end int) *h {
	b.add(product, KindRelease, qty, Output{Outcome: Confirmed}, start, end)
	b.ops[len(b.ops)-1].In.Hold = id
	return b
}

// TestHolds: histories of holds the model accepts and rejects. Times in milliseconds; the
// run ends at 10 s; releases and expiries carry the intervals verdict.HoldOps gives them.
func TestHolds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		b    *h
		want porcupine.CheckResult
	}{
		{"held, confirmed: the units stay sold", new(h).create(1, 2, 0, 1).hold(1, "a", 2, 10, 20).confirm("a", Confirmed, 30, 40).
			soldOut(1, 1, 0, 50, 60).read(1, 0, 70, 80).status("a", StatusConfirmed, 9000), porcupine.Ok},
		{"a hold takes units like a confirmed order", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).order(1, 1, Confirmed, 30, 40), porcupine.Illegal},
		{"cancelled: the units come back once and are sold again", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).cancel("a", Cancelled, 30, 40).
			release(1, "a", 1, 31, 39).order(1, 1, Confirmed, 50, 60).soldOut(1, 1, 0, 70, 80).status("a", StatusCancelled, 9000), porcupine.Ok},
		{"sold out after the cancel gave the unit back", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).cancel("a", Cancelled, 30, 40).
			release(1, "a", 1, 31, 39).soldOut(1, 1, 0, 50, 60), porcupine.Illegal},
		{"released twice: two more units than there are", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).cancel("a", Cancelled, 30, 40).
			release(1, "a", 1, 31, 39).release(1, "a", 1, 41, 45).read(1, 1, 50, 60).read(1, 2, 70, 80), porcupine.Illegal},
		{"released, as the final stock shows", new(h).create(1, 3, 0, 1).hold(1, "a", 2, 10, 20).lapse("a", 2990).expire("a", 3000, 3100).release(1, "a", 2, 3000, 3100).
			status("a", StatusExpired, 9000).read(1, 3, 9001, 9002), porcupine.Ok},
		{"units back that nobody released", new(h).create(1, 3, 0, 1).hold(1, "a", 2, 10, 20).status("a", StatusHeld, 9000).read(1, 3, 9001, 9002),
			porcupine.Illegal},
		{"the expiry may come at any moment of its interval", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 2990).expire("a", 3000, 3500).
			release(1, "a", 1, 3000, 3500).soldOut(1, 1, 0, 3100, 3200).order(1, 1, Confirmed, 3300, 3400).status("a", StatusExpired, 9000), porcupine.Ok},
		{"sold again before the release could have happened", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 2990).expire("a", 3000, 3500).
			release(1, "a", 1, 3000, 3500).order(1, 1, Confirmed, 2000, 2500), porcupine.Illegal},
		{"hold-expired after the expiry", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 2990).expire("a", 3000, 3100).release(1, "a", 1, 3000, 3100).
			confirm("a", HoldExpired, 3200, 3300).status("a", StatusExpired, 9000), porcupine.Ok},
		{"hold-expired before the expiry", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).confirm("a", HoldExpired, 100, 200).
			lapse("a", 2990).expire("a", 3000, 3100).release(1, "a", 1, 3000, 3100), porcupine.Illegal},
		{"confirmed, then expired: two outcomes", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).confirm("a", Confirmed, 100, 200).
			lapse("a", 2990).expire("a", 3000, 3100).release(1, "a", 1, 3000, 3100).status("a", StatusExpired, 9000), porcupine.Illegal},
		{"a confirm racing the expiry that lost", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).confirm("a", HoldExpired, 2900, 3200).
			lapse("a", 2990).expire("a", 3000, 3100).release(1, "a", 1, 3000, 3100).status("a", StatusExpired, 9000), porcupine.Ok},
		{"confirmed twice: idempotent", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).confirm("a", Confirmed, 100, 200).confirm("a", Confirmed, 300, 400).
			cancel("a", OrderConfirmed, 500, 600).status("a", StatusConfirmed, 9000), porcupine.Ok},
		{"confirmed after a cancel", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).cancel("a", Cancelled, 100, 200).release(1, "a", 1, 100, 200).
			confirm("a", Confirmed, 300, 400), porcupine.Illegal},
		{"order-cancelled after a cancel; the second cancel answers the same", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).
			cancel("a", Cancelled, 100, 200).release(1, "a", 1, 100, 200).confirm("a", OrderCancelled, 300, 400).cancel("a", Cancelled, 500, 600).
			status("a", StatusCancelled, 9000), porcupine.Ok},
		{"a cancel answered expired while the hold was still held", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).cancel("a", Expired, 100, 200).
			lapse("a", 2990).expire("a", 3000, 3100).release(1, "a", 1, 3000, 3100), porcupine.Illegal},
		{"an unknown confirm that took effect", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).confirm("a", Unknown, 100, 100).
			cancel("a", OrderConfirmed, 500, 600).status("a", StatusConfirmed, 9000), porcupine.Ok},
		{"an unknown cancel that never took effect", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).cancel("a", Unknown, 100, 100).
			lapse("a", 2990).expire("a", 3000, 3100).release(1, "a", 1, 3000, 3100).status("a", StatusExpired, 9000), porcupine.Ok},
		{"hold-expired once expires_at passed, before the expiry released it", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 3000).
			confirm("a", HoldExpired, 3100, 3200).expire("a", 8000, 8100).release(1, "a", 1, 8000, 8100).status("a", StatusExpired, 9000), porcupine.Ok},
		{"confirmed after expires_at passed", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 3000).confirm("a", Confirmed, 3100, 3200).
			status("a", StatusConfirmed, 9000), porcupine.Illegal},
		{"confirmed across expires_at", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 3000).confirm("a", Confirmed, 2950, 3200).
			status("a", StatusConfirmed, 9000), porcupine.Ok},
		{"cancelled after expires_at, before the expiry", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 3000).
			cancel("a", Cancelled, 3100, 3200).release(1, "a", 1, 3100, 3200).status("a", StatusCancelled, 9000), porcupine.Ok},
		{"expired before expires_at", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).on("a", KindExpire, Output{Outcome: Confirmed}, 1000, 1100).
			lapse("a", 3000).release(1, "a", 1, 1000, 1100), porcupine.Illegal},
		{"held at the end, past expires_at: the sweep's business", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).lapse("a", 3000).
			status("a", StatusHeld, 9000), porcupine.Ok},
		{"the final status contradicts the clients", new(h).create(1, 1, 0, 1).hold(1, "a", 1, 10, 20).confirm("a", Confirmed, 100, 200).
			status("a", StatusCancelled, 9000), porcupine.Illegal},
		{"holds of two buyers, one pays, one lets it expire, the next buyer gets the unit", new(h).create(1, 2, 0, 1).hold(1, "a", 1, 10, 20).
			hold(1, "b", 1, 15, 25).soldOut(1, 1, 0, 30, 40).confirm("a", Confirmed, 50, 60).lapse("b", 3005).expire("b", 3015, 3100).release(1, "b", 1, 3015, 3100).
			hold(1, "c", 1, 3200, 3300).soldOut(1, 1, 0, 3400, 3500).status("a", StatusConfirmed, 9000).status("b", StatusExpired, 9000).
			status("c", StatusHeld, 9000).read(1, 0, 9001, 9002), porcupine.Ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			for _, p := range c.b.ops {
				if p.Out.Outcome == Unknown && p.Return == p.Invoke {
					p.Return = p.Invoke + time.Millisecond
				}
			}
			history := History(c.b.ops, HistoryOptions{Reads: true, End: 10 * time.Second})
			got := agree(t, New(Options{ExactAvailable: true}), history)
			if got != c.want {
				t.Errorf("check = %v, want %v", got, c.want)
			}
		})
	}
}

// TestHoldPartitions: each hold gets a partition of its own, started by a copy of its order;
// its release stays with the product.
func TestHoldPartitions(t *testing.T) {
	t.Parallel()
	b := new(h).create(1, 2, 0, 1).hold(1, "a", 1, 10, 20).hold(1, "b", 1, 10, 20).confirm("a", Confirmed, 30, 40).
		cancel("b", Cancelled, 30, 40).release(1, "b", 1, 30, 40)
	parts := New(Options{}).Partition(History(b.ops, HistoryOptions{End: time.Hour}))
	var sizes []int
	for _, p := range parts {
		sizes = append(sizes, len(p))
	}
	// product 1: creation, two holds, the release; hold a: start, confirm; hold b: start, cancel.
	if len(sizes) != 3 || sizes[0] != 4 || sizes[1] != 2 || sizes[2] != 2 {
		t.Fatalf("partition sizes = %v, want [4 2 2]", sizes)
	}
	if first := parts[1][0].Input.(Input); !first.HoldStart || first.Hold != "a" {
		t.Errorf("hold partition starts with %+v, want the start of hold a", first)
	}
}
