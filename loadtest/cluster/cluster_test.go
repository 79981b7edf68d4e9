package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
