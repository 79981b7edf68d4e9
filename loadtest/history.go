package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// The history a drill checks: every operation its clients made, with the time it was invoked
// and the time its answer came back, against a sequential model of one product's stock.

// opKind is what a client asked for.
type opKind uint8

const (
	// kindCreate is the product's creation: it sets the stock the model starts from.
	kindCreate opKind = iota + 1
	kindOrder
	kindRestock
	kindRead
)

// outcome is what a client was told, or what the run learnt afterwards.
type outcome uint8

const (
	// outConfirmed: a 201 (orders) or a 200 (restocks, reads, creation); it happened once.
	outConfirmed outcome = iota + 1
	// outSoldOut: a 409 sold-out; nothing was sold, and the stock was short.
	outSoldOut
	// outRefused: every attempt was refused without effect (429 busy, 409 in flight); nothing
	// happened. Such operations constrain nothing and are left out of the checked history.
	outRefused
	// outUnknown: some attempt may have taken effect (a 503, a 502, a timeout, a lost
	// connection) and no later attempt told which. It may have happened, at most once, at any
	// moment after it was invoked — even after the client gave up.
	outUnknown
	// outHappened: an order whose answer was unknown, found in the database after the run
	// (by its customer id, unique to the operation): it happened once, at some moment after
	// it was invoked. An unknown order not found there never happened and is left out.
	outHappened
)

