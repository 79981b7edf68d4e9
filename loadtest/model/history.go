package model

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Building the checker's input: operations turned into Porcupine's, batches and windows.

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
