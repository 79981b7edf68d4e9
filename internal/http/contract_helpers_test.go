package stockhttp_test

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// This file holds the helpers of the HTTP contract tests: typed request and response bodies,
// and the checks every response of the contract must pass.

// orderItem is one line of an order request or response.
type orderItem struct {
	ProductID int64 `json:"product_id"`
	Quantity  int64 `json:"quantity"`
}

// orderRequest is the body of POST /v1/orders.
type orderRequest struct {
	CustomerID string      `json:"customer_id"`
	Items      []orderItem `json:"items"`
}

func newOrder(customerID string, items ...orderItem) orderRequest {
	return orderRequest{CustomerID: customerID, Items: items}
}

// orderBody is an order as the API returns it.
type orderBody struct {
	ID         string      `json:"id"`
	CustomerID string      `json:"customer_id"`
	Status     string      `json:"status"`
	Items      []orderItem `json:"items"`
	CreatedAt  time.Time   `json:"created_at"`
	// Orders accepted for later only.
	DecidedAt *time.Time     `json:"decided_at"`
	Rejection *rejectionBody `json:"rejection"`
}

// rejectionBody is why an order accepted for later was rejected.
type rejectionBody struct {
	Code      string `json:"code"`
	ProductID int64  `json:"product_id"`
	Requested int64  `json:"requested"`
	Available *int64 `json:"available"`
}

