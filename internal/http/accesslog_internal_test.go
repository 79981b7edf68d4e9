package stockhttp

import (
	"bytes"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// TestProbesLoggedAtDebug: a probe or a scrape answered 2xx is logged at DEBUG, so that an INFO
// log holds what people do; a failed probe and every other request stay at INFO (issue #34,
// item 7).
func TestProbesLoggedAtDebug(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		s := &Server{log: slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})), metrics: newHTTPMetrics(prometheus.NewRegistry())}
		ready := http.StatusOK
		r := chi.NewRouter()
		r.Use(s.withAccessLog)
		answer := func(code *int) http.HandlerFunc {
			return func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(*code) }
		}
		ok := http.StatusOK
		r.Get("/healthz", answer(&ok))
		r.Get("/readyz", answer(&ready))
		r.Get("/metrics", answer(&ok))
		r.Get("/v1/products/{id}", answer(&ok))
		get := func(path string) {
			r.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, path, nil))
		}
		get("/healthz")
		get("/readyz")
		get("/metrics")
		get("/v1/products/1")
		ready = http.StatusServiceUnavailable
		get("/readyz")

		var got []string
		for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
			for _, f := range []string{`"level":"INFO","msg":"request"`, `"level":"DEBUG","msg":"request"`} {
				if strings.Contains(line, f) {
					route := line[strings.Index(line, `"route":"`)+9:]
					got = append(got, f[9:13]+" "+route[:strings.Index(route, `"`)])
				}
			}
		}
		want := "INFO /v1/products/{id},INFO /readyz"
		if level == slog.LevelDebug {
			want = "DEBU /healthz,DEBU /readyz,DEBU /metrics,INFO /v1/products/{id},INFO /readyz"
		}
		if g := strings.Join(got, ","); g != want {
			t.Errorf("at %v, logged %q; want %q", level, g, want)
		}
	}
}
