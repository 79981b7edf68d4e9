package client

import (
	"net/http"
	"testing"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

// TestRuleRefusals: the sale rules' refusals decide an order (no retry) and mean what the
// model says; a 409 without a known code is not one of them.
func TestRuleRefusals(t *testing.T) {
	t.Parallel()
	cases := []struct {
		code string
		kind attemptKind
		want model.Outcome
	}{
		{"sold-out", attemptDone, model.SoldOut},
		{"sale-not-open", attemptDone, model.NotOpen},
		{"sale-ended", attemptDone, model.Ended},
		{"customer-limit", attemptDone, model.OverLimit},
		{"idempotency-key-in-flight", attemptNoEffect, 0},
		{"something-else", attemptUnexpected, 0},
	}
	for _, c := range cases {
		a := answer{status: http.StatusConflict, contentType: "application/problem+json", body: []byte(`{"code":"` + c.code + `"}`)}
		if got := classify(a, http.StatusCreated); got != c.kind {
			t.Errorf("classify(409 %s) = %v, want %v", c.code, got, c.kind)
		}
		if c.kind == attemptDone {
			if got := refusalOutcome(c.code); got != c.want {
				t.Errorf("refusalOutcome(%s) = %v, want %v", c.code, got, c.want)
			}
		}
	}
}
