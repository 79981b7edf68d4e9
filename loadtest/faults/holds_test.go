package faults

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

// TestSettle: how a confirm's or a cancel's answers become the model's outcomes — the status a
// 200 names, the 409 codes, a lost answer retried until one comes, and an answer the contract
// does not allow reported as such.
func TestSettle(t *testing.T) {
	t.Parallel()
	type reply struct {
		status int
		body   string
	}
	cases := []struct {
		name    string
		kind    model.Kind
		replies []reply // in turn; the last one repeats
		want    model.Outcome
		bad     bool
	}{
		{"confirmed", model.KindConfirm, []reply{{200, `{"status":"confirmed"}`}}, model.Confirmed, false},
		{"too late", model.KindConfirm, []reply{{409, `{"code":"hold-expired"}`}}, model.HoldExpired, false},
		{"confirm of a cancelled order", model.KindConfirm, []reply{{409, `{"code":"order-cancelled"}`}}, model.OrderCancelled, false},
		{"cancelled", model.KindCancel, []reply{{200, `{"status":"cancelled"}`}}, model.Cancelled, false},
		{"cancel of an expired hold", model.KindCancel, []reply{{200, `{"status":"expired"}`}}, model.Expired, false},
		{"cancel of a confirmed order", model.KindCancel, []reply{{409, `{"code":"order-confirmed"}`}}, model.OrderConfirmed, false},
		{"a lost answer, then the answer", model.KindCancel, []reply{{503, `{"code":"unavailable"}`}, {200, `{"status":"cancelled"}`}}, model.Cancelled, false},
		{"never an answer", model.KindConfirm, []reply{{503, `{"code":"unavailable"}`}}, model.Unknown, false},
		{"busy all along", model.KindConfirm, []reply{{429, `{"code":"busy"}`}}, model.Refused, false},
		{"confirm answered cancelled with 200", model.KindConfirm, []reply{{200, `{"status":"cancelled"}`}}, model.Refused, true},
		{"an unknown order", model.KindCancel, []reply{{404, `{"code":"order-not-found"}`}}, model.Refused, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var n atomic.Int64
			var path atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				path.Store(r.Method + " " + r.URL.Path + " " + r.Header.Get("Authorization"))
				rp := c.replies[min(int(n.Add(1))-1, len(c.replies)-1)]
				if rp.status == 200 {
					w.Header().Set("Content-Type", "application/json")
				} else {
					w.Header().Set("Content-Type", "application/problem+json")
				}
				w.WriteHeader(rp.status)
				_, _ = w.Write([]byte(rp.body))
			}))
			defer srv.Close()
			rec := model.NewRecorder()
			cl := newDrillClient([]string{srv.URL}, "admin", "t", time.Second, rec, retryPolicy{attempts: 3, budget: 5 * time.Second, pause: time.Millisecond})
			defer cl.close()
			cl.bearer = func(customer string) (string, error) { return "token-of-" + customer, nil }
			order := &model.Op{In: model.Input{Kind: model.KindOrder, Product: 7, Quantity: 1}, Out: model.Output{Outcome: model.Held},
				OrderID: "o-1", Customer: "c-1", Hold: true}
			p, bad := cl.settle(context.Background(), order, c.kind)
			if p.Out.Outcome != c.want || (bad != "") != c.bad {
				t.Errorf("outcome %v, unexpected %q; want %v, unexpected %v", p.Out.Outcome, bad, c.want, c.bad)
			}
			verb := "confirm"
			if c.kind == model.KindCancel {
				verb = "cancel"
			}
			if got := path.Load().(string); got != "POST /v1/orders/o-1/"+verb+" Bearer token-of-c-1" {
				t.Errorf("request %q", got)
			}
			if p.In.Hold != "o-1" || p.In.Kind != c.kind || len(rec.Snapshot()) != 1 {
				t.Errorf("recorded %+v (%d operations)", p, len(rec.Snapshot()))
			}
			if strings.Contains(c.name, "lost") && len(p.Attempts) != 2 {
				t.Errorf("%d attempts, want 2", len(p.Attempts))
			}
		})
	}
}

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
