package model

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// The checker decides whether each partition of a history has a linearization: one order of
// its operations that respects real time (an operation that returned before another was
// invoked comes first) and that the model accepts, one step after another. The search is the
// one Porcupine makes (Lowe's just-in-time linearization, with a cache of the configurations
// already tried: the set of operations placed, and the model's state after them), with one
// rule more, which Porcupine's interface cannot express.
//
// Observers come first. An observer is an operation whose step, in any state, leaves the state
// as it is or fails (observes): a read, a sold-out answer, a refusal by the sale rules, a
// hold's final status. When an observer could be placed next (it was invoked before every
// operation still to place returned) and every state the partition may be in accepts it, it
// is placed at once, and the search tries nothing else there: if any linearization goes on
// from this configuration, one goes on with the observer first. (Moved to the front, it
// breaks no real-time order, since nothing left returned before it was invoked; it changes no
// state, so the operations it overtakes step as before; and the states they lead to are a
// superset of the ones the observer would have let through later, which accept whatever
// followed.) The rule is exact: it cuts only orders that differ in where an observer sits.
//
// It is what makes the scarce product's histories decidable. Without it, the search places
// any subset of the sold-out answers and reads that are open together before a restock and
// the rest after it, and each subset is a configuration of its own: when a fault holds up
// thirty answers of "sold out, 0 available" with a restock, a wrong choice of an order can
// cost up to 2^30 configurations to take back (issue #31: pg-switchover, UNDECIDED after
// five minutes). With it, the subsets of observers collapse to one, and what is left to
// choose among are the writes open together, which a scarce product has few of.

// observes reports whether an operation is an observer: in every state of every partition
// it belongs to, its step returns that state or nothing (TestObserversChangeNothing holds the
// model to it).
func observes(in Input, out Output) bool {
	switch in.Kind {
	case KindRead, KindStatus:
		return true
	case KindOrder:
		switch out.Outcome {
		case SoldOut, NotOpen, Ended, OverLimit, Refused:
			return true
		}
	case KindRestock:
		return out.Outcome == Refused
	case KindConfirm:
		return out.Outcome == HoldExpired || out.Outcome == OrderCancelled
	case KindCancel:
		return out.Outcome == Expired || out.Outcome == OrderConfirmed
	}
	return false
}

// decide checks every partition of history, each in a goroutine of its own, and stops at the
// first that has no linearization or when ctx ends (Unknown). limit, when positive, bounds
// the configurations each partition's search may visit: past it, the verdict is Unknown (the
// tests' way of bounding the work without a clock). It returns how many configurations the
// searches visited in all.
func decide(ctx context.Context, model porcupine.Model, history []porcupine.Operation, limit int) (porcupine.CheckResult, int) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	parts := model.Partition(history)
	results := make([]porcupine.CheckResult, len(parts))
	var explored atomic.Int64
	var wg sync.WaitGroup
	for i, part := range parts {
		wg.Go(func() {
			s := newSearch(model, part, limit)
			results[i] = s.run(ctx)
			explored.Add(int64(s.explored))
			if results[i] == porcupine.Illegal {
				cancel() // one partition without a linearization decides the history
			}
		})
	}
	wg.Wait()
	verdict := porcupine.Ok
	for _, r := range results {
		switch {
		case r == porcupine.Illegal:
			return porcupine.Illegal, int(explored.Load())
		case r == porcupine.Unknown:
			verdict = porcupine.Unknown
		}
	}
	return verdict, int(explored.Load())
}

// event is an operation's call or return in the list the search walks: the events of the
// operations not placed yet, in time order (a call before a return at the same time: the
// intervals are closed). The operations that may be placed next are the calls before the
// list's first return. Placing one unlinks both its events; taking it back relinks them, in
// the reverse order (the list's links stay in the unlinked events for that).
type event struct {
	op         int
	ret        bool
	prev, next *event
}

// move is one operation placed, with the state before it; a forced move is an observer the
// rule placed, whose configuration offers no other choice to go back to.
type move struct {
	op     int
	before any
	forced bool
}

// cached is a configuration the search has visited: none it visited is on the way to a
// linearization, or the search would have ended there.
type cached struct {
	placed bitset
	state  any
}

// search is one partition's.
type search struct {
	model     porcupine.Model
	ops       []porcupine.Operation
	observer  []bool
	calls     []*event
	rets      []*event
	head      event // before the first event
	placed    bitset
	cache     map[uint64][]cached
	explored  int
	limit     int
	exhausted bool
}

