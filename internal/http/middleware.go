package stockhttp

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
)

type ctxKey int

const requestIDKey ctxKey = iota

// requestID returns the request id the middleware put in ctx.
func requestID(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey).(string)
	return id
}

// withRequestID keeps a sane incoming X-Request-ID (so ids follow a request through a load
// balancer) or makes one, and echoes it on every response.
func (s *Server) withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-ID")
		if !validRequestID(id) {
			id = uuid.NewString()
		}
		w.Header().Set("X-Request-ID", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey, id)))
	})
}

func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] <= ' ' || id[i] > '~' {
			return false
		}
	}
	return true
}

// withAccessLog logs one line per request and records the HTTP metrics.
func (s *Server) withAccessLog(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		ww := middleware.NewWrapResponseWriter(w, r.ProtoMajor)
		next.ServeHTTP(ww, r)
		elapsed := time.Since(start)
		route := "unmatched"
		if rc := chi.RouteContext(r.Context()); rc != nil && rc.RoutePattern() != "" {
			route = rc.RoutePattern()
		}
		status := ww.Status()
		if status == 0 {
			status = http.StatusOK
		}
		s.metrics.observe(r.Method, route, status, elapsed)
		s.log.LogAttrs(r.Context(), accessLevel(route, status), "request",
			slog.String("request_id", requestID(r.Context())),
			slog.String("method", r.Method),
			slog.String("route", route),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Int("bytes", ww.BytesWritten()),
			slog.Float64("duration_ms", float64(elapsed.Microseconds())/1000),
			slog.String("remote", r.RemoteAddr),
		)
	})
}

// machineRoutes are the routes machines call on a schedule: the orchestrator's probes and
// Prometheus's scrape. Each replica answers them every few seconds whether anyone buys or not;
// at INFO they were 70 % of a Compose replica's log in 11 minutes (issue #34, item 7).
var machineRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// accessLevel is the level of a request's access line: DEBUG for a machine route answered
// 2xx (STOCKSVC_LOG_LEVEL=debug shows them), INFO for every other request — a probe that fails,
// a replica not ready, is the line an operator looks for.
func accessLevel(route string, status int) slog.Level {
	if machineRoutes[route] && status < 300 {
		return slog.LevelDebug
	}
	return slog.LevelInfo
}

// withRecover turns a panic into a 500 problem, logged with its value, instead of a dropped
// connection. http.ErrAbortHandler keeps its meaning.
func (s *Server) withRecover(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			s.writeError(w, r, fmt.Errorf("panic: %v", v))
		}()
		next.ServeHTTP(w, r)
	})
}

// withTimeout bounds every API request; a ticket's long-poll is given its wait on top
// (longPoll).
func (s *Server) withTimeout(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), s.timeout+s.longPoll(w, r))
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// requireAdmin lets a request through only with the admin bearer token. A wrong token counts
// against its client address's admin failures, and while they are spent no token from the
// address is compared (429 rate-limited).
func (s *Server) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.adminDigest == nil {
			s.writeError(w, r, badRequest("admin-disabled", "admin routes are disabled: no admin token is configured"))
			return
		}
		admin := false
		if token, ok := bearer(r.Header.Get("Authorization")); ok {
			var err error
			if admin, err = s.admitAdmin(r, token); err != nil {
				s.writeError(w, r, err)
				return
			}
		}
		if !admin {
			w.Header().Set("WWW-Authenticate", `Bearer realm="stocksvc admin"`)
			s.writeError(w, r, badRequest("unauthorized", "a valid admin bearer token is required"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

func digest(s string) []byte {
	sum := sha256.Sum256([]byte(s))
	return sum[:]
}

type httpMetrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

func newHTTPMetrics(reg prometheus.Registerer) *httpMetrics {
	m := &httpMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "stocksvc_http_requests_total",
			Help: "HTTP requests by method, route pattern and status code.",
		}, []string{"method", "route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "stocksvc_http_request_duration_seconds",
			Help:    "HTTP request latency by method, route pattern and status code (a confirmed order's 201 apart from a sold-out 409).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"method", "route", "code"}),
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

func (m *httpMetrics) observe(method, route string, status int, elapsed time.Duration) {
	// Clients choose the method string; keep the label set bounded.
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions:
	default:
		method = "OTHER"
	}
	code := strconv.Itoa(status)
	m.requests.WithLabelValues(method, route, code).Inc()
	m.duration.WithLabelValues(method, route, code).Observe(elapsed.Seconds())
}
