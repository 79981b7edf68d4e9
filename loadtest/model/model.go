// Package model is the drills' model of the stock and their history: every operation the
// clients made (Op, collected by a Recorder; op.go), with the time it was invoked and the time
// its answer came back, turned into Porcupine's operations (History; history.go) and checked
// (Check: Porcupine's search, with a rule of its own for the operations that only observe;
// checker.go) against a sequential specification of each product's stock and sale rules (New
// here, its steps in step.go and holds.go). A history is saved beside its run (Save,
// WriteText) and can be checked again later (Load; save.go).
package model

import (
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
)

// Kind is what a client asked for.
type Kind uint8

const (
	// KindCreate is the product's creation: it sets the stock the model starts from.
	KindCreate Kind = iota + 1
	KindOrder
	KindRestock
	KindRead
	// KindOpen and KindClose are the moments a product's sale window opens and ends, by
	// Postgres's clock: History adds them, as operations of their own, from the product's
	// creation. A client also makes a KindClose when it ends a sale early (POST
	// /v1/products/{id}/sale/end), which Postgres's now() dates within the request.
	KindOpen
	KindClose
	// Holds (issue #21): see holds.go. KindConfirm and KindCancel are a client's requests on
	// a held order; KindRelease (its units back in stock), KindExpire (the service expired it)
	// and KindStatus (its status once every replica has stopped) are read from Postgres after
	// the run.
	KindConfirm
	KindCancel
	KindRelease
	KindExpire
	KindStatus
	// KindLapse is a hold's expires_at passing, by Postgres's clock: from then on a confirm is
	// refused hold-expired, whether or not the expiry has released the units yet.
	KindLapse
)

// Outcome is what a client was told, or what the run learnt afterwards.
type Outcome uint8

const (
	// Confirmed: a 201 (orders) or a 200 (restocks, reads, creation); it happened once.
	Confirmed Outcome = iota + 1
	// SoldOut: a 409 sold-out; nothing was sold, and the stock was short.
	SoldOut
	// Refused: every attempt was refused without effect (429 busy, 409 in flight); nothing
	// happened. Such operations constrain nothing and are left out of the checked history.
	Refused
	// Unknown: some attempt may have taken effect (a 503, a 502, a timeout, a lost
	// connection) and no later attempt told which. It may have happened, at most once, at any
	// moment after it was invoked — even after the client gave up.
	Unknown
	// Happened: an order whose answer was unknown, found in the database after the run
	// (by its customer id, unique to the operation): it happened once, at some moment after
	// it was invoked. An unknown order not found there never happened and is left out.
	Happened
	// NotOpen: a 409 sale-not-open; nothing was sold, and the product's sale had not opened.
	NotOpen
	// Ended: a 409 sale-ended; nothing was sold, and the product's sale had ended.
	Ended
	// OverLimit: a 409 customer-limit; nothing was sold, and the order would have taken its
	// customer above the product's max_per_customer.
	OverLimit
	// Held: a 201 "held" (issue #21): the units were taken, as by a confirmed order, until the
	// hold is confirmed, cancelled or expires.
	Held
	// HoldExpired, OrderCancelled, OrderConfirmed: a confirm's or a cancel's 409 of that code.
	HoldExpired
	OrderCancelled
	OrderConfirmed
	// Cancelled and Expired: a cancel's 200, with the status it answered.
	Cancelled
	Expired
)

