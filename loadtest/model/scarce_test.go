package model

import (
	"math/rand/v2"
	"slices"
	"time"
)

// stallStart is when scarceSale's stall begins.
const stallStart = 3 * time.Second

// scarceSale generates the scarce product's operations in a drill whose fault leaves no
// primary for stall (pg-switchover, pg-failover), from the drill's own client model
// (faults/drill.go): orders of 1–2 units arriving at 12 a second, reads at 4.8 a second, one
// restock of 1–3 units at a time every 400–800 ms, on a product created with 4 units, and the
// stock in the database read once it has all stopped. A sequential stock answers them: an
// operation takes effect a few milliseconds after it is invoked and is answered a few after
// that. From stallStart on, nothing is written: a read is answered from the view at once, an
// order the view shows short is refused sold-out at once one time in three, and every other
// write waits; when the stall ends, the waiting writes take effect in a random order within
// 30 ms. The first lost of those lose their answers (a primary killed mid-commit,
// pg-failover): a lost restock stays unknown, a lost order the database holds is found
// (Happened), and one it does not hold is left out. The run lasts length.
//
// effects[i] is when ops[i] took effect: inside its interval, in the order that explains
// every answer (a linearization, the witness that the history is linearizable).
func scarceSale(seed uint64, stall, length time.Duration, lost int) (ops []*Op, effects []time.Duration) {
	rng := rand.New(rand.NewPCG(seed, 31))
	ms := func(lo, hi float64) time.Duration {
		return time.Duration((lo + rng.Float64()*(hi-lo)) * float64(time.Millisecond))
	}
	healed := stallStart + stall
	add := func(kind Kind, qty int64, invoke time.Duration) *Op {
		p := &Op{ID: len(ops), Client: len(ops), In: Input{Kind: kind, Product: 1, Quantity: qty}, Invoke: invoke}
		ops, effects = append(ops, p), append(effects, 0)
		return p
	}
	create := add(KindCreate, 0, 0)
	create.Return, create.Out = time.Millisecond, Output{Outcome: Confirmed, Stock: 4}
	// Arrivals, in time order: 16.8 operations a second, 4.8 of them reads.
	var arrivals []*Op
	for t := 10 * time.Millisecond; t < length; {
		t += time.Duration(rng.ExpFloat64() / 16.8 * float64(time.Second))
		if rng.IntN(168) < 48 {
			arrivals = append(arrivals, add(KindRead, 0, t))
		} else {
			arrivals = append(arrivals, add(KindOrder, int64(1+rng.IntN(2)), t))
		}
	}
	stock := int64(4)
	var last time.Duration // the latest moment anything took effect: the stock is sequential
	nextRestock, restockOpen := ms(400, 800), false
	// take applies p at moment at (or just after the last effect) and answers it shortly after.
	take := func(p *Op, at time.Duration) {
		at = max(at, last+time.Microsecond)
		last, effects[p.ID] = at, at
		p.Return = at + ms(0.5, 3)
		switch p.In.Kind {
		case KindRead:
			p.Out = Output{Outcome: Confirmed, Stock: stock}
		case KindRestock:
			stock += p.In.Quantity
			p.Out = Output{Outcome: Confirmed, Stock: stock}
			nextRestock, restockOpen = p.Return+ms(400, 800), false
		case KindOrder:
			if stock >= p.In.Quantity {
				stock -= p.In.Quantity
				p.Out = Output{Outcome: Confirmed}
			} else {
				p.Out = Output{Outcome: SoldOut, Available: stock, HasAvailable: true}
			}
		}
	}
	var waiting []*Op
	for len(arrivals) > 0 || len(waiting) > 0 {
		next := length + time.Hour
		if len(arrivals) > 0 {
			next = arrivals[0].Invoke
		}
		if !restockOpen && nextRestock < length && nextRestock < next {
			// One restock at a time, sent 400–800 ms after the last was answered.
			arrivals = slices.Insert(arrivals, 0, add(KindRestock, int64(1+rng.IntN(3)), nextRestock))
			restockOpen = true
			continue
		}
		if len(waiting) > 0 && healed <= next {
			rng.Shuffle(len(waiting), func(i, j int) { waiting[i], waiting[j] = waiting[j], waiting[i] })
			at := healed
			for i, p := range waiting {
				at += ms(0, 30/float64(len(waiting)))
				take(p, at)
				if i >= lost {
					continue
				}
				p.Return = at + ms(100, 200) // the client gave up on it
				switch {
				case p.In.Kind == KindRestock:
					p.Out = Output{Outcome: Unknown}
				case p.Out.Outcome == Confirmed:
					p.Out = Output{Outcome: Happened}
				default:
					p.Out = Output{Outcome: Refused} // not in the database: left out
				}
			}
			waiting = nil
			continue
		}
		p := arrivals[0]
		arrivals = arrivals[1:]
		stalled := p.Invoke >= stallStart && p.Invoke < healed
		switch {
		case !stalled || p.In.Kind == KindRead:
			take(p, p.Invoke+ms(1, 4))
		case p.In.Kind == KindOrder && p.In.Quantity > stock && rng.IntN(3) == 0:
			take(p, p.Invoke+ms(1, 4)) // refused from the view
		default:
			waiting = append(waiting, p)
		}
	}
	final := add(KindRead, 0, length+time.Second)
	final.Final = true
	take(final, final.Invoke)
	return ops, effects
}
