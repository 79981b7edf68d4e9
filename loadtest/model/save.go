package model

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"
)

// A history beside its run: as text to read, as JSON to check again (-recheck).

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