// productBody is a product as the API returns it.
type productBody struct {
	ID        int64     `json:"id"`
	SKU       string    `json:"sku"`
	Name      string    `json:"name"`
	Stock     int64     `json:"stock"`
	Version   int64     `json:"version"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	// The sale rules; nil when the product has none.
	SaleStartsAt   *time.Time `json:"sale_starts_at"`
	SaleEndsAt     *time.Time `json:"sale_ends_at"`
	MaxPerCustomer *int64     `json:"max_per_customer"`
	HoldFor        *int64     `json:"hold_for"`
	// Every product has one.
	MaxHeldPerCustomer int64 `json:"max_held_per_customer"`
}

// problemBody is an RFC 9457 problem with the service's extension members.
type problemBody struct {
	Type      string `json:"type"`
	Title     string `json:"title"`
	Status    int    `json:"status"`
	Detail    string `json:"detail"`
	Code      string `json:"code"`
	Instance  string `json:"instance"`
	RequestID string `json:"request_id"`
	Field     string `json:"field"`
	ProductID int64  `json:"product_id"`
	Requested int64  `json:"requested"`
	Available *int64 `json:"available"`
	Prefer    string `json:"prefer"`
	// The sale rules' refusals.
	SaleStartsAt   *time.Time `json:"sale_starts_at"`
	SaleEndsAt     *time.Time `json:"sale_ends_at"`
	MaxPerCustomer int64      `json:"max_per_customer"`
	Bought         *int64     `json:"bought"`
	// hold-limit's.
	MaxHeldPerCustomer int64  `json:"max_held_per_customer"`
	Held               *int64 `json:"held"`
	// The line's refusals.
	Line          string     `json:"line"`
	TicketStatus  string     `json:"ticket_status"`
	Place         *int64     `json:"place"`
	Ahead         *int64     `json:"ahead"`
	AdmittedUntil *time.Time `json:"admitted_until"`
}

// contractStatus is the status the contract gives each problem code.
var contractStatus = map[string]int{
	"invalid-request":        http.StatusUnprocessableEntity,
	"malformed-json":         http.StatusBadRequest,
	"unsupported-media-type": http.StatusUnsupportedMediaType,
	"body-too-large":         http.StatusRequestEntityTooLarge,
	"unauthorized":           http.StatusUnauthorized,
	"admin-disabled":         http.StatusForbidden,
	"unauthenticated":        http.StatusUnauthorized,
	"customer-mismatch":      http.StatusForbidden,
	"product-not-found":      http.StatusNotFound,
	"order-not-found":        http.StatusNotFound,
	"not-found":              http.StatusNotFound,
	"method-not-allowed":     http.StatusMethodNotAllowed,
	"duplicate-sku":          http.StatusConflict,
	"sold-out":               http.StatusConflict,
	"sale-not-open":          http.StatusConflict,
	"sale-ended":             http.StatusConflict,
	"customer-limit":         http.StatusConflict,
	"hold-limit":             http.StatusConflict,
	"hold-expired":           http.StatusConflict,
	"order-cancelled":        http.StatusConflict,
	"order-confirmed":        http.StatusConflict,
	"not-admitted":           http.StatusConflict,
	"admission-expired":      http.StatusConflict,
	"admission-used":         http.StatusConflict,
	"invalid-ticket":         http.StatusBadRequest,
	"ticket-not-found":       http.StatusNotFound,
	"line-not-found":         http.StatusNotFound,
	"line-not-drawn":         http.StatusConflict,
	"idempotency-key-reused": http.StatusUnprocessableEntity,
	"rate-limited":           http.StatusTooManyRequests,
	"busy":                   http.StatusTooManyRequests,
	"unavailable":            http.StatusServiceUnavailable,
	"internal":               http.StatusInternalServerError,
}

// wantProblem checks that res is the problem the contract describes for code, answered to a
// request for path, and returns it for further checks. Status and code mismatches end the test:
// nothing after them would be meaningful.
func wantProblem(t testing.TB, res response, code, path string) problemBody {
	t.Helper()
	status, ok := contractStatus[code]
	if !ok {
		t.Fatalf("wantProblem: %q is not a contract code", code)
	}
	if res.Status != status {
		t.Fatalf("status = %d, want %d (%s); body: %s", res.Status, status, code, res.Body)
	}
	if got := res.Header.Get("Content-Type"); got != "application/problem+json" {
		t.Errorf("Content-Type = %q, want application/problem+json", got)
	}
	var p problemBody
	res.Decode(t, &p)
	if p.Code != code {
		t.Fatalf("code = %q, want %q; body: %s", p.Code, code, res.Body)
	}
	if want := "/problems/" + code; p.Type != want {
		t.Errorf("type = %q, want %q", p.Type, want)
	}
	if p.Status != status {
		t.Errorf("status member = %d, want %d", p.Status, status)
	}
	if p.Title == "" {
		t.Errorf("title is empty; body: %s", res.Body)
	}
	if p.Detail == "" {
		t.Errorf("detail is empty; body: %s", res.Body)
	}
	if p.Instance != path {
		t.Errorf("instance = %q, want %q", p.Instance, path)
	}
	id := res.Header.Get("X-Request-ID")
	if id == "" {
		t.Errorf("X-Request-ID header is missing")
	}
	// The request id travels in the header only, so that a replayed problem is byte for byte
	// the stored one.
	if p.RequestID != "" {
		t.Errorf("request_id %q in the body, want it in the X-Request-ID header only", p.RequestID)
	}
	return p
}

// wantJSON checks a successful JSON response and decodes its body into v (unless v is nil).
func wantJSON(t testing.TB, res response, status int, v any) {
	t.Helper()
	if res.Status != status {
		t.Fatalf("status = %d, want %d; body: %s", res.Status, status, res.Body)
	}
	if got := res.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q, want application/json", got)
	}
	if res.Header.Get("X-Request-ID") == "" {
		t.Errorf("X-Request-ID header is missing")
	}
	if v != nil {
		res.Decode(t, v)
	}
}

// wantHeader checks one response header.
func wantHeader(t testing.TB, res response, name, want string) {
	t.Helper()
	if got := res.Header.Get(name); got != want {
		t.Errorf("%s header = %q, want %q", name, got, want)
	}
}

// wantRetryAfter checks that res tells the client when to retry: a positive number of seconds.
func wantRetryAfter(t testing.TB, res response) {
	t.Helper()
	v := res.Header.Get("Retry-After")
	if n, err := strconv.Atoi(v); err != nil || n < 1 {
		t.Errorf("Retry-After = %q, want a positive number of seconds", v)
	}
}

// postOrder places an order on the replica at baseURL; header may be nil.
func postOrder(t testing.TB, baseURL string, body any, header map[string]string) response {
	t.Helper()
	return call(t, request{Method: http.MethodPost, URL: baseURL + "/v1/orders", Body: body, Header: header})
}

// getProduct reads a product, which must exist.
func getProduct(t testing.TB, baseURL string, id int64) productBody {
	t.Helper()
	var p productBody
	wantJSON(t, call(t, request{Method: http.MethodGet, URL: baseURL + "/v1/products/" + itoa(id)}), http.StatusOK, &p)
	return p
}

// wantUntouched checks that product id still has all its stock and has sold nothing.
func wantUntouched(t testing.TB, baseURL string, id, stockUnits int64) {
	t.Helper()
	want := auditBody{ProductID: id, Stock: stockUnits, Received: stockUnits, Sold: 0, Consistent: true}
	if got := audit(t, baseURL, id); got != want {
		t.Errorf("audit of product %d = %+v, want %+v", id, got, want)
	}
}

// holdLock takes the named lock in the replica's Redis as another process would, and gives it
// back when the test ends or when the returned function is called.
func holdLock(t testing.TB, in *instance, name string, opt *lock.Options) (release func()) {
	t.Helper()
	l, err := lock.New(in.Redis).Obtain(context.Background(), name, time.Minute, opt)
	if err != nil {
		t.Fatalf("obtain %s: %v", name, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			if err := l.Release(context.Background()); err != nil {
				t.Errorf("release %s: %v", name, err)
			}
		})
	}
	t.Cleanup(release)
	return release
}

// deadEndpoint returns the address of a Postgres or Redis that is down (testenv.DeadEndpoint).
func deadEndpoint(t testing.TB) string { return testenv.DeadEndpoint(t) }

// repeat returns s n times; shorthand for building over-long fields.
func repeat(s string, n int) string { return strings.Repeat(s, n) }
