// Package model is the drills' model of the stock and their history: every operation the
// clients made (Op, collected by a Recorder), with the time it was invoked and the time its
// answer came back, checked (Check: Porcupine's search, with a rule of its own for the
// operations that only observe; checker.go) against a sequential specification of each
// product's stock and sale rules (New), in Porcupine's form. A history is saved beside its run
// (Save, WriteText) and can be checked again later (Load).
package model

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
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

const stateUnset int64 = -1

// phase is where a product's sale stands.
type phase uint8

const (
	phaseOpen   phase = iota // on sale (a product without a window is, from its creation)
	phaseBefore              // not open yet
	phaseEnded               // ended
)

// state is one partition's state: a product's stock and phase, or, in a customer's partition
// (perCustomer), the units the customer holds of a product with a limit.
type state struct {
	stock       int64 // stateUnset: the product is not created yet
	phase       phase
	perCustomer bool
	limit       int64
	bought      int64
	// hold is a hold's status, in a hold's partition (isHold).
	isHold bool
	hold   HoldStatus
}

func describeState(s any) string {
	st := s.(state)
	switch {
	case st.stock == stateUnset:
		return "not created"
	case st.isHold:
		return "hold " + string(st.hold)
	case st.perCustomer:
		return fmt.Sprintf("customer holds %d of at most %d", st.bought, st.limit)
	case st.phase == phaseBefore:
		return "stock " + strconv.FormatInt(st.stock, 10) + ", not open"
	case st.phase == phaseEnded:
		return "stock " + strconv.FormatInt(st.stock, 10) + ", ended"
	}
	return "stock " + strconv.FormatInt(st.stock, 10)
}

// step returns every state the partition can be in after the operation, none when the
// operation could not have returned what it did.
func step(o Options, s state, in Input, out Output) []any {
	if in.Kind == KindCreate {
		if s.stock != stateUnset {
			return nil
		}
		if in.PerCustomer {
			return []any{state{stock: 0, perCustomer: true, limit: out.Rules.Limit}}
		}
		if in.HoldStart {
			return []any{state{stock: 0, isHold: true, hold: StatusHeld}}
		}
		ph := phaseOpen
		if out.Rules.HasOpens {
			ph = phaseBefore // History adds the opening after the creation only when it is later
		}
		return []any{state{stock: out.Stock, phase: ph}}
	}
	if s.stock == stateUnset {
		return nil
	}
	if s.isHold {
		return stepHold(s, in, out)
	}
	if s.perCustomer {
		return stepCustomer(s, in, out)
	}
	return stepStock(o, s, in, out)
}

// stepStock is a product's partition.
func stepStock(o Options, s state, in Input, out Output) []any {
	q := in.Quantity
	with := func(stock int64) state { s2 := s; s2.stock = stock; return s2 }
	switch in.Kind {
	case KindOpen:
		if s.phase == phaseBefore {
			s.phase = phaseOpen
			return []any{s}
		}
	case KindClose:
		ended := s
		ended.phase = phaseEnded
		switch out.Outcome {
		case Confirmed:
			return []any{ended}
		case Unknown:
			return []any{ended, s}
		}
	case KindOrder:
		switch out.Outcome {
		case Confirmed, Happened, Held:
			if s.phase == phaseOpen && s.stock >= q {
				return []any{with(s.stock - q)}
			}
		case SoldOut:
			if s.stock < q && (!o.ExactAvailable || !out.HasAvailable || out.Available == s.stock) {
				return []any{s}
			}
		case NotOpen:
			if s.phase == phaseBefore {
				return []any{s}
			}
		case Ended:
			if s.phase == phaseEnded {
				return []any{s}
			}
		case Refused, OverLimit:
			// A limit is the customer partitions' business; a refusal constrains nothing.
			return []any{s}
		case Unknown:
			if s.phase == phaseOpen && s.stock >= q {
				return []any{with(s.stock - q), s}
			}
			return []any{s}
		}
	case KindRestock:
		switch out.Outcome {
		case Confirmed:
			if s.stock+q == out.Stock {
				return []any{with(s.stock + q)}
			}
		case Refused:
			return []any{s}
		case Unknown:
			return []any{with(s.stock + q), s}
		}
	case KindRead:
		if s.stock == out.Stock {
			return []any{s}
		}
	case KindRelease:
		// A hold's units back in stock, whatever the window says: a release is no sale.
		return []any{with(s.stock + q)}
	}
	return nil
}

