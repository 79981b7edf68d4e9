package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestLocalURL(t *testing.T) {
	t.Parallel()
	tests := []struct{ addr, want string }{
		{":8080", "http://127.0.0.1:8080/readyz"},
		{"0.0.0.0:8080", "http://127.0.0.1:8080/readyz"},
		{"[::]:8080", "http://[::1]:8080/readyz"},
		{"127.0.0.1:9000", "http://127.0.0.1:9000/readyz"},
		{"[::1]:9000", "http://[::1]:9000/readyz"},
		{"127.0.0.2:8080", "http://127.0.0.2:8080/readyz"},
		{"stocksvc:8080", "http://stocksvc:8080/readyz"},
	}
	for _, tt := range tests {
		got, err := localURL(tt.addr, "/readyz")
		if err != nil || got != tt.want {
			t.Errorf("localURL(%q) = %q, %v; want %q", tt.addr, got, err, tt.want)
		}
	}
	if got, err := localURL("8080", "/readyz"); err == nil {
		t.Errorf("localURL(8080) = %q, want an error (no port separator)", got)
	}
}

// TestHealthcheckAnswers checks the probe against servers answering each way.
func TestHealthcheckAnswers(t *testing.T) {
	t.Parallel()
	serving := func(status int) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/readyz" || r.Method != http.MethodGet {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(status)
		}))
		t.Cleanup(srv.Close)
		return srv.Listener.Addr().String()
	}
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	closedAddr := closed.Addr().String()
	closed.Close()

	tests := []struct {
		name, addr, wantErr string // wantErr empty: want success
	}{
		{"ready", serving(http.StatusOK), ""},
		{"not ready", serving(http.StatusServiceUnavailable), "answered 503 Service Unavailable"},
		{"nobody listening", closedAddr, "connection refused"},
		{"bad address", "no-port", "listen address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			err := runHealthcheck(context.Background(), tt.addr, &out)
			if tt.wantErr == "" {
				if err != nil || !strings.HasPrefix(out.String(), "ready: ") {
					t.Errorf("healthcheck(%s) = %v, printed %q; want nil and a ready line", tt.addr, err, out.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("healthcheck(%s) = %v, want an error containing %q", tt.addr, err, tt.wantErr)
			}
		})
	}
}

// TestRunHealthcheckOnService probes a real serving instance through run, as the container
// health check does, then the same address after it stopped.
func TestRunHealthcheckOnService(t *testing.T) {
	t.Parallel()
	in := startRun(t, serveEnv(t, testenv.KeyPrefix(t), nil))
	probe := func() error {
		env := envOf(map[string]string{"STOCKSVC_ADDR": in.Addr})
		return run(context.Background(), func() {}, []string{"healthcheck"}, env, stdio{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}})
	}
	if err := probe(); err != nil {
		t.Fatalf("healthcheck of a ready replica: %v", err)
	}
	if err := in.stop(t); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := probe(); err == nil {
		t.Errorf("healthcheck of a stopped replica succeeded")
	}
}

// TestBinaryHealthcheckExitStatus checks the exit status a container runtime sees.
func TestBinaryHealthcheckExitStatus(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	addr := closed.Addr().String()
	closed.Close()
	cmd := exec.Command(bin, "healthcheck")
	cmd.Env = []string{"STOCKSVC_ADDR=" + addr}
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 {
		t.Fatalf("stocksvc healthcheck with nothing listening: %v, want exit status 1; output:\n%s", err, out)
	}
	if !strings.Contains(string(out), "stocksvc: healthcheck: ") {
		t.Errorf("output %q does not say why", out)
	}
}
