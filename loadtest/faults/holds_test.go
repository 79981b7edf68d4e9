package faults

import (
	"sync/atomic"
	"testing"
)

// TestHoldsGate: the gate admits holdsGateSize operations at once, counts what it turns away,
// and admits again once one leaves — under concurrent callers too.
func TestHoldsGate(t *testing.T) {
	t.Parallel()
	var g holdsGate
	for i := range holdsGateSize {
		if !g.enter() {
			t.Fatalf("operation %d of %d turned away", i+1, holdsGateSize)
		}
	}
	if g.enter() {
		t.Fatalf("operation %d admitted beyond the gate's %d", holdsGateSize+1, holdsGateSize)
	}
	g.leave()
	if !g.enter() {
		t.Fatal("not admitted after one left")
	}
	if got := g.skipped.Load(); got != 1 {
		t.Errorf("skipped = %d, want 1", got)
	}
	for range holdsGateSize {
		g.leave()
	}
	// Concurrent callers: never more than holdsGateSize inside at once.
	var inside, most atomic.Int64
	done := make(chan struct{})
	for range 64 {
		go func() {
			defer func() { done <- struct{}{} }()
			for range 200 {
				if !g.enter() {
					continue
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				inside.Add(-1)
				g.leave()
			}
		}()
	}
	for range 64 {
		<-done
	}
	if m := most.Load(); m > holdsGateSize {
		t.Errorf("%d operations inside at once, gate of %d", m, holdsGateSize)
	}
}
