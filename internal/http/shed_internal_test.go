package stockhttp

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// An order turned away because its product's queue was full is told that the asynchronous
// route would have queued it — only then, and only when this server has a queue.
func TestShedOrdersArePointedAtTheQueue(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		queue      bool
		wantPrefer string
	}{
		{"queue full, queue on", &stock.BusyError{RetryAfter: 300 * time.Millisecond, Shed: true}, true, "respond-async"},
		{"queue full, no queue", &stock.BusyError{RetryAfter: 300 * time.Millisecond, Shed: true}, false, ""},
		{"lock busy", &stock.BusyError{RetryAfter: 2 * time.Second}, true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := New(Config{})
			if tt.queue {
				s.queue = new(async.Queue) // only its presence is read
			}
			rec := httptest.NewRecorder()
			s.writeError(rec, httptest.NewRequest(http.MethodPost, "/v1/orders", nil), tt.err)
			var p problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("decode: %v", err)
			}
			if rec.Code != http.StatusTooManyRequests || p.Code != "busy" || p.Prefer != tt.wantPrefer {
				t.Errorf("answer = %d %s prefer %q, want 429 busy prefer %q", rec.Code, p.Code, p.Prefer, tt.wantPrefer)
			}
			if rec.Header().Get("Retry-After") == "" {
				t.Errorf("no Retry-After")
			}
		})
	}
}
