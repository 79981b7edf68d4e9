package main

import (
	"context"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
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

// TestServeDebugLeavesOutCmdline: the profiler does not show the process's command line, whose
// flags can carry secrets (-database-url, -admin-token); the profiles still answer.
func TestServeDebugLeavesOutCmdline(t *testing.T) {
	t.Parallel()
	addr := "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serveDebug(ctx, addr) }()
	defer func() {
		cancel()
		<-done
	}()
	get := func(path string) (int, string) {
		res, err := http.Get("http://" + addr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer res.Body.Close()
		body, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(body)
	}
	testenv.Poll(t, 10*time.Second, "the debug listener to answer", func() bool {
		status, _ := get("/debug/pprof/")
		return status != 0
	})
	if status, body := get("/debug/pprof/cmdline"); status != http.StatusNotFound || strings.Contains(body, os.Args[0]) {
		t.Errorf("GET /debug/pprof/cmdline = %d %q, want 404 without the command line", status, body)
	}
	if status, _ := get("/debug/pprof/heap?debug=1"); status != http.StatusOK {
		t.Errorf("GET /debug/pprof/heap = %d, want 200", status)
	}
}