func newSearch(model porcupine.Model, ops []porcupine.Operation, limit int) *search {
	s := &search{model: model, ops: ops, observer: make([]bool, len(ops)), calls: make([]*event, len(ops)), rets: make([]*event, len(ops)),
		placed: newBitset(len(ops)), cache: map[uint64][]cached{}, limit: limit}
	events := make([]*event, 0, 2*len(ops))
	for i, o := range ops {
		s.observer[i] = observes(o.Input.(Input), o.Output.(Output))
		s.calls[i], s.rets[i] = &event{op: i}, &event{op: i, ret: true}
		events = append(events, s.calls[i], s.rets[i])
	}
	at := func(e *event) int64 {
		if e.ret {
			return ops[e.op].Return
		}
		return ops[e.op].Call
	}
	sort.SliceStable(events, func(i, j int) bool {
		if ti, tj := at(events[i]), at(events[j]); ti != tj {
			return ti < tj
		}
		return !events[i].ret && events[j].ret
	})
	prev := &s.head
	for _, e := range events {
		e.prev, prev.next = prev, e
		prev = e
	}
	return s
}

// unlink takes operation op's events out of the list; relink puts them back.
func (s *search) unlink(op int) { s.calls[op].drop(); s.rets[op].drop() }
func (s *search) relink(op int) { s.rets[op].restore(); s.calls[op].restore() }

func (e *event) drop() {
	e.prev.next = e.next
	if e.next != nil {
		e.next.prev = e.prev
	}
}

func (e *event) restore() {
	e.prev.next = e
	if e.next != nil {
		e.next.prev = e
	}
}

// visit marks the configuration of the operations placed plus op, in state, as visited; false
// when it was already (op is then left unplaced).
func (s *search) visit(op int, state any) bool {
	s.placed.set(op)
	key := s.placed.hash()
	if s.model.Hash != nil {
		key ^= s.model.Hash(state)
	}
	for _, c := range s.cache[key] {
		if slices.Equal(c.placed, s.placed) && s.model.Equal(c.state, state) {
			s.placed.clear(op)
			return false
		}
	}
	s.cache[key] = append(s.cache[key], cached{slices.Clone(s.placed), state})
	s.explored++
	if s.limit > 0 && s.explored > s.limit {
		s.exhausted = true
	}
	return true
}

// run searches for a linearization: Ok when there is one, Illegal when there is none,
// Unknown when ctx ended or the limit was passed first.
func (s *search) run(ctx context.Context) porcupine.CheckResult {
	state := s.model.Init()
	var stack []move
	fresh := true   // the configuration is reached for the first time
	var from *event // where the choice at the configuration resumes
	for steps := 0; ; steps++ {
		if steps%1024 == 0 && ctx.Err() != nil || s.exhausted {
			return porcupine.Unknown
		}
		if fresh {
			fresh = false
			var ok bool
			state, ok = s.force(state, &stack)
			switch {
			case s.exhausted:
				return porcupine.Unknown
			case !ok:
				from = nil // visited before, and it led nowhere: so does this one
			case s.head.next == nil:
				return porcupine.Ok
			default:
				from = s.head.next
			}
		}
		// Choose the next operation among those that may come next, from where the last
		// choice here left off.
		placed := false
		for e := from; e != nil && !e.ret; e = e.next {
			o := s.ops[e.op]
			ok, next := s.model.Step(state, o.Input, o.Output)
			if !ok || !s.visit(e.op, next) {
				continue
			}
			stack = append(stack, move{op: e.op, before: state})
			s.unlink(e.op)
			state, fresh, placed = next, true, true
			break
		}
		if placed {
			continue
		}
		// Nothing fits here: take back the forced moves to the last choice, and that choice.
		for {
			if len(stack) == 0 {
				return porcupine.Illegal
			}
			m := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			s.relink(m.op)
			s.placed.clear(m.op)
			state = m.before
			if !m.forced {
				from = s.calls[m.op].next
				break
			}
		}
	}
}

// force places, one after another, the observers that may come next and that every state
// accepts, and returns the state they leave (the one it was given: they change nothing).
// false: a configuration it reached was visited before.
func (s *search) force(state any, stack *[]move) (any, bool) {
	for {
		e := s.head.next
		for ; e != nil && !e.ret; e = e.next {
			if !s.observer[e.op] {
				continue
			}
			o := s.ops[e.op]
			if ok, next := s.model.Step(state, o.Input, o.Output); ok && s.model.Equal(next, state) {
				break
			}
		}
		if e == nil || e.ret {
			return state, true
		}
		if !s.visit(e.op, state) {
			return state, false
		}
		*stack = append(*stack, move{op: e.op, before: state, forced: true})
		s.unlink(e.op)
		if s.exhausted {
			return state, true
		}
	}
}

// bitset is the set of operations placed.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

func (b bitset) set(i int)   { b[i/64] |= 1 << (i % 64) }
func (b bitset) clear(i int) { b[i/64] &^= 1 << (i % 64) }

// hash mixes the words (FNV-1a over them, each word multiplied in whole).
func (b bitset) hash() uint64 {
	h := uint64(14695981039346656037)
	for _, w := range b {
		h = (h ^ w) * 1099511628211
	}
	return h
}

