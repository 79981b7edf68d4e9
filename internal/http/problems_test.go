package stockhttp_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// TestErrorsBecomeProblems sends each error the service can answer through a handler and holds
// the response to the problem the contract describes for it: status, code, the RFC 9457 shape,
// the extension members, Retry-After and Idempotent-Replayed. Each branch of problemFor, and
// what writeError adds, is a row; the order problemFor reads an error in is
// TestProblemPrecedence's.
func TestErrorsBecomeProblems(t *testing.T) {
	t.Parallel()
	order := request{Method: http.MethodPost, URL: "/v1/orders", Body: newOrder("c", orderItem{1, 1})}
	keyedOrder := order
	keyedOrder.Header = keyHeader("k-1")
	createProduct := request{Method: http.MethodPost, URL: "/v1/products", Header: adminHeader(),
		Body: map[string]any{"sku": "s", "name": "n", "stock": 1}}
	getProduct := request{Method: http.MethodGet, URL: "/v1/products/1"}
	getOrder := request{Method: http.MethodGet, URL: "/v1/orders/" + uuid.NewString()}

	tests := []struct {
		name    string
		err     error
		req     request
		noQueue bool
		code    string
		// retryAfter is the Retry-After header wanted ("" for none).
		retryAfter string
		replayed   bool
		check      func(t *testing.T, p problemBody)
	}{
		{name: "invalid", err: &stock.ValidationError{Field: "items", Reason: "must not be empty"}, req: order, code: "invalid-request",
			check: func(t *testing.T, p problemBody) {
				if p.Field != "items" || !strings.Contains(p.Detail, "must not be empty") {
					t.Errorf("field %q, detail %q; want items, and the rule", p.Field, p.Detail)
				}
			}},
		{name: "sold out", err: &stock.SoldOutError{ProductID: 7, Requested: 3, Available: 1}, req: order, code: "sold-out",
			check: wantShort(7, 3, 1)},
		{name: "sold out, none left", err: &stock.SoldOutError{ProductID: 7, Requested: 1}, req: order, code: "sold-out",
			check: wantShort(7, 1, 0)},
		{name: "sold out, replayed", err: &stock.SoldOutError{ProductID: 7, Requested: 3, Available: 1, Replayed: true}, req: keyedOrder,
			code: "sold-out", replayed: true, check: wantShort(7, 3, 1)},
		{name: "product not found, named", err: fmt.Errorf("decide: %w", &stock.ProductNotFoundError{ProductID: 9}), req: order, code: "product-not-found",
			check: func(t *testing.T, p problemBody) {
				if p.ProductID != 9 {
					t.Errorf("product_id = %d, want 9", p.ProductID)
				}
			}},
		{name: "product not found", err: stock.ErrProductNotFound, req: getProduct, code: "product-not-found",
			check: func(t *testing.T, p problemBody) {
				if p.ProductID != 0 {
					t.Errorf("product_id = %d, want none", p.ProductID)
				}
			}},
		{name: "order not found", err: stock.ErrOrderNotFound, req: getOrder, noQueue: true, code: "order-not-found"},
		{name: "duplicate sku", err: stock.ErrDuplicateSKU, req: createProduct, code: "duplicate-sku"},
		{name: "key reused", err: stock.ErrIdempotencyKeyReused, req: keyedOrder, code: "idempotency-key-reused"},
		{name: "outcome unknown", err: fmt.Errorf("%w: %w: commit", stock.ErrUnavailable, stock.ErrOutcomeUnknown), req: keyedOrder,
			code: "unavailable", retryAfter: "2", check: wantDetail("unknown", "Idempotency-Key")},
		{name: "unavailable, with a key", err: fmt.Errorf("%w: read stock", stock.ErrUnavailable), req: keyedOrder,
			code: "unavailable", retryAfter: "2", check: wantDetail("Idempotency-Key")},
		{name: "unavailable, without a key", err: fmt.Errorf("%w: read stock", stock.ErrUnavailable), req: order,
			code: "unavailable", retryAfter: "2", check: wantNoDetail("Idempotency-Key")},
		{name: "unavailable, a read", err: stock.ErrUnavailable, req: getProduct, code: "unavailable", retryAfter: "2",
			check: wantNoDetail("Idempotency-Key")},
		{name: "deadline", err: fmt.Errorf("lock: %w", context.DeadlineExceeded), req: order, code: "unavailable", retryAfter: "2"},
		{name: "busy, with a hint", err: &stock.BusyError{RetryAfter: 1500 * time.Millisecond}, req: order, code: "busy", retryAfter: "2",
			check: wantPrefer("")},
		{name: "busy, a short hint", err: &stock.BusyError{RetryAfter: 10 * time.Millisecond}, req: order, code: "busy", retryAfter: "1"},
		{name: "busy, shed, with a queue", err: &stock.BusyError{RetryAfter: 300 * time.Millisecond, Shed: true}, req: order, code: "busy",
			retryAfter: "1", check: func(t *testing.T, p problemBody) {
				wantPrefer("respond-async")(t, p)
				wantDetail("Prefer: respond-async")(t, p)
			}},
		{name: "busy, shed, no queue", err: &stock.BusyError{RetryAfter: 300 * time.Millisecond, Shed: true}, req: order, noQueue: true,
			code: "busy", retryAfter: "1", check: wantPrefer("")},
		{name: "busy", err: fmt.Errorf("conflicts: %w", stock.ErrBusy), req: order, code: "busy", retryAfter: "1"},
		{name: "lock lost", err: &stock.CaughtError{Layer: stock.LayerFence, Err: stock.ErrLockLost}, req: order, code: "busy", retryAfter: "1"},
		{name: "anything else", err: errors.New("boom"), req: order, code: "internal",
			check: wantNoDetail("boom")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := newFakeInstance(t, fakeOptions{serviceErr: tt.err, noQueue: tt.noQueue})
			req := tt.req
			path := req.URL
			req.URL = in.URL + path
			res := call(t, req)
			p := wantProblem(t, res, tt.code, path)
			wantHeader(t, res, "Retry-After", tt.retryAfter)
			want := ""
			if tt.replayed {
				want = "true"
			}
			wantHeader(t, res, "Idempotent-Replayed", want)
			if tt.check != nil {
				tt.check(t, p)
			}
		})
	}
}

// wantShort checks a sold-out problem's figures.
func wantShort(product, requested, available int64) func(*testing.T, problemBody) {
	return func(t *testing.T, p problemBody) {
		t.Helper()
		if p.ProductID != product || p.Requested != requested || p.Available == nil || *p.Available != available {
			t.Errorf("sold-out names product %d, requested %d, available %v; want %d, %d, %d",
				p.ProductID, p.Requested, p.Available, product, requested, available)
		}
	}
}

func wantDetail(parts ...string) func(*testing.T, problemBody) {
	return func(t *testing.T, p problemBody) {
		t.Helper()
		for _, part := range parts {
			if !strings.Contains(p.Detail, part) {
				t.Errorf("detail %q, want it to mention %q", p.Detail, part)
			}
		}
	}
}

func wantNoDetail(part string) func(*testing.T, problemBody) {
	return func(t *testing.T, p problemBody) {
		t.Helper()
		if strings.Contains(p.Detail, part) {
			t.Errorf("detail %q mentions %q", p.Detail, part)
		}
	}
}

func wantPrefer(want string) func(*testing.T, problemBody) {
	return func(t *testing.T, p problemBody) {
		t.Helper()
		if p.Prefer != want {
			t.Errorf("prefer = %q, want %q", p.Prefer, want)
		}
	}
}
