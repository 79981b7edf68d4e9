package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// serveDebug serves the Go profiler on addr until ctx ends: what a CPU profile of a replica
// under load is taken from (go run -C loadtest . -throughput does). It has its own mux, so nothing
// is registered on http.DefaultServeMux, and its own listener, bound to loopback (the
// configuration refuses any other address): profiles show the service's internals.
//
// /debug/pprof/cmdline is left out: it shows the command line, and flags can carry secrets
// (-database-url, -admin-token). Index answers it 404 like any unknown profile.
func serveDebug(ctx context.Context, addr string) error {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug listener on %s: %w", addr, err)
	}
	// Profiles run for as long as asked (?seconds=), so no write timeout.
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("debug listener: %w", err)
	}
	return nil
}