// stepCustomer is one customer's partition of a product with a limit: only its orders.
func stepCustomer(s state, in Input, out Output) []any {
	q := in.Quantity
	bought := func(b int64) state { s2 := s; s2.bought = b; return s2 }
	if in.Kind == KindRelease {
		// A released hold stops counting toward the limit.
		if s.bought >= q {
			return []any{bought(s.bought - q)}
		}
		return nil
	}
	if in.Kind != KindOrder {
		return nil
	}
	switch out.Outcome {
	case Confirmed, Happened, Held:
		if s.bought+q <= s.limit {
			return []any{bought(s.bought + q)}
		}
	case OverLimit:
		if s.bought+q > s.limit {
			return []any{s}
		}
	case Unknown:
		if s.bought+q <= s.limit {
			return []any{bought(s.bought + q), s}
		}
		return []any{s}
	default:
		// Sold out, outside the window, busy: nothing bought, and nothing said about the limit.
		return []any{s}
	}
	return nil
}

func describeOp(input, output any) string {
	in, out := input.(Input), output.(Output)
	switch in.Kind {
	case KindCreate:
		if in.PerCustomer {
			return fmt.Sprintf("create(limit %d) for %s", out.Rules.Limit, in.Customer)
		}
		if in.HoldStart {
			return "hold " + in.Hold + " taken"
		}
		return fmt.Sprintf("create(%d)", out.Stock)
	case KindOrder:
		if in.Orders > 1 {
			return fmt.Sprintf("%d orders of one transaction, %d units → %s", in.Orders, in.Quantity, out.Outcome)
		}
		if out.Outcome == SoldOut && out.HasAvailable {
			return fmt.Sprintf("order(%d) → sold-out, %d available", in.Quantity, out.Available)
		}
		if in.Customer != "" && out.Outcome != SoldOut {
			return fmt.Sprintf("order(%d) by %s → %s", in.Quantity, in.Customer, out.Outcome)
		}
		return fmt.Sprintf("order(%d) → %s", in.Quantity, out.Outcome)
	case KindRestock:
		if out.Outcome == Confirmed {
			return fmt.Sprintf("restock(%d) → %d", in.Quantity, out.Stock)
		}
		return fmt.Sprintf("restock(%d) → %s", in.Quantity, out.Outcome)
	case KindRead:
		return fmt.Sprintf("read → %d", out.Stock)
	case KindOpen:
		return "sale opens"
	case KindClose:
		return "sale ends"
	case KindConfirm, KindCancel, KindRelease, KindExpire, KindStatus, KindLapse:
		return describeHoldOp(in, out)
	}
	return "?"
}

// partition cuts a history into one partition per product and, for each product with a
// limit, one per customer who ordered it, which starts with a copy of the product's creation
// (marked PerCustomer). Partitions come in product order, each product's customers after it.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	byProduct := map[int64][]porcupine.Operation{}
	created := map[int64]porcupine.Operation{}
	byHold := map[string][]porcupine.Operation{}
	members := map[int64][]porcupine.Operation{}
	var ids []int64
	var holds []string
	for _, op := range history {
		in := op.Input.(Input)
		if in.Hold != "" && in.Kind != KindRelease {
			if _, ok := byHold[in.Hold]; !ok {
				holds = append(holds, in.Hold)
			}
			byHold[in.Hold] = append(byHold[in.Hold], op)
			continue
		}
		if in.InBatch {
			// Its units are its batch's, in the product's partition; its customer's partition,
			// if the product has a limit, still needs it.
			members[in.Product] = append(members[in.Product], op)
			continue
		}
		if _, ok := byProduct[in.Product]; !ok {
			ids = append(ids, in.Product)
		}
		byProduct[in.Product] = append(byProduct[in.Product], op)
		if in.Kind == KindCreate && !in.PerCustomer {
			created[in.Product] = op
		}
	}
	slices.Sort(ids)
	out := make([][]porcupine.Operation, 0, len(ids))
	for _, id := range ids {
		out = append(out, byProduct[id])
		c, ok := created[id]
		if !ok || c.Output.(Output).Rules.Limit <= 0 {
			continue
		}
		byCustomer := map[string][]porcupine.Operation{}
		var customers []string
		for _, op := range slices.Concat(byProduct[id], members[id]) {
			in := op.Input.(Input)
			if in.Kind != KindOrder && in.Kind != KindRelease || in.Customer == "" || in.Orders > 1 {
				continue
			}
			if _, ok := byCustomer[in.Customer]; !ok {
				customers = append(customers, in.Customer)
				start := c
				cin := c.Input.(Input)
				cin.PerCustomer, cin.Customer = true, in.Customer
				start.Input = cin
				byCustomer[in.Customer] = []porcupine.Operation{start}
			}
			byCustomer[in.Customer] = append(byCustomer[in.Customer], op)
		}
		slices.Sort(customers)
		for _, cu := range customers {
			out = append(out, byCustomer[cu])
		}
	}
	slices.Sort(holds)
	for _, id := range holds {
		out = append(out, byHold[id])
	}
	return out
}

