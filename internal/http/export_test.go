package stockhttp

import "github.com/go-chi/chi/v5"

// Routes exposes every route of s, admin ones included, for the test that holds them to
// api/openapi.yaml.
func Routes(s *Server) chi.Routes { return s.router }
