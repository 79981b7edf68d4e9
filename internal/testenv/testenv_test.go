package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// childEnv marks this test binary run again by TestSkipSummary, as a package whose servers
// cannot be reached.
const childEnv = "STOCKSVC_TESTENV_CHILD"

func TestMain(m *testing.M) { Main(m) }

// TestChildNeedsServers is what the child runs: two integration tests that need servers.
func TestChildNeedsServers(t *testing.T) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("runs only as the child of TestSkipSummary")
	}
	for _, name := range []string{"database", "redis"} {
		t.Run(name, func(t *testing.T) {
			if name == "database" {
				DatabaseURL(t)
			} else {
				Redis(t)
			}
			t.Errorf("%s: got servers that do not exist", name)
		})
	}
}

// runChild runs TestChildNeedsServers in a new process of this test binary, against servers
// that refuse connections, with extra environment and flags.
func runChild(t *testing.T, extra ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildNeedsServers$", "-test.count=1")
	env := []string{childEnv + "=1",
		fmt.Sprintf("%s=postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", EnvDatabaseURL, FreePort(t)),
		fmt.Sprintf("%s=redis://127.0.0.1:%d/0", EnvRedisURL, FreePort(t))}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, EnvRequire+"=") && !strings.HasPrefix(kv, EnvDatabaseURL+"=") && !strings.HasPrefix(kv, EnvRedisURL+"=") {
			env = append(env, kv)
		}
	}
	// extra holds environment (NAME=value) and flags for the child (-test.*).
	for _, e := range extra {
		if strings.HasPrefix(e, "-") {
			cmd.Args = append(cmd.Args, e)
		} else {
			env = append(env, e)
		}
	}
	cmd.Env = env
	// A session of its own has no controlling terminal: the child's summary, which is about
	// its make-believe servers, must not reach the terminal of whoever runs these tests.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestSkipSummary checks the line a package prints when its integration tests skip: it says
// how many, why, and the command that makes them run; that the package then fails unless
// EnvRequire=0 or -short accepts the skips; and that EnvRequire=1 turns the skips into
// failures instead.
func TestSkipSummary(t *testing.T) {
	t.Parallel()
	out, err := runChild(t)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || !strings.Contains(out, "testenv: FAIL: integration tests skipped") || !strings.Contains(out, "SKIPPED") {
		t.Errorf("child with unreachable servers and %s unset: %v, want a failure with the skip summary; output:\n%s", EnvRequire, err, out)
	}
	for _, accept := range [][]string{{EnvRequire + "=0"}, {EnvRequire + "=false"}} {
		out, err := runChild(t, accept...)
		if err != nil {
			t.Errorf("child with %v: %v, want success with skips; output:\n%s", accept, err, out)
		}
	}
	if out, err := runChild(t, "-test.short"); err != nil {
		t.Errorf("child with -test.short: %v, want success with skips; output:\n%s", err, out)
	}

	out, err = runChild(t, EnvRequire+"=0")
	if err != nil {
		t.Fatalf("child with unreachable servers: %v, want success with skips; output:\n%s", err, out)
	}
	var summary []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "testenv: ") {
			summary = append(summary, line)
		}
	}
	if len(summary) != 1 {
		t.Fatalf("summary lines %q, want one; output:\n%s", summary, out)
	}
	for _, want := range []string{"testenv: testenv: 2 integration tests SKIPPED (postgres at postgres://postgres@127.0.0.1:",
		"connection refused", "To run them, and fail instead of skipping: " + EnvRequire + "=1 " + EnvDatabaseURL + "='postgres://", EnvRedisURL + "='redis://", "go test ./..."} {
		if !strings.Contains(summary[0], want) {
			t.Errorf("summary lacks %q:\n%s", want, summary[0])
		}
	}

	out, err = runChild(t, EnvRequire+"=1")
	if !errors.As(err, &exit) || !strings.Contains(out, EnvRequire+" is set but the integration servers are unavailable") {
		t.Errorf("child with %s=1: %v, want a failure naming the variable; output:\n%s", EnvRequire, err, out)
	}
	if strings.Contains(out, "SKIPPED") {
		t.Errorf("child with %s=1 printed a skip summary:\n%s", EnvRequire, out)
	}
}

func TestSkipLogSummary(t *testing.T) {
	t.Parallel()
	var l skipLog
	if got := l.summary("stock.test"); got != "" {
		t.Errorf("summary with no skips = %q, want none", got)
	}
	l.add("no server URLs set and\nno Docker engine")
	if got := l.summary("stock.test"); !strings.HasPrefix(got, "testenv: stock: 1 integration test SKIPPED (no server URLs set and no Docker engine). ") {
		t.Errorf("summary after one skip = %q", got)
	}
	l.add("another reason")
	if got := l.summary("stock.test"); !strings.HasPrefix(got, "testenv: stock: 2 integration tests SKIPPED (no server URLs set and no Docker engine). ") {
		t.Errorf("summary after two skips = %q, want the count and the first reason", got)
	}
}