// Attempt is one HTTP request of an operation.
type Attempt struct {
	Start, End time.Duration // since the recorder's start
	Status     int           // 0: no answer (timeout, connection error)
	Code       string        // the problem code, when the answer was one
	Replica    bool          // the answer came from a replica (problem+json or JSON), not the balancer
	// Server is the replica that answered, as the balancer names it (its X-Served-By header:
	// r1, r2...); empty when the balancer did not say (no answer, or a request sent to a
	// replica directly).
	Server string `json:",omitempty"`
	Err    string
	// Resent: Go's transport sent the request again on a new connection after the first one
	// broke (it does so by itself for a request with an Idempotency-Key); the answer is the
	// second sending's.
	Resent bool
}

// Op is one logical operation: all the attempts made for it (with the same Idempotency-Key,
// for orders), and what they add up to.
type Op struct {
	ID       int
	Client   int // lane in the visualization; a client whose operation never ended gets a new one
	In       Input
	Out      Output
	Invoke   time.Duration
	Return   time.Duration // of the last attempt
	Attempts []Attempt
	Customer string // orders: the customer id, unique to the operation
	Key      string // orders: the Idempotency-Key of every attempt
	OrderID  string // orders: the id a 201 gave
	// Final marks the read of the stock in the database once every replica has stopped: it
	// belongs to the writes-only history too, as the state all the writes add up to.
	Final bool
	// NotBefore, when positive, is the earliest the operation can have taken effect, as the
	// database recorded it (see verdict.Orders).
	NotBefore time.Duration
	// Txn is the Postgres transaction that wrote the order's items (their xmin), when the
	// order is in the database: the orders of one batch share it, and took effect at its
	// commit, together (see History).
	Txn string
	// RefusedButSold marks an order refused to its client (429) that the database holds: a
	// violation, checked by the model as an order that happened (see verdict.Orders).
	RefusedButSold bool
	// Hold marks an order that is a hold (answered held, or found in the database with an
	// expires_at): History starts a partition of its own for it, by OrderID.
	Hold bool
	// Expires is a hold's expires_at as its answer gave it, on the recorder's clock: when a
	// buyer who pays late is too late. Not saved: the check does not read it.
	Expires time.Duration
}

// Recorder collects operations from many goroutines.
type Recorder struct {
	Start time.Time
	mu    sync.Mutex
	ops   []*Op
	next  int
}

// NewRecorder returns a recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{Start: time.Now()} }

// Now is the time since the recorder started, on the monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.Start) }

// Add records o, giving it the next id.
func (r *Recorder) Add(o *Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.ID = r.next
	r.next++
	r.ops = append(r.ops, o)
}

// Snapshot returns the operations recorded so far, in the order they were added.
func (r *Recorder) Snapshot() []*Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// HistoryOptions say which operations a checked history holds.
type HistoryOptions struct {
	Reads bool
	// ReadSlack widens every read backwards: a read served from a cache may return any stock
	// that was current up to ReadSlack before it was invoked. Zero: reads are linearizable.
	ReadSlack time.Duration
	// End is when nothing can take effect any more (every replica stopped): operations whose
	// Outcome is unknown are open until then.
	End time.Duration
	// WindowSlack widens the moments a sale opens and ends into intervals this long on either
	// side: the harness and Postgres read one wall clock, but not at the same instant, and a
	// replica refusing from its view reads its own. Zero: the moments are exact.
	WindowSlack time.Duration
}

