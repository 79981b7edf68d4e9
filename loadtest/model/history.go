// Package model is the drills' model of the stock and their history: every operation the
// clients made (Op, collected by a Recorder), with the time it was invoked and the time its
// answer came back, checked by Porcupine against a sequential specification of each product's
// stock (New). A history is saved beside its run (Save, WriteText) and can be checked again
// later (Load).
package model

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

// Kind is what a client asked for.
type Kind uint8

const (
	// KindCreate is the product's creation: it sets the stock the model starts from.
	KindCreate Kind = iota + 1
	KindOrder
	KindRestock
	KindRead
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
	}
	return "outcome(" + strconv.Itoa(int(o)) + ")"
}

// Input is an operation's input in the model.
type Input struct {
	Kind     Kind
	Product  int64
	Quantity int64 // units ordered or restocked
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
}

// Options tune what the model demands.
type Options struct {
	// ExactAvailable: a sold-out answer's "available" must equal the stock at the moment the
	// refusal took effect. Sound when the service reports a stock it read during the request
	// (the pre-check, or the read under the lock), as it does today; without it, a sold-out
	// needs only the stock to be short.
	ExactAvailable bool
}

// New returns the sequential specification of one product, one partition per product:
// a confirmed order needs the stock and takes it, a sold-out answer needs it short, a restock
// adds to it (and a confirmed restock answers the sum), a read returns it, and an operation
// whose outcome is unknown may have happened or not. The state is the stock; stateUnset is
// a product not created yet.
func New(o Options) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: partitionByProduct,
		Init:      func() []any { return []any{stateUnset} },
		Step: func(state, input, output any) []any {
			return stepStock(o, state.(int64), input.(Input), output.(Output))
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
func stepStock(o Options, s int64, in Input, out Output) []any {
	if in.Kind == KindCreate {
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
	case KindOrder:
		switch out.Outcome {
		case Confirmed, Happened:
			if s >= q {
				return []any{s - q}
			}
		case SoldOut:
			if s < q && (!o.ExactAvailable || !out.HasAvailable || out.Available == s) {
				return []any{s}
			}
		case Refused:
			return []any{s}
		case Unknown:
			if s >= q {
				return []any{s - q, s}
			}
			return []any{s}
		}
	case KindRestock:
		switch out.Outcome {
		case Confirmed:
			if s+q == out.Stock {
				return []any{s + q}
			}
		case Refused:
			return []any{s}
		case Unknown:
			return []any{s + q, s}
		}
	case KindRead:
		if s == out.Stock {
			return []any{s}
		}
	}
	return nil
}

func describeOp(input, output any) string {
	in, out := input.(Input), output.(Output)
	switch in.Kind {
	case KindCreate:
		return fmt.Sprintf("create(%d)", out.Stock)
	case KindOrder:
		if out.Outcome == SoldOut && out.HasAvailable {
			return fmt.Sprintf("order(%d) → sold-out, %d available", in.Quantity, out.Available)
		}
		return fmt.Sprintf("order(%d) → %s", in.Quantity, out.Outcome)
	case KindRestock:
		if out.Outcome == Confirmed {
			return fmt.Sprintf("restock(%d) → %d", in.Quantity, out.Stock)
		}
		return fmt.Sprintf("restock(%d) → %s", in.Quantity, out.Outcome)
	case KindRead:
		return fmt.Sprintf("read → %d", out.Stock)
	}
	return "?"
}

func partitionByProduct(history []porcupine.Operation) [][]porcupine.Operation {
	byProduct := map[int64][]porcupine.Operation{}
	var ids []int64
	for _, op := range history {
		id := op.Input.(Input).Product
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

// Attempt is one HTTP request of an operation.
type Attempt struct {
	Start, End time.Duration // since the recorder's start
	Status     int           // 0: no answer (timeout, connection error)
	Code       string        // the problem code, when the answer was one
	Replica    bool          // the answer came from a replica (problem+json or JSON), not the balancer
	Err        string
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
	// RefusedButSold marks an order refused to its client (429) that the database holds: a
	// violation, checked by the model as an order that happened (see verdict.Orders).
	RefusedButSold bool
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
}

// History turns operations into Porcupine's form. Operations that were refused, and
// unknown orders the database shows never happened, change nothing and are left out.
func History(ops []*Op, o HistoryOptions) []porcupine.Operation {
	var out []porcupine.Operation
	for _, p := range ops {
		if p.Out.Outcome == Refused || (p.In.Kind == KindRead && !o.Reads && !p.Final) {
			continue
		}
		call, ret := p.Invoke, p.Return
		if p.NotBefore > call && (p.NotBefore <= ret || p.Out.Outcome == Happened) {
			call = p.NotBefore
		}
		switch {
		case p.Out.Outcome == Unknown || p.Out.Outcome == Happened:
			ret = o.End
		case p.In.Kind == KindRead:
			call = max(0, call-o.ReadSlack)
		}
		out = append(out, porcupine.Operation{
			ClientId: p.Client,
			Input:    p.In,
			Call:     int64(call),
			Output:   p.Out,
			Return:   int64(ret),
			Metadata: p.DescribeAttempts(),
		})
	}
	return out
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

// CheckResult is the verdict on one history.
type CheckResult struct {
	Name       string // "orders+restocks" or "with reads"
	Ops        int
	Partitions int
	Concurrent int // the most operations open at once
	Result     porcupine.CheckResult
	Elapsed    time.Duration
	Visual     string // HTML visualisation, written when the history is not linearizable
	// Explanation says in words where the search got stuck: the end of the longest legal
	// prefix, and the operations none of whose placements fit.
	Explanation string
}

// String is the verdict on one line, with the picture's path and the explanation after it.
func (c CheckResult) String() string {
	verdict := map[porcupine.CheckResult]string{porcupine.Ok: "linearizable", porcupine.Illegal: "NOT LINEARIZABLE",
		porcupine.Unknown: "UNDECIDED (checker timed out)"}[c.Result]
	s := fmt.Sprintf("%-16s %5d ops in %d products, at most %d open at once: %s (%.1fs)", c.Name, c.Ops, c.Partitions, c.Concurrent, verdict, c.Elapsed.Seconds())
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
		product := longest[0].Input.(Input).Product
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

// Check checks one history and, when it is not linearizable, writes Porcupine's
// visualisation to dir/<file>. The fast check runs first; the verbose one, which keeps every
// partial linearization for the picture, only when there is something to show.
func Check(name string, model porcupine.Model, history []porcupine.Operation, timeout time.Duration,
	annotations []porcupine.Annotation, dir, file string) (CheckResult, error) {
	res := CheckResult{Name: name, Ops: len(history), Partitions: len(model.Partition(history)), Concurrent: concurrency(history)}
	began := time.Now()
	res.Result = porcupine.CheckOperationsTimeout(model, history, timeout)
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
	Final     bool          `json:"final,omitempty"`
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
			NotBefore: p.NotBefore, Final: p.Final, Attempts: p.DescribeAttempts()})
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
		ops[i] = &Op{ID: s.ID, Client: s.Client, In: s.In, Out: s.Out, Invoke: s.Invoke, Return: s.Return, NotBefore: s.NotBefore, Final: s.Final}
	}
	return ops, saved.End, nil
}
