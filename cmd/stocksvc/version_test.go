package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestFormatVersion(t *testing.T) {
	t.Parallel()
	stamped := &debug.BuildInfo{
		GoVersion: "go1.26.8",
		Main:      debug.Module{Path: "github.com/stocksvc/stocksvc", Version: "v1.2.3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
			{Key: "vcs.time", Value: "2026-11-01T10:00:00Z"},
			{Key: "vcs.modified", Value: "false"},
		},
	}
	modified := *stamped
	modified.Settings = append([]debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, stamped.Settings[:3]...)
	tests := []struct {
		name string
		info *debug.BuildInfo
		ok   bool
		want []string
	}{
		{"tagged and clean", stamped, true, []string{
			"stocksvc v1.2.3\n", "module:    github.com/stocksvc/stocksvc\n",
			"revision:  0123456789abcdef0123456789abcdef01234567\n", "committed: 2026-11-01T10:00:00Z\n", "go:        go1.26.8\n",
		}},
		{"uncommitted changes", &modified, true, []string{"revision:  0123456789abcdef0123456789abcdef01234567 (with uncommitted changes)\n"}},
		{"no VCS stamp", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/stocksvc/stocksvc", Version: "(devel)"}}, true,
			[]string{"stocksvc (devel)\n", "revision:  unknown (not built from a VCS checkout)\n"}},
		{"no build info", nil, false, []string{"no build information"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := formatVersion(tt.info, tt.ok)
			for _, w := range tt.want {
				if !strings.Contains(got, w) {
					t.Errorf("formatVersion lacks %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestRunVersion checks that version answers without reading the configuration: a broken
// environment does not stop it.
func TestRunVersion(t *testing.T) {
	t.Parallel()
	broken := envOf(map[string]string{"STOCKSVC_LOG_FORMAT": "xml", "DATABASE_URL": "notaurl"})
	var stdout bytes.Buffer
	if err := run(context.Background(), func() {}, []string{"version"}, broken, stdio{stdout: &stdout, stderr: &bytes.Buffer{}}); err != nil {
		t.Fatalf("run(version) = %v, want nil", err)
	}
	if got := stdout.String(); !strings.HasPrefix(got, "stocksvc ") || !strings.Contains(got, "go:        "+runtime.Version()) {
		t.Errorf("run(version) printed %q, want the version and the Go toolchain", got)
	}
	if err := run(context.Background(), func() {}, []string{"version", "extra"}, broken, stdio{stdout: &stdout, stderr: &bytes.Buffer{}}); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("run(version extra) = %v, want an error about the argument", err)
	}
}

// buildBinary builds stocksvc as a user would, with VCS stamping as the toolchain does by
// default (whatever GOFLAGS says), into a directory of the test's own.
func buildBinary(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stocksvc")
	// Bounded, so that a stuck toolchain fails this test instead of the whole binary.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-buildvcs=auto", "-o", path, ".")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return path
}

// TestBinaryVersionNamesRevision builds the real binary and checks that "stocksvc version"
// names the commit it was built from, or says it cannot when there is no git checkout.
func TestBinaryVersionNamesRevision(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("stocksvc version: %v\n%s", err, out)
	}
	want := "revision:  unknown"
	// The toolchain stamps a revision only in a checkout whose .git is a directory: not in a
	// source archive, and not in a linked worktree (where .git is a file).
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if fi, serr := os.Stat(filepath.Join(strings.TrimSpace(string(top)), ".git")); err == nil && serr == nil && fi.IsDir() {
		head, err := exec.Command("git", "rev-parse", "HEAD").Output()
		if err != nil {
			t.Fatalf("git rev-parse HEAD: %v", err)
		}
		want = "revision:  " + strings.TrimSpace(string(head))
	}
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "module:    github.com/stocksvc/stocksvc\n") {
		t.Errorf("stocksvc version printed:\n%s\nwant a line starting %q and the module path", out, want)
	}
}
