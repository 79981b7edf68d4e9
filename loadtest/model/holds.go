package model

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Holds (issue #21). An order of a product with hold_for is answered "held": it takes its
// units as a confirmed order does, and then exactly one of three things ends it — a confirm
// (nothing changes in stock), a cancel or the expiry (its units go back, once).
//
// The model splits this in two, so that Porcupine's search stays small:
//
//   - the product's partition sees the hold's order (units taken) and, when the hold was
//     cancelled or expired, one KindRelease (units back). A release is not a client's
//     operation: the run reads it from Postgres afterwards (verdict.HoldOps), one per released
//     order, placed between decided_at (now() of the transaction that released it, which
//     committed after) and the first moment the run saw it released (a watcher polls the
//     orders table during drills; the end of the run otherwise), and within the cancel
//     request when a cancel answered "cancelled". The interval holds the real commit, so no
//     placement the service could have made is excluded: no false violation. A release the
//     service made twice, or made for a confirmed order, shows as stock the reads, sold-out
//     answers and the final stock cannot explain.
//   - each hold has a partition of its own (by order id): its status, held → confirmed |
//     cancelled | expired, driven by the clients' confirms and cancels, its expires_at passing
//     (KindLapse, at the moment Postgres gave, widened by a slack for the two readers of one
//     clock), the expiry read from Postgres (KindExpire, same interval as its release), and the
//     status Postgres holds once every replica has stopped (KindStatus). Exactly one outcome
//     wins: a confirm answered 200 needs the hold held (or confirmed already) and its
//     expires_at not passed; a hold-expired needs it passed — the units may not be back yet,
//     as the expiry's job runs at or after expires_at; a cancel after expires_at but before the
//     expiry ends it cancelled, which the contract allows (the units go back either way).
//
// That a confirm answered 200 came before the expiry by Postgres's clock (decided_at <
// expires_at) is the SQL verdict's (verdict.Holds); the model sees the order of events only.

// HoldStatus is a hold's status as the service names it.
type HoldStatus string

const (
	StatusHeld      HoldStatus = "held"
	StatusConfirmed HoldStatus = "confirmed"
	StatusCancelled HoldStatus = "cancelled"
	StatusExpired   HoldStatus = "expired"
	// statusLapsed is the model's own: held, its expires_at passed, not released yet. The
	// service shows it as held.
	statusLapsed HoldStatus = "held, expired by the clock"
)

// stepHold is a hold's partition.
func stepHold(s state, in Input, out Output) []any {
	to := func(h HoldStatus) state { s2 := s; s2.hold = h; return s2 }
	is := func(hs ...HoldStatus) bool {
		for _, h := range hs {
			if s.hold == h {
				return true
			}
		}
		return false
	}
	switch in.Kind {
	case KindLapse:
		switch {
		case is(StatusHeld):
			return []any{to(statusLapsed)}
		case is(StatusConfirmed, StatusCancelled):
			return []any{s} // ended before its time: nothing to lapse
		}
	case KindConfirm:
		switch out.Outcome {
		case Confirmed:
			if is(StatusHeld, StatusConfirmed) {
				return []any{to(StatusConfirmed)}
			}
		case HoldExpired:
			if is(statusLapsed, StatusExpired) {
				return []any{s}
			}
		case OrderCancelled:
			if is(StatusCancelled) {
				return []any{s}
			}
		case Unknown:
			if is(StatusHeld) {
				return []any{to(StatusConfirmed), s}
			}
			return []any{s}
		}
	case KindCancel:
		switch out.Outcome {
		case Cancelled:
			if is(StatusHeld, statusLapsed, StatusCancelled) {
				return []any{to(StatusCancelled)}
			}
		case Expired:
			if is(StatusExpired) {
				return []any{s}
			}
		case OrderConfirmed:
			if is(StatusConfirmed) {
				return []any{s}
			}
		case Unknown:
			if is(StatusHeld, statusLapsed) {
				return []any{to(StatusCancelled), s}
			}
			return []any{s}
		}
	case KindExpire:
		if is(statusLapsed) {
			return []any{to(StatusExpired)}
		}
	case KindStatus:
		if s.hold == out.Status || s.hold == statusLapsed && out.Status == StatusHeld {
			return []any{s}
		}
	}
	return nil
}

// holdStart is the operation that starts the partition of the hold p made: a copy of its
// order, over the same interval.
func holdStart(p *Op, call, ret time.Duration) (porcupine.Operation, bool) {
	if !p.Hold || p.OrderID == "" || p.In.Kind != KindOrder {
		return porcupine.Operation{}, false
	}
	switch p.Out.Outcome {
	case Held, Happened:
	default:
		return porcupine.Operation{}, false
	}
	return porcupine.Operation{ClientId: p.Client, Call: int64(call), Return: int64(ret),
		Input:  Input{Kind: KindCreate, Product: p.In.Product, Hold: p.OrderID, HoldStart: true},
		Output: Output{Outcome: Confirmed}, Metadata: p.DescribeAttempts()}, true
}

func describeHoldOp(in Input, out Output) string {
	switch in.Kind {
	case KindConfirm:
		return fmt.Sprintf("confirm %s → %s", in.Hold, out.Outcome)
	case KindCancel:
		return fmt.Sprintf("cancel %s → %s", in.Hold, out.Outcome)
	case KindRelease:
		return fmt.Sprintf("release(%d) of %s", in.Quantity, in.Hold)
	case KindExpire:
		return fmt.Sprintf("%s expires", in.Hold)
	case KindStatus:
		return fmt.Sprintf("%s is %s at the end", in.Hold, out.Status)
	case KindLapse:
		return fmt.Sprintf("%s's expires_at passes", in.Hold)
	}
	return "?"
}

// holdHash tells a hold's statuses apart in the model's state hash.
func holdHash(h HoldStatus) uint64 {
	switch h {
	case StatusHeld:
		return 1
	case StatusConfirmed:
		return 2
	case StatusCancelled:
		return 3
	case StatusExpired:
		return 4
	case statusLapsed:
		return 5
	}
	return 0
}
