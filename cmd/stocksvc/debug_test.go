package main

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestServeDebug: the profiler answers on its own listener, and stops with its context.
func TestServeDebug(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveDebug(ctx, addr) }()
	var status int
	testenv.Poll(t, 10*time.Second, "the debug listener to answer", func() bool {
		res, err := http.Get("http://" + addr + "/debug/pprof/")
		if err != nil {
			return false
		}
		res.Body.Close()
		status = res.StatusCode
		return true
	})
	if status != http.StatusOK {
		t.Errorf("GET /debug/pprof/ = %d, want 200", status)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("serveDebug after cancel = %v, want nil", err)
	}
}