func (o outcome) String() string {
	switch o {
	case outConfirmed:
		return "confirmed"
	case outSoldOut:
		return "sold-out"
	case outRefused:
		return "refused"
	case outUnknown:
		return "unknown"
	case outHappened:
		return "happened"
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// stockInput is an operation's input in the model.
type stockInput struct {
	Kind     opKind
	Product  int64
	Quantity int64 // units ordered or restocked
}

// stockOutput is what the operation returned, as far as the model is concerned.
type stockOutput struct {
	Outcome outcome
	// Stock: the stock a read returned, the stock a confirmed restock answered with (its
	// post-image), or the stock a product was created with.
	Stock int64
	// Available is the sold-out answer's "available": the stock the service saw when it
	// refused. HasAvailable is false when the answer carried none.
	Available    int64
	HasAvailable bool
}

// modelOptions tune what the model demands.
type modelOptions struct {
	// exactAvailable: a sold-out answer's "available" must equal the stock at the moment the
	// refusal took effect. Sound when the service reports a stock it read during the request
	// (the pre-check, or the read under the lock), as it does today; without it, a sold-out
	// needs only the stock to be short.
	exactAvailable bool
}

// stockModel is the sequential specification of one product, one partition per product:
// a confirmed order needs the stock and takes it, a sold-out answer needs it short, a restock
// adds to it (and a confirmed restock answers the sum), a read returns it, and an operation
// whose outcome is unknown may have happened or not. The state is the stock; stateUnset is
// a product not created yet.
func stockModel(o modelOptions) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByProduct,
		Init:      func() []any { return []any{stateUnset} },
		Step: func(state, input, output any) []any {
			return stepStock(o, state.(int64), input.(stockInput), output.(stockOutput))
		},
		Hash:              func(state any) uint64 { return uint64(state.(int64)) },
		DescribeOperation: describeOp,
		DescribeState: func(state any) string {
			if state.(int64) == stateUnset {
				return "not created"
			}
			return "stock " + strconv.FormatInt(state.(int64), 10)
		},
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

// stepStock returns every state the product can be in after the operation, none when the
// operation could not have returned what it did.
func stepStock(o modelOptions, s int64, in stockInput, out stockOutput) []any {
	if in.Kind == kindCreate {
		if s != stateUnset {
			return nil
		}
		return []any{out.Stock}
	}
	if s == stateUnset {
		return nil
	}
	q := in.Quantity
	switch in.Kind {
	case kindOrder:
		switch out.Outcome {
		case outConfirmed, outHappened:
			if s >= q {
				return []any{s - q}
			}
		case outSoldOut:
			if s < q && (!o.exactAvailable || !out.HasAvailable || out.Available == s) {
				return []any{s}
			}
		case outRefused:
			return []any{s}
		case outUnknown:
			if s >= q {
				return []any{s - q, s}
			}
			return []any{s}
		}
	case kindRestock:
		switch out.Outcome {
		case outConfirmed:
			if s+q == out.Stock {
				return []any{s + q}
			}
		case outRefused:
			return []any{s}
		case outUnknown:
			return []any{s + q, s}
		}
	case kindRead:
		if s == out.Stock {
			return []any{s}
		}
	}
	return nil
}

func describeOp(input, output any) string {
	in, out := input.(stockInput), output.(stockOutput)
	switch in.Kind {
	case kindCreate:
		return fmt.Sprintf("create(%d)", out.Stock)
	case kindOrder:
		if out.Outcome == outSoldOut && out.HasAvailable {
			return fmt.Sprintf("order(%d) → sold-out, %d available", in.Quantity, out.Available)
		}
		return fmt.Sprintf("order(%d) → %s", in.Quantity, out.Outcome)
	case kindRestock:
		if out.Outcome == outConfirmed {
			return fmt.Sprintf("restock(%d) → %d", in.Quantity, out.Stock)
		}
		return fmt.Sprintf("restock(%d) → %s", in.Quantity, out.Outcome)
	case kindRead:
		return fmt.Sprintf("read → %d", out.Stock)
	}
	return "?"
}

func partitionByProduct(history []porcupine.Operation) [][]porcupine.Operation {
	byProduct := map[int64][]porcupine.Operation{}
	var ids []int64
	for _, op := range history {
		id := op.Input.(stockInput).Product
		if _, ok := byProduct[id]; !ok {
			ids = append(ids, id)
		}
		byProduct[id] = append(byProduct[id], op)
	}
	slices.Sort(ids)
	out := make([][]porcupine.Operation, 0, len(ids))
	for _, id := range ids {
		out = append(out, byProduct[id])
	}
	return out
}

// attempt is one HTTP request of an operation.
type attempt struct {
	start, end time.Duration // since the recorder's start
	status     int           // 0: no answer (timeout, connection error)
	code       string        // the problem code, when the answer was one
	replica    bool          // the answer came from a replica (problem+json or JSON), not the balancer
	err        string
	// resent: Go's transport sent the request again on a new connection after the first one
	// broke (it does so by itself for a request with an Idempotency-Key); the answer is the
	// second sending's.
	resent bool
}

// op is one logical operation: all the attempts made for it (with the same Idempotency-Key,
// for orders), and what they add up to.
type op struct {
	id       int
	client   int // lane in the visualization; a client whose operation never ended gets a new one
	in       stockInput
	out      stockOutput
	invoke   time.Duration
	ret      time.Duration // of the last attempt
	attempts []attempt
	customer string // orders: the customer id, unique to the operation
	key      string // orders: the Idempotency-Key of every attempt
	orderID  string // orders: the id a 201 gave
	// final marks the read of the stock in the database once every replica has stopped: it
	// belongs to the writes-only history too, as the state all the writes add up to.
	final bool
	// notBefore, when positive, is the earliest the operation can have taken effect, as the
	// database recorded it (see reconcileOrders).
	notBefore time.Duration
	// refusedButSold marks an order refused to its client (429) that the database holds: a
	// violation, checked by the model as an order that happened (see reconcileOrders).
	refusedButSold bool
}

// recorder collects operations from many goroutines.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []*op
	next  int
}

func newRecorder() *recorder { return &recorder{start: time.Now()} }

// now is the time since the recorder started, on the monotonic clock.
func (r *recorder) now() time.Duration { return time.Since(r.start) }

func (r *recorder) add(o *op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.id = r.next
	r.next++
	r.ops = append(r.ops, o)
}

// snapshot returns the operations recorded so far, in the order they were added.
func (r *recorder) snapshot() []*op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// historyOptions say which operations a checked history holds.
type historyOptions struct {
	reads bool
	// readSlack widens every read backwards: a read served from a cache may return any stock
	// that was current up to readSlack before it was invoked. Zero: reads are linearizable.
	readSlack time.Duration
	// end is when nothing can take effect any more (every replica stopped): operations whose
	// outcome is unknown are open until then.
	end time.Duration
}

// porcupineHistory turns operations into Porcupine's form. Operations that were refused, and
// unknown orders the database shows never happened, change nothing and are left out.
func porcupineHistory(ops []*op, o historyOptions) []porcupine.Operation {
	var out []porcupine.Operation
	for _, p := range ops {
		if p.out.Outcome == outRefused || (p.in.Kind == kindRead && !o.reads && !p.final) {
			continue
		}
		call, ret := p.invoke, p.ret
		if p.notBefore > call && (p.notBefore <= ret || p.out.Outcome == outHappened) {
			call = p.notBefore
		}
		switch {
		case p.out.Outcome == outUnknown || p.out.Outcome == outHappened:
			ret = o.end
		case p.in.Kind == kindRead:
			call = max(0, call-o.readSlack)
		}
		out = append(out, porcupine.Operation{
			ClientId: p.client,
			Input:    p.in,
			Call:     int64(call),
			Output:   p.out,
			Return:   int64(ret),
			Metadata: p.describeAttempts(),
		})
	}
	return out
}

func (p *op) describeAttempts() string {
	var parts []string
	for _, a := range p.attempts {
		s := "no answer"
		if a.status != 0 {
			s = strconv.Itoa(a.status)
			if a.code != "" {
				s += " " + a.code
			}
		} else if a.err != "" {
			s += " (" + a.err + ")"
		}
		if a.resent {
			s += " (sent again by Go's transport)"
		}
		parts = append(parts, fmt.Sprintf("%s at %.3fs", s, a.end.Seconds()))
	}
	desc := strings.Join(parts, "; ")
	if p.key != "" {
		desc = "key " + p.key + ": " + desc
	}
	if p.customer != "" {
		desc = "customer " + p.customer + ": " + desc
	}
	return desc
}

// checkResult is the verdict on one history.
type checkResult struct {
	name       string // "orders+restocks" or "with reads"
	ops        int
	partitions int
	concurrent int // the most operations open at once
	result     porcupine.CheckResult
	elapsed    time.Duration
	visual     string // HTML visualisation, written when the history is not linearizable
	// explanation says in words where the search got stuck: the end of the longest legal
	// prefix, and the operations none of whose placements fit.
	explanation string
}

func (c checkResult) String() string {
	verdict := map[porcupine.CheckResult]string{porcupine.Ok: "linearizable", porcupine.Illegal: "NOT LINEARIZABLE",
		porcupine.Unknown: "UNDECIDED (checker timed out)"}[c.result]
	s := fmt.Sprintf("%-16s %5d ops in %d products, at most %d open at once: %s (%.1fs)", c.name, c.ops, c.partitions, c.concurrent, verdict, c.elapsed.Seconds())
	if c.visual != "" {
		s += "; see " + c.visual
	}
	if c.explanation != "" {
		s += "\n" + c.explanation
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
		product := longest[0].Input.(stockInput).Product
		fmt.Fprintf(&b, "    product %d: a legal order of %d of its %d operations ends with\n", product, len(longest), sizes[i])
		for i := max(0, len(longest)-4); i < len(longest); i++ {
			o := longest[i]
			fmt.Fprintf(&b, "      [%.6f, %.6f] %s ⇒ %s\n", float64(o.Call)/1e9, float64(o.Return)/1e9, describeOp(o.Input, o.Output),
				model.DescribeState(states[i]))
		}
		b.WriteString("    and cannot go on: the stock it reaches contradicts what came next\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// checkHistory checks one history and, when it is not linearizable, writes Porcupine's
// visualisation to dir/<file>. The fast check runs first; the verbose one, which keeps every
// partial linearization for the picture, only when there is something to show.
func checkHistory(name string, model porcupine.Model, history []porcupine.Operation, timeout time.Duration,
	annotations []porcupine.Annotation, dir, file string) (checkResult, error) {
	res := checkResult{name: name, ops: len(history), partitions: len(model.Partition(history)), concurrent: concurrency(history)}
	began := time.Now()
	res.result = porcupine.CheckOperationsTimeout(model, history, timeout)
	res.elapsed = time.Since(began)
	if res.result != porcupine.Illegal || dir == "" {
		return res, nil
	}
	_, info := porcupine.CheckOperationsVerbose(model, history, timeout)
	var sizes []int
	for _, part := range model.Partition(history) {
		sizes = append(sizes, len(part))
	}
	res.explanation = explain(model, info, sizes)
	info.AddAnnotations(annotations)
	res.visual = filepath.Join(dir, file)
	if err := porcupine.VisualizePath(model, info, res.visual); err != nil {
		return res, fmt.Errorf("write visualisation %s: %w", res.visual, err)
	}
	return res, nil
}

// concurrency is the most operations open at once in a history (unknown ones count until the
// end): what makes Porcupine's search slow, so drills report it.
func concurrency(history []porcupine.Operation) int {
	type edge struct {
		t     int64
		delta int
	}
	edges := make([]edge, 0, 2*len(history))
	for _, o := range history {
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

// writeHistory writes the operations as text, one a line, for whoever investigates a run.
func writeHistory(path string, ops []*op) error {
	var b strings.Builder
	for _, p := range ops {
		fmt.Fprintf(&b, "%5d client %3d product %d [%.6f, %.6f] %s  %s\n", p.id, p.client, p.in.Product,
			p.invoke.Seconds(), p.ret.Seconds(), describeOp(p.in, p.out), p.describeAttempts())
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
	In        stockInput    `json:"in"`
	Out       stockOutput   `json:"out"`
	Invoke    time.Duration `json:"invoke_ns"`
	Return    time.Duration `json:"return_ns"`
	NotBefore time.Duration `json:"not_before_ns,omitempty"`
	Final     bool          `json:"final,omitempty"`
	Attempts  string        `json:"attempts"`
}

// saveHistory writes ops, and end, to path as JSON.
func saveHistory(path string, ops []*op, end time.Duration) error {
	saved := struct {
		End time.Duration `json:"end_ns"`
		Ops []savedOp     `json:"ops"`
	}{End: end}
	for _, p := range ops {
		saved.Ops = append(saved.Ops, savedOp{ID: p.id, Client: p.client, In: p.in, Out: p.out, Invoke: p.invoke, Return: p.ret,
			NotBefore: p.notBefore, Final: p.final, Attempts: p.describeAttempts()})
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

// loadHistory reads what saveHistory wrote.
func loadHistory(path string) ([]*op, time.Duration, error) {
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
	ops := make([]*op, len(saved.Ops))
	for i, s := range saved.Ops {
		ops[i] = &op{id: s.ID, client: s.Client, in: s.In, out: s.Out, invoke: s.Invoke, ret: s.Return, notBefore: s.NotBefore, final: s.Final}
	}
	return ops, saved.End, nil
}
