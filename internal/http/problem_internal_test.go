package stockhttp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// TestProblemPrecedence holds problemFor to the order its doc comment writes down: an outcome
// that is unknown is 503, whatever else the error holds; 429 only where nothing was written.
func TestProblemPrecedence(t *testing.T) {
	unknown := fmt.Errorf("%w: %w: commit batch: %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown, io.ErrUnexpectedEOF)
	lost := func(err error) error { return fmt.Errorf("%w: %w (lock: not held)", stock.ErrLockLost, err) }
	tests := []struct {
		name       string
		err        error
		wantStatus int
		wantCode   string
	}{
		{"lock lost while the commit's reply was lost", lost(unknown), 503, "unavailable"},
		{"busy, and the key could not be looked up", fmt.Errorf("%w: lookup failed after: %w", stock.ErrUnavailable, &stock.BusyError{RetryAfter: 1}), 503, "unavailable"},
		{"a deadline beside a lost lock", lost(context.DeadlineExceeded), 503, "unavailable"},
		{"Postgres down", fmt.Errorf("%w: read stock: connection refused", stock.ErrUnavailable), 503, "unavailable"},
		{"lock lost before the write", lost(fmt.Errorf("commit batch: %w", context.Canceled)), 429, "busy"},
		{"fence caught a lost lease", &stock.CaughtError{Layer: stock.LayerFence, Err: stock.ErrLockLost}, 429, "busy"},
		{"lock not obtained", &stock.BusyError{RetryAfter: 2}, 429, "busy"},
		{"sold out", &stock.SoldOutError{ProductID: 1, Requested: 2}, 409, "sold-out"},
		{"invalid", &stock.ValidationError{Field: "items", Reason: "must not be empty"}, 422, "invalid-request"},
		{"key reused", stock.ErrIdempotencyKeyReused, 422, "idempotency-key-reused"},
		{"anything else", errors.New("boom"), 500, "internal"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := problemFor(tt.err)
			if p.Status != tt.wantStatus || p.Code != tt.wantCode {
				t.Errorf("problemFor(%v) = %d %s, want %d %s", tt.err, p.Status, p.Code, tt.wantStatus, tt.wantCode)
			}
			if (p.Status == 503 || p.Status == 429) && p.retryAfter < 1 {
				t.Errorf("no Retry-After on %d", p.Status)
			}
		})
	}
}

// TestAuditIsAdminOnly: the audit recounts a product's orders, so only an operator may ask for
// it — and the routing refuses everyone else before the service is involved.
func TestAuditIsAdminOnly(t *testing.T) {
	s := New(Config{AdminToken: "secret-token-for-the-test"})
	for _, tt := range []struct {
		name    string
		handler http.Handler
		header  string
		want    int
	}{
		{"no token", s, "", http.StatusUnauthorized},
		{"wrong token", s, "Bearer nope", http.StatusUnauthorized},
		{"public listener", s.Public(), "Bearer secret-token-for-the-test", http.StatusNotFound},
	} {
		t.Run(tt.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "/v1/products/1/audit", nil)
			if tt.header != "" {
				req.Header.Set("Authorization", tt.header)
			}
			rec := httptest.NewRecorder()
			tt.handler.ServeHTTP(rec, req)
			if rec.Code != tt.want {
				t.Errorf("status = %d, want %d: %s", rec.Code, tt.want, rec.Body)
			}
		})
	}
}