// String names the outcome as the history and the reports show it.
func (o Outcome) String() string {
	switch o {
	case Confirmed:
		return "confirmed"
	case SoldOut:
		return "sold-out"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	case Happened:
		return "happened"
	case NotOpen:
		return "sale-not-open"
	case Ended:
		return "sale-ended"
	case OverLimit:
		return "customer-limit"
	case Held:
		return "held"
	case HoldExpired:
		return "hold-expired"
	case OrderCancelled:
		return "order-cancelled"
	case OrderConfirmed:
		return "order-confirmed"
	case Cancelled:
		return "cancelled"
	case Expired:
		return "expired"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Input is an operation's input in the model.
type Input struct {
	Kind     Kind
	Product  int64
	Quantity int64 // units ordered or restocked
	// Customer is the order's customer (History copies Op.Customer): what a product's limit
	// is counted by.
	Customer string `json:",omitempty"`
	// PerCustomer marks the copy of a creation that starts one customer's partition (see
	// New); History and the partition set it, clients never do.
	PerCustomer bool `json:",omitempty"`
	// Hold is the order id of a hold, on the operations of its own partition (holds.go):
	// confirms, cancels, its expiry, its final status, and the copy of its order that starts
	// the partition (HoldStart). A release carries it too, for the reader, but belongs to the
	// product.
	Hold      string `json:",omitempty"`
	HoldStart bool   `json:",omitempty"`
	// Orders, on an order, is how many orders one transaction committed together (History's
	// merge of a batch, see Op.Txn): Quantity is their units, taken at one moment. InBatch
	// marks each of those orders as a customer's partition still sees it; its product's
	// partition sees the batch instead.
	Orders  int  `json:",omitempty"`
	InBatch bool `json:",omitempty"`
}

// Output is what the operation returned, as far as the model is concerned.
type Output struct {
	Outcome Outcome
	// Stock: the stock a read returned, the stock a confirmed restock answered with (its
	// post-image), or the stock a product was created with.
	Stock int64
	// Available is the sold-out answer's "available": the stock the service saw when it
	// refused. HasAvailable is false when the answer carried none.
	Available    int64
	HasAvailable bool
	// Rules are the product's sale rules, as its creation answered them.
	Rules Rules `json:",omitzero"`
	// Status is a hold's status in Postgres once every replica has stopped (KindStatus).
	Status HoldStatus `json:",omitempty"`
}

// Rules are a product's sale rules, in the history's time (since the recorder's start): the
// window's bounds are Postgres's timestamps the service answered, moved onto the harness's
// clock (one machine, one wall clock).
type Rules struct {
	Opens, Ends       time.Duration // when the sale opens, and ends
	HasOpens, HasEnds bool          // false: on sale from creation, no end
	Limit             int64         // max_per_customer; 0: no limit
}

// Options tune what the model demands.
type Options struct {
	// ExactAvailable: a sold-out answer's "available" must equal the stock at the moment the
	// refusal took effect. Sound when the service reports a stock it read during the request
	// (the pre-check, or the read under the lock), as it does today; without it, a sold-out
	// needs only the stock to be short.
	ExactAvailable bool
}

// New returns the sequential specification of the products, in partitions checked one by
// one:
//
//   - one per product: a confirmed order needs the stock and takes it, a sold-out answer needs
//     it short, a restock adds to it (and a confirmed restock answers the sum), a read returns
//     it, and an operation whose outcome is unknown may have happened or not. With a sale
//     window, the product's state also says whether the sale has opened or ended: the window's
//     bounds are operations of their own (KindOpen, KindClose) placed at Postgres's moments,
//     an order confirmed outside the window cannot be placed, and a sale-not-open (sale-ended)
//     refusal must fall before the opening (after the end).
//   - one per customer of a product with a limit: the units that customer holds. A confirmed
//     order may not take them above the limit; a customer-limit refusal needs them high
//     enough that the order would have.
//
// Checking the limit apart from the stock keeps the search small (a customer's orders are a
// handful) at the price of completeness: a history each of whose partitions is linearizable
// might have no single order satisfying both; a violation found is always one.
func New(o Options) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partition,
		Init:      func() []any { return []any{state{stock: stateUnset}} },
		Step: func(s, input, output any) []any {
			return step(o, s.(state), input.(Input), output.(Output))
		},
		Hash: func(s any) uint64 {
			st := s.(state)
			return uint64(st.stock)*31 + uint64(st.bought)*7 + uint64(st.phase) + holdHash(st.hold)*131
		},
		DescribeOperation: describeOp,
		DescribeState:     describeState,
		DescribeOperationMetadata: func(info any) string {
			if info == nil {
				return ""
			}
			return info.(string)
		},
	}
	return nm.ToModel()
}
