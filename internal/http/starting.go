package stockhttp

import (
	"log/slog"
	"net/http"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
)

// Starting returns what a replica serves while it waits for Postgres and Redis and migrates,
// before the API is built. /healthz answers 200: the process is alive, and restarting it would
// not bring its database any sooner. Everything else, /readyz included, answers 503
// unavailable with Retry-After, so that a balancer sends it nothing yet. Every response
// carries an X-Request-ID, as the API's do.
func Starting(log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{log: log}
	notYet := func(w http.ResponseWriter, r *http.Request) {
		p := newProblem("unavailable", "not ready: starting up (waiting for Postgres and Redis, migrating)")
		p.Instance = r.URL.Path
		p.retryAfter = 1
		writeProblem(w, p)
	}
	r := chi.NewRouter()
	r.Use(s.withRequestID, middleware.GetHead)
	r.Get("/healthz", s.handleHealth)
	r.NotFound(notYet)
	r.MethodNotAllowed(notYet)
	return r
}
