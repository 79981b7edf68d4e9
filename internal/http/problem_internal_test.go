package stockhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stocksvc/stocksvc/internal/line"
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

// TestProblemForEveryBranch holds each branch of problemFor to its problem: the code, the
// status its problem type gives, Retry-After, and the members the branch fills in.
func TestProblemForEveryBranch(t *testing.T) {
	available := func(n int64) *int64 { return &n }
	tests := []struct {
		name string
		err  error
		want problem // Type, Title and Detail are checked apart
	}{
		{"found by the transport", &requestError{code: "malformed-json", detail: "cut short", field: "items", err: io.ErrUnexpectedEOF},
			problem{Code: "malformed-json", Status: 400, Field: "items"}},
		{"found by the transport, whatever it wraps", &requestError{code: "body-too-large", detail: "too big", err: stock.ErrUnavailable},
			problem{Code: "body-too-large", Status: 413}},
		{"invalid", fmt.Errorf("order: %w", &stock.ValidationError{Field: "customer_id", Reason: "must not be empty"}),
			problem{Code: "invalid-request", Status: 422, Field: "customer_id"}},
		{"sold out", &stock.SoldOutError{ProductID: 3, Requested: 2, Available: 1},
			problem{Code: "sold-out", Status: 409, ProductID: 3, Requested: 2, Available: available(1)}},
		{"sold out, replayed", &stock.SoldOutError{ProductID: 3, Requested: 2, Replayed: true},
			problem{Code: "sold-out", Status: 409, ProductID: 3, Requested: 2, Available: available(0), replayed: true}},
		{"sold out beside unavailable: the outcome is known", fmt.Errorf("%w: %w", stock.ErrUnavailable, &stock.SoldOutError{ProductID: 3, Requested: 2}),
			problem{Code: "sold-out", Status: 409, ProductID: 3, Requested: 2, Available: available(0)}},
		{"product not found, named", &stock.ProductNotFoundError{ProductID: 8},
			problem{Code: "product-not-found", Status: 404, ProductID: 8}},
		{"product not found", stock.ErrProductNotFound, problem{Code: "product-not-found", Status: 404}},
		{"order not found", stock.ErrOrderNotFound, problem{Code: "order-not-found", Status: 404}},
		{"duplicate sku", fmt.Errorf("insert: %w", stock.ErrDuplicateSKU), problem{Code: "duplicate-sku", Status: 409}},
		{"key reused", stock.ErrIdempotencyKeyReused, problem{Code: "idempotency-key-reused", Status: 422}},
		{"outcome unknown", fmt.Errorf("%w: %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown),
			problem{Code: "unavailable", Status: 503, retryAfter: 2}},
		{"unavailable", stock.ErrUnavailable, problem{Code: "unavailable", Status: 503, retryAfter: 2}},
		{"deadline", context.DeadlineExceeded, problem{Code: "unavailable", Status: 503, retryAfter: 2}},
		{"busy, rounded up to whole seconds", &stock.BusyError{RetryAfter: 2100 * time.Millisecond},
			problem{Code: "busy", Status: 429, retryAfter: 3}},
		{"busy, at least a second", &stock.BusyError{}, problem{Code: "busy", Status: 429, retryAfter: 1}},
		{"busy", stock.ErrBusy, problem{Code: "busy", Status: 429, retryAfter: 1}},
		{"lock lost", stock.ErrLockLost, problem{Code: "busy", Status: 429, retryAfter: 1}},
		{"not admitted", fmt.Errorf("check: %w", &line.NotAdmittedError{ProductID: 4, Reason: "no pass"}),
			problem{Code: "not-admitted", Status: 409, ProductID: 4, Line: "/v1/products/4/line"}},
		{"not admitted, where the ticket stands", &line.NotAdmittedError{ProductID: 4, Reason: "no pass",
			Status: &line.Status{State: line.Waiting, Place: 9, Ahead: 3}},
			problem{Code: "not-admitted", Status: 409, ProductID: 4, Line: "/v1/products/4/line", TicketStatus: "waiting", Place: available(9), Ahead: available(3)}},
		{"not admitted, a ticket not placed yet", &line.NotAdmittedError{ProductID: 4, Reason: "no pass",
			Status: &line.Status{State: line.Queued}},
			problem{Code: "not-admitted", Status: 409, ProductID: 4, Line: "/v1/products/4/line", TicketStatus: "queued"}},
		{"admission expired", &line.AdmissionExpiredError{ProductID: 4, Until: time.Unix(100, 0)},
			problem{Code: "admission-expired", Status: 409, ProductID: 4, AdmittedUntil: ptrTime(time.Unix(100, 0).UTC())}},
		{"admission used", &line.AdmissionUsedError{ProductID: 4}, problem{Code: "admission-used", Status: 409, ProductID: 4}},
		{"invalid ticket", line.ErrInvalidTicket, problem{Code: "invalid-ticket", Status: 400}},
		{"ticket not found", line.ErrTicketNotFound, problem{Code: "ticket-not-found", Status: 404}},
		{"no line", line.ErrNoLine, problem{Code: "line-not-found", Status: 404}},
		{"not drawn", line.ErrNotDrawn, problem{Code: "line-not-drawn", Status: 409}},
		{"the line's store unavailable", fmt.Errorf("%w: read", line.ErrUnavailable), problem{Code: "unavailable", Status: 503, retryAfter: 2}},
		{"anything else", errors.New("boom"), problem{Code: "internal", Status: 500}},
		{"cancelled, with the client still there", context.Canceled, problem{Code: "internal", Status: 500}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := problemFor(tt.err)
			if got.Type != "/problems/"+got.Code || got.Title != problemTypes[got.Code].Title || got.Detail == "" {
				t.Errorf("type %q, title %q, detail %q: want the code's type and title, and a detail", got.Type, got.Title, got.Detail)
			}
			got.Type, got.Title, got.Detail = "", "", ""
			if diff := cmp.Diff(*got, tt.want, cmp.AllowUnexported(problem{})); diff != "" {
				t.Errorf("problemFor(%v) mismatch (-got +want):\n%s", tt.err, diff)
			}
		})
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

// TestWriteErrorClientGone: a request its client cancelled is answered 503 unavailable (nobody
// reads it) and not logged as a server failure; a cancellation that is not the client's is.
func TestWriteErrorClientGone(t *testing.T) {
	var logged bytes.Buffer
	s := New(Config{Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rec := httptest.NewRecorder()
	s.writeError(rec, httptest.NewRequestWithContext(ctx, http.MethodPost, "/v1/orders", nil), fmt.Errorf("queued: %w", context.Canceled))
	if rec.Code != http.StatusServiceUnavailable || !strings.Contains(rec.Body.String(), `"code":"unavailable"`) {
		t.Errorf("client gone: %d %s, want 503 unavailable", rec.Code, rec.Body)
	}
	if logged.Len() != 0 {
		t.Errorf("client gone: logged %q, want nothing at info and above", logged.String())
	}

	rec = httptest.NewRecorder()
	s.writeError(rec, httptest.NewRequest(http.MethodPost, "/v1/orders", nil), fmt.Errorf("queued: %w", context.Canceled))
	if rec.Code != http.StatusInternalServerError || !strings.Contains(logged.String(), "request failed") || !strings.Contains(logged.String(), "queued: context canceled") {
		t.Errorf("cancelled on the server's side: %d, logged %q; want 500 logged with its chain", rec.Code, logged.String())
	}
}
