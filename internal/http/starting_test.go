package stockhttp_test

import (
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	stockhttp "github.com/stocksvc/stocksvc/internal/http"
)

// TestStarting: before the API exists, a replica is alive (/healthz) and refuses the rest
// with a 503 problem saying it is starting, with Retry-After and an X-Request-ID.
func TestStarting(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(stockhttp.Starting(slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)

	tests := []struct {
		method, path string
		wantStatus   int
	}{
		{http.MethodGet, "/healthz", http.StatusOK},
		{http.MethodHead, "/healthz", http.StatusOK},
		{http.MethodGet, "/readyz", http.StatusServiceUnavailable},
		{http.MethodGet, "/metrics", http.StatusServiceUnavailable},
		{http.MethodPost, "/v1/orders", http.StatusServiceUnavailable},
		{http.MethodGet, "/v1/products/1", http.StatusServiceUnavailable},
		{http.MethodPost, "/healthz", http.StatusServiceUnavailable},
		{http.MethodGet, "/no/such/route", http.StatusServiceUnavailable},
	}
	for _, tt := range tests {
		// The POSTs carry no body, so they break the document; whatever a starting replica is
		// asked, its answer must not.
		res, err := send(t.Context(), srv.Client(), request{Method: tt.method, URL: srv.URL + tt.path, Invalid: tt.method == http.MethodPost})
		if err != nil {
			t.Fatalf("%s %s: %v", tt.method, tt.path, err)
		}
		body := res.Body
		if res.Status != tt.wantStatus {
			t.Errorf("%s %s: status %d, want %d: %s", tt.method, tt.path, res.Status, tt.wantStatus, body)
		}
		if res.Header.Get("X-Request-ID") == "" {
			t.Errorf("%s %s: no X-Request-ID", tt.method, tt.path)
		}
		if tt.wantStatus != http.StatusServiceUnavailable {
			continue
		}
		var p struct {
			Status   int    `json:"status"`
			Code     string `json:"code"`
			Detail   string `json:"detail"`
			Instance string `json:"instance"`
		}
		if err := json.Unmarshal(body, &p); err != nil || p.Code != "unavailable" || p.Status != 503 ||
			!strings.Contains(p.Detail, "starting") || p.Instance != tt.path {
			t.Errorf("%s %s: body %s (err %v), want an unavailable problem saying it is starting", tt.method, tt.path, body, err)
		}
		if ct := res.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s %s: Content-Type %q", tt.method, tt.path, ct)
		}
		if res.Header.Get("Retry-After") == "" {
			t.Errorf("%s %s: no Retry-After", tt.method, tt.path)
		}
	}
}
