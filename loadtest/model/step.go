package model

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/anishathalye/porcupine"
)

// The model's steps: a product's state, what each operation does to it, how each is
// described, and the partitions Porcupine checks one by one.

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
