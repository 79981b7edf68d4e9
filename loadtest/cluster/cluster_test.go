package cluster

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestHAProxyConfigChecksReadiness(t *testing.T) {
	t.Parallel()
	cfg := haproxyConfig(8080, 8081, []int{9001, 9002})
	for _, want := range []string{"bind 127.0.0.1:8080", "bind 127.0.0.1:8081", "option httpchk GET /readyz",
		"server r1 127.0.0.1:9001 check", "server r2 127.0.0.1:9002 check", "retry-on conn-failure"} {
		if !strings.Contains(cfg, want) {
			t.Errorf("config lacks %q:\n%s", want, cfg)
		}
	}
}

func TestDeclaresModule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		gomod string
		want  bool
	}{
		{"module github.com/stocksvc/stocksvc\n\ngo 1.26\n", true},
		{"// comment\nmodule \"github.com/stocksvc/stocksvc\"\n", true},
		{"module github.com/stocksvc/stocksvc/loadtest\n", false},
		{"go 1.26\n", false},
	} {
		if got := declaresModule([]byte(tc.gomod), serviceModule); got != tc.want {
			t.Errorf("declaresModule(%q) = %v, want %v", tc.gomod, got, tc.want)
		}
	}
}

func TestRepositoryRootHoldsTheService(t *testing.T) {
	t.Parallel()
	root, err := RepositoryRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"cmd/stocksvc", "loadtest/flashsale.js"} {
		if _, err := os.Stat(filepath.Join(root, want)); err != nil {
			t.Errorf("repository root %s: %v", root, err)
		}
	}
}

// TestBalancerNamesTheReplica: every answer through the balancer says which replica gave it,
// so that a drill's history can name the replica behind a violation.
func TestBalancerNamesTheReplica(t *testing.T) {
	t.Parallel()
	haproxy, err := exec.LookPath("haproxy")
	if err != nil {
		t.Skip("no haproxy on the PATH")
	}
	var backends []int
	for range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
		t.Cleanup(srv.Close)
		backends = append(backends, srv.Listener.Addr().(*net.TCPAddr).Port)
	}
	ports, err := FreePorts(2)
	if err != nil {
		t.Fatal(err)
	}
	sup := &Supervisor{}
	t.Cleanup(func() { _ = sup.StopAll(5 * time.Second) })
	dir := t.TempDir()
	p, err := startHAProxy(sup, haproxy, dir, ports[0], ports[1], backends)
	if err != nil {
		t.Fatal(err)
	}
	front := fmt.Sprintf("http://127.0.0.1:%d/readyz", ports[0])
	if err := WaitReady(context.Background(), p, front, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for range 4 { // round robin: both replicas within four requests
		res, err := http.Get(front)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		seen[res.Header.Get(ServedBy)] = true
	}
	if !seen["r1"] || !seen["r2"] || len(seen) != 2 {
		t.Errorf("%s headers seen: %v, want r1 and r2", ServedBy, seen)
	}
}
