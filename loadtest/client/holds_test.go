package client

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
			cl := New([]string{srv.URL}, "admin", "t", time.Second, rec, RetryPolicy{Attempts: 3, Budget: 5 * time.Second, Pause: time.Millisecond})
			defer cl.Close()
			cl.Bearer = func(customer string) (string, error) { return "token-of-" + customer, nil }
			order := &model.Op{In: model.Input{Kind: model.KindOrder, Product: 7, Quantity: 1}, Out: model.Output{Outcome: model.Held},
				OrderID: "o-1", Customer: "c-1", Hold: true}
			p, bad := cl.Settle(context.Background(), order, c.kind)
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