// CheckResult is the verdict on one history.
type CheckResult struct {
	Name       string // "orders+restocks" or "with reads"
	Ops        int
	Partitions int // products, customers of products with a limit, and holds
	Concurrent int // the most operations open at once
	Result     porcupine.CheckResult
	Elapsed    time.Duration
	// Explored counts the configurations the search visited (operations placed, and the
	// state they leave), over every partition: its work, which Elapsed alone does not tell
	// on a machine shared with other work.
	Explored int
	Visual   string // HTML visualisation, written when the history is not linearizable
	// Explanation says in words where the search got stuck: the end of the longest legal
	// prefix, and the operations none of whose placements fit.
	Explanation string
}

// String is the verdict on one line, with the picture's path and the explanation after it.
func (c CheckResult) String() string {
	verdict := map[porcupine.CheckResult]string{porcupine.Ok: "linearizable", porcupine.Illegal: "NOT LINEARIZABLE",
		porcupine.Unknown: "UNDECIDED (checker timed out)"}[c.Result]
	s := fmt.Sprintf("%-16s %5d ops in %d partitions (products; customers of a limited one; holds), at most %d open at once: %s (%v, %d configurations)", c.Name, c.Ops, c.Partitions, c.Concurrent, verdict,
		c.Elapsed.Round(time.Millisecond), c.Explored)
	if c.Visual != "" {
		s += "; see " + c.Visual
	}
	if c.Explanation != "" {
		s += "\n" + c.Explanation
	}
	return s
}

// explain describes, for each product whose history could not be linearized, the last steps
// of the longest linearizable prefix Porcupine found and the earliest operations left out of
// it, one of which cannot be placed.
func explain(model porcupine.Model, info porcupine.LinearizationInfo, sizes []int) string {
	var b strings.Builder
	for i, partials := range info.PartialLinearizationsOperations() {
		var longest []porcupine.Operation
		for _, p := range partials {
			if len(p) > len(longest) {
				longest = p
			}
		}
		if len(longest) == 0 || i < len(sizes) && len(longest) == sizes[i] {
			continue // linearizable
		}
		state := model.Init()
		var states []any
		for _, o := range longest {
			_, state = model.Step(state, o.Input, o.Output)
			states = append(states, state)
		}
		first := longest[0].Input.(Input)
		what := fmt.Sprintf("product %d", first.Product)
		if first.HoldStart {
			what = "hold " + first.Hold
		}
		fmt.Fprintf(&b, "    %s: a legal order of %d of its %d operations ends with\n", what, len(longest), sizes[i])
		for i := max(0, len(longest)-4); i < len(longest); i++ {
			o := longest[i]
			fmt.Fprintf(&b, "      [%.6f, %.6f] %s ⇒ %s\n", float64(o.Call)/1e9, float64(o.Return)/1e9, describeOp(o.Input, o.Output),
				model.DescribeState(states[i]))
		}
		b.WriteString("    and cannot go on: the stock it reaches contradicts what came next\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// Check checks one history with the checker above, within timeout (past it, the verdict is
// Unknown), and, when it is not linearizable, writes Porcupine's visualisation to dir/<file>
// with an explanation: Porcupine's verbose check, which keeps every partial linearization for
// the picture, runs only when there is something to show. model is New's.
func Check(name string, model porcupine.Model, history []porcupine.Operation, timeout time.Duration,
	annotations []porcupine.Annotation, dir, file string) (CheckResult, error) {
	res := CheckResult{Name: name, Ops: len(history), Partitions: len(model.Partition(history)), Concurrent: concurrency(history)}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	began := time.Now()
	res.Result, res.Explored = decide(ctx, model, history, 0)
	res.Elapsed = time.Since(began)
	if res.Result != porcupine.Illegal || dir == "" {
		return res, nil
	}
	_, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	var sizes []int
	for _, part := range model.Partition(history) {
		sizes = append(sizes, len(part))
	}
	res.Explanation = explain(model, info, sizes)
	info.AddAnnotations(annotations)
	res.Visual = filepath.Join(dir, file)
	if err := porcupine.VisualizePath(model, info, res.Visual); err != nil {
		return res, fmt.Errorf("write visualisation %s: %w", res.Visual, err)
	}
	return res, nil
}

// concurrency is the most operations open at once in a history (unknown ones count until the
// end): what makes a linearizability search slow, so drills report it.
func concurrency(history []porcupine.Operation) int {
	type edge struct {
		t     int64
		delta int
	}
	edges := make([]edge, 0, 2*len(history))
	for _, o := range history {
		if o.Input.(Input).InBatch {
			continue // its batch is what the search places
		}
		edges = append(edges, edge{o.Call, 1}, edge{o.Return, -1})
	}
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].t != edges[j].t {
			return edges[i].t < edges[j].t
		}
		return edges[i].delta > edges[j].delta // closed intervals: calls before returns
	})
	most, open := 0, 0
	for _, e := range edges {
		open += e.delta
		most = max(most, open)
	}
	return most
}