// History turns operations into Porcupine's form. Operations that were refused, and
// unknown orders the database shows never happened, change nothing and are left out. A
// product created with a sale window gets its opening and its end as operations of their own.
//
// The orders of a product that one transaction committed (Op.Txn) took their units at one
// moment, its commit, which lies inside every one of their intervals: they become one
// operation over the intersection, taking the sum of their units (their customers' partitions
// still see each). No read sees a state inside a transaction; a sold-out answer decided in
// the batch does (the units left at its turn), so a batch one may have come from is not merged. Without it, when a Redis pause holds back fifty orders of one to three
// units and two batches commit them, a read between the batches must be explained by some
// subset of the fifty summing to exactly what it saw, and Porcupine's search for one took more
// than five minutes (holds-expiry, one run in six). The merge leaves out only orders of
// linearizations in which one transaction's orders took effect at different moments, which
// no run can have; orders whose intervals do not meet are left apart.
func History(ops []*Op, o HistoryOptions) []porcupine.Operation {
	var out []porcupine.Operation
	lanes := 0
	for _, p := range ops {
		lanes = max(lanes, p.Client+1)
	}
	interval := func(p *Op) (call, ret time.Duration) {
		call, ret = p.Invoke, p.Return
		if p.NotBefore > call && (p.NotBefore <= ret || p.Out.Outcome == Happened) {
			call = p.NotBefore
		}
		switch {
		case p.Out.Outcome == Unknown || p.Out.Outcome == Happened:
			ret = o.End
		case p.In.Kind == KindRead:
			call = max(0, call-o.ReadSlack)
		}
		return call, ret
	}
	batches := batchesOf(ops, interval)
	for _, p := range ops {
		if p.Out.Outcome == Refused || (p.In.Kind == KindRead && !o.Reads && !p.Final) {
			continue
		}
		call, ret := interval(p)
		in, res := p.In, p.Out
		if in.Kind == KindOrder {
			in.Customer = p.Customer
		}
		if b, ok := batches[batchKey{p.Txn, p.In.Product}]; ok {
			in.InBatch = true
			if b.first == p {
				out = append(out, porcupine.Operation{ClientId: lanes, Call: int64(b.call), Return: int64(b.ret),
					Input:    Input{Kind: KindOrder, Product: p.In.Product, Quantity: b.units, Orders: b.orders},
					Output:   Output{Outcome: Confirmed},
					Metadata: fmt.Sprintf("transaction %s: the orders of clients %v", p.Txn, b.clients)})
				lanes++
			}
		}
		var ticks []porcupine.Operation
		if in.Kind == KindCreate {
			ticks, res.Rules = windowTicks(p, o.WindowSlack, &lanes)
		}
		out = append(out, porcupine.Operation{
			ClientId: p.Client,
			Input:    in,
			Call:     int64(call),
			Output:   res,
			Return:   int64(ret),
			Metadata: p.DescribeAttempts(),
		})
		out = append(out, ticks...)
		if start, ok := holdStart(p, call, ret); ok {
			out = append(out, start)
		}
	}
	return out
}

// batchKey names the orders of one product one transaction committed.
type batchKey struct {
	txn     string
	product int64
}

// batch is what History merges: the orders of one transaction, their units, and the
// intersection of their intervals.
type batch struct {
	first     *Op
	orders    int
	units     int64
	call, ret time.Duration
	clients   []int
}

// batchesOf finds the orders History merges: two or more of one product in one transaction,
// each taken (confirmed, held, or unknown and found in the database), whose intervals meet,
// and no sold-out answer of the product overlapping them.
func batchesOf(ops []*Op, interval func(*Op) (time.Duration, time.Duration)) map[batchKey]*batch {
	all := map[batchKey]*batch{}
	for _, p := range ops {
		if p.In.Kind != KindOrder || p.Txn == "" || p.RefusedButSold {
			continue
		}
		switch p.Out.Outcome {
		case Confirmed, Held, Happened:
		default:
			continue
		}
		call, ret := interval(p)
		k := batchKey{p.Txn, p.In.Product}
		b, ok := all[k]
		if !ok {
			b = &batch{first: p, call: call, ret: ret}
			all[k] = b
		}
		b.orders++
		b.units += p.In.Quantity
		b.call, b.ret = max(b.call, call), min(b.ret, ret)
		b.clients = append(b.clients, p.Client)
	}
	for k, b := range all {
		if b.orders < 2 || b.call > b.ret {
			delete(all, k)
		}
	}
	// A sold-out answer decided in a batch tells the units left at its turn in the batch's
	// allocation, between two of the batch's orders: a state the merged batch never passes
	// through. A batch that such an answer may have come from is left apart.
	for _, p := range ops {
		if p.In.Kind != KindOrder || p.Out.Outcome != SoldOut {
			continue
		}
		call, ret := interval(p)
		for k, b := range all {
			if k.product == p.In.Product && call <= b.ret && ret >= b.call {
				delete(all, k)
			}
		}
	}
	return all
}

