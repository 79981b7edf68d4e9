package stockhttp

import (
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
)

// Routes exposes every route of s, admin ones included, for the test that holds them to
// api/openapi.yaml.
func Routes(s *Server) chi.Routes { return s.router }

// ProblemStatuses is every problem code with its status, for the test that holds
// api/openapi.yaml to them.
func ProblemStatuses() map[string]int {
	statuses := make(map[string]int, len(problemTypes))
	for code, pt := range problemTypes {
		statuses[code] = pt.Status
	}
	return statuses
}

// ClientAddress is the key the rate limits of l count r under.
func ClientAddress(l Limits, r *http.Request) string {
	return newLimiter(l, prometheus.NewRegistry()).clientAddress(r)
}