// windowTicks returns the operations that open and end the sale of the product p created,
// and the rules its creation starts the model with: a sale that opened before the product
// existed (by more than the slack) starts open, with no opening to place.
func windowTicks(p *Op, slack time.Duration, lanes *int) ([]porcupine.Operation, Rules) {
	r := p.Out.Rules
	var ticks []porcupine.Operation
	tick := func(kind Kind, at time.Duration) {
		ticks = append(ticks, porcupine.Operation{ClientId: *lanes, Input: Input{Kind: kind, Product: p.In.Product},
			Call: int64(at - slack), Output: Output{Outcome: Confirmed}, Return: int64(at + slack), Metadata: "by Postgres's clock"})
		*lanes++
	}
	if r.HasOpens {
		if r.Opens+slack > p.Invoke {
			tick(KindOpen, r.Opens)
		} else {
			r.HasOpens = false
		}
	}
	if r.HasEnds {
		tick(KindClose, r.Ends)
	}
	return ticks, r
}

// DescribeAttempts says what each attempt got, and when, with the customer and key: the
// metadata of the operation in Porcupine's picture and in the text history.
func (p *Op) DescribeAttempts() string {
	var parts []string
	for _, a := range p.Attempts {
		s := "no answer"
		if a.Status != 0 {
			s = strconv.Itoa(a.Status)
			if a.Code != "" {
				s += " " + a.Code
			}
		} else if a.Err != "" {
			s += " (" + a.Err + ")"
		}
		if a.Server != "" {
			s += " from " + a.Server
		}
		if a.Resent {
			s += " (sent again by Go's transport)"
		}
		parts = append(parts, fmt.Sprintf("%s at %.3fs", s, a.End.Seconds()))
	}
	desc := strings.Join(parts, "; ")
	if p.Key != "" {
		desc = "key " + p.Key + ": " + desc
	}
	if p.Customer != "" {
		desc = "customer " + p.Customer + ": " + desc
	}
	return desc
}

// WriteText writes the operations as text, one a line, for whoever investigates a run.
func WriteText(path string, ops []*Op) error {
	var b strings.Builder
	for _, p := range ops {
		fmt.Fprintf(&b, "%5d client %3d product %d [%.6f, %.6f] %s  %s\n", p.ID, p.Client, p.In.Product,
			p.Invoke.Seconds(), p.Return.Seconds(), describeOp(p.In, p.Out), p.DescribeAttempts())
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	return nil
}

// savedOp is an operation as history.json keeps it, for re-checking a run later
// (go run -C loadtest . -recheck DIR/history.json) without running it again.
type savedOp struct {
	ID        int           `json:"id"`
	Client    int           `json:"client"`
	In        Input         `json:"in"`
	Out       Output        `json:"out"`
	Invoke    time.Duration `json:"invoke_ns"`
	Return    time.Duration `json:"return_ns"`
	NotBefore time.Duration `json:"not_before_ns,omitempty"`
	Txn       string        `json:"txn,omitempty"`
	Final     bool          `json:"final,omitempty"`
	Customer  string        `json:"customer,omitempty"`
	OrderID   string        `json:"order_id,omitempty"`
	Hold      bool          `json:"hold,omitempty"`
	Attempts  string        `json:"attempts"`
}

// Save writes ops, and end, to path as JSON.
func Save(path string, ops []*Op, end time.Duration) error {
	saved := struct {
		End time.Duration `json:"end_ns"`
		Ops []savedOp     `json:"ops"`
	}{End: end}
	for _, p := range ops {
		saved.Ops = append(saved.Ops, savedOp{ID: p.ID, Client: p.Client, In: p.In, Out: p.Out, Invoke: p.Invoke, Return: p.Return,
			NotBefore: p.NotBefore, Txn: p.Txn, Final: p.Final, Customer: p.Customer, OrderID: p.OrderID, Hold: p.Hold, Attempts: p.DescribeAttempts()})
	}
	b, err := json.Marshal(saved)
	if err != nil {
		return fmt.Errorf("encode history: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write history: %w", err)
	}
	return nil
}

// Load reads what Save wrote.
func Load(path string) ([]*Op, time.Duration, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	var saved struct {
		End time.Duration `json:"end_ns"`
		Ops []savedOp     `json:"ops"`
	}
	if err := json.Unmarshal(b, &saved); err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", path, err)
	}
	ops := make([]*Op, len(saved.Ops))
	for i, s := range saved.Ops {
		ops[i] = &Op{ID: s.ID, Client: s.Client, In: s.In, Out: s.Out, Invoke: s.Invoke, Return: s.Return, NotBefore: s.NotBefore, Txn: s.Txn, Final: s.Final,
			Customer: s.Customer, OrderID: s.OrderID, Hold: s.Hold}
	}
	return ops, saved.End, nil
}
