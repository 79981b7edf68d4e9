package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestRunStagesShareOneDeadline: every stage gets the same deadline, the budget's; a stage
// stuck past it, ignoring its context, is abandoned there, and the stages after it are left
// out; the error names both. The budget "runs out" when the test cancels it: nothing here
// depends on timing.
func TestRunStagesShareOneDeadline(t *testing.T) {
	t.Parallel()
	deadline := time.Now().Add(time.Hour)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()

	var mu sync.Mutex
	var ran []string
	seen := map[string]time.Time{}
	record := func(name string, ctx context.Context) {
		d, _ := ctx.Deadline()
		mu.Lock()
		defer mu.Unlock()
		ran = append(ran, name)
		seen[name] = d
	}
	stuck := make(chan struct{})   // never closed before the budget ends
	entered := make(chan struct{}) // the stuck stage has begun
	released := make(chan struct{})
	defer func() {
		close(stuck)
		<-released // the abandoned stage's goroutine ends before the test does
	}()
	stages := []stage{
		{"quick", func(ctx context.Context) error { record("quick", ctx); return nil }},
		{"failing", func(ctx context.Context) error { record("failing", ctx); return errors.New("boom") }},
		{"stuck", func(ctx context.Context) error {
			defer close(released)
			record("stuck", ctx)
			close(entered)
			<-stuck // ignores ctx, like a handler that never returns
			return nil
		}},
		{"after", func(ctx context.Context) error { record("after", ctx); return nil }},
		{"last", func(ctx context.Context) error { record("last", ctx); return nil }},
	}
	done := make(chan error, 1)
	go func() { done <- runStages(ctx, stages) }()
	<-entered
	cancel() // the budget runs out while "stuck" runs
	var err error
	select {
	case err = <-done:
	case <-time.After(startTimeout):
		t.Fatalf("runStages did not return within %v of its budget running out", startTimeout)
	}

	mu.Lock()
	defer mu.Unlock()
	if want := []string{"quick", "failing", "stuck"}; !slices.Equal(ran, want) {
		t.Errorf("stages run = %q, want %q (none after the one the budget cut short)", ran, want)
	}
	for name, d := range seen {
		if !d.Equal(deadline) {
			t.Errorf("stage %s had deadline %v, want the budget's %v", name, d, deadline)
		}
	}
	if !errors.Is(err, errBudgetSpent) {
		t.Errorf("runStages = %v, want errBudgetSpent", err)
	}
	for _, want := range []string{"failing: boom", "stuck: cut short", `left out ["after" "last"]`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("runStages = %v, want it to say %q", err, want)
		}
	}

}

// TestRunStagesWithinBudget: within the budget, every stage runs, in order, and the error holds
// only the stages that failed.
func TestRunStagesWithinBudget(t *testing.T) {
	t.Parallel()
	var ran []string
	step := func(name string, err error) stage {
		return stage{name, func(context.Context) error { ran = append(ran, name); return err }}
	}
	err := runStages(context.Background(), []stage{step("a", nil), step("b", errors.New("boom")), step("c", nil)})
	if !slices.Equal(ran, []string{"a", "b", "c"}) || err == nil || errors.Is(err, errBudgetSpent) || err.Error() != "b: boom" {
		t.Errorf("runStages: ran %q, err %v; want all three, and only b's failure", ran, err)
	}
}

// TestBinaryShutdownWithinBudget runs the real binary, gets an order stuck — a request in
// flight, or an order accepted for later that a worker is deciding — behind a product lock the
// test holds for longer than anything here waits, and sends SIGTERM: the process must exit
// within its one shutdown budget (STOCKSVC_SHUTDOWN_GRACE, 3 s here), with status 1 and the
// stage the budget cut short in its last log line. Each stage used to get a grace of its own,
// and the queued orders none at all: the process then waited for the lock wait (60 s).
func TestBinaryShutdownWithinBudget(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, tt := range []struct {
		name  string
		async bool   // the stuck order is accepted for later and decided by a worker
		stage string // the stage the budget cuts short
	}{
		{"stuck request", false, "in-flight requests: cut short"},
		{"stuck worker", true, "async workers: cut short"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			const budget = 3 * time.Second
			rdb, prefix := testenv.Redis(t)
			port := testenv.FreePort(t)
			token := "admin-" + randomHex(t, 16)
			var stderr lockedBuffer
			cmd := exec.Command(bin)
			cmd.Env = []string{
				"STOCKSVC_ADDR=127.0.0.1:" + strconv.Itoa(port),
				"DATABASE_URL=" + testenv.DatabaseURL(t),
				"REDIS_URL=" + testenv.RedisURL(t),
				"STOCKSVC_REDIS_PREFIX=" + prefix,
				"STOCKSVC_ADMIN_TOKEN=" + token,
				"STOCKSVC_SHUTDOWN_GRACE=" + budget.String(),
				"STOCKSVC_SHUTDOWN_DELAY=100ms",
				// Far longer than the budget: the order waits for the test, not for a timer.
				"STOCKSVC_LOCK_WAIT=60s",
				"STOCKSVC_REQUEST_TIMEOUT=60s",
				"STOCKSVC_ASYNC_WORKERS=1",
				"STOCKSVC_CUSTOMER_AUTH=body",
			}
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatalf("start %s: %v", bin, err)
			}
			var waitErr error
			exited := make(chan struct{})
			go func() {
				waitErr = cmd.Wait()
				close(exited)
			}()
			defer func() {
				select {
				case <-exited:
				default:
					_ = cmd.Process.Kill()
					<-exited
				}
			}()
			tr := &http.Transport{}
			defer tr.CloseIdleConnections()
			in := &instance{URL: "http://127.0.0.1:" + strconv.Itoa(port), client: &http.Client{Transport: tr, Timeout: startTimeout}}
			testenv.Poll(t, startTimeout, "the replica to be ready", func() bool {
				res, err := doRequest(t.Context(), in.client, http.MethodGet, in.URL+"/readyz", nil, nil)
				return err == nil && res.Status == http.StatusOK
			})
			id := in.createProduct(t, token, "budget", 5)
			lockName := stocklock.Name(prefix, id)
			held, err := lock.New(rdb).Obtain(t.Context(), lockName, time.Minute, nil)
			if err != nil {
				t.Fatalf("hold the product lock: %v", err)
			}
			defer func() { _ = held.Release(context.Background()) }()

			header := http.Header{}
			if tt.async {
				header.Set("Prefer", "respond-async")
			}
			order := map[string]any{"customer_id": "c", "items": []map[string]any{{"product_id": id, "quantity": 1}}}
			answered := make(chan response, 1)
			go func() {
				// Stuck until the process exits, when synchronous; 202 at once otherwise.
				res, _ := doRequest(context.Background(), in.client, http.MethodPost, in.URL+"/v1/orders", order, header)
				answered <- res
			}()
			if tt.async {
				if res := <-answered; res.Status != http.StatusAccepted {
					t.Fatalf("order sent with Prefer: respond-async: status %d: %s", res.Status, res.Body)
				}
			}
			// The order's batch is in line for the lock: the request, or the worker's drain,
			// is inside the replica.
			testenv.Poll(t, startTimeout, "the order to wait for the product lock", func() bool {
				n, err := rdb.LLen(t.Context(), lockName+":waiters").Result()
				return err == nil && n == 1
			})

			sent := time.Now()
			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatalf("SIGTERM: %v", err)
			}
			// Generous: the budget is 3 s, and without one budget the process waits 60 s.
			select {
			case <-exited:
			case <-time.After(budget + 12*time.Second):
				t.Fatalf("still running %v after SIGTERM with a %v shutdown budget; log:\n%s", time.Since(sent), budget, stderr.String())
			}
			if !tt.async {
				<-answered // the connection broke with the process
			}
			var exit *exec.ExitError
			if !errors.As(waitErr, &exit) || exit.ExitCode() != 1 {
				t.Errorf("exit: %v, want status 1 (the budget ran out); log:\n%s", waitErr, stderr.String())
			}
			last := lastLogLine(t, stderr.String())
			if last["msg"] != "exiting" || !strings.Contains(fmt.Sprint(last["error"]), tt.stage) ||
				!strings.Contains(fmt.Sprint(last["error"]), errBudgetSpent.Error()) {
				t.Errorf("last log line %v, want exiting with an error naming %q; log:\n%s", last, tt.stage, stderr.String())
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer that a process's output and the test may use at once.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// lastLogLine parses the last JSON line of log.
func lastLogLine(t *testing.T, log string) map[string]any {
	t.Helper()
	var last string
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" {
			last = line
		}
	}
	var rec map[string]any
	if err := json.Unmarshal([]byte(last), &rec); err != nil {
		t.Fatalf("last log line %q is not JSON: %v", last, err)
	}
	return rec
}

// TestComposeGraceCoversShutdownBudget: the Compose file gives each replica longer to stop
// than the replica's own shutdown budget, with its default the service's default, so that
// Docker never has to SIGKILL a replica that is shutting down within its budget.
func TestComposeGraceCoversShutdownBudget(t *testing.T) {
	t.Parallel()
	compose, err := os.ReadFile(filepath.Join("..", "..", "deploy", "docker-compose.yml"))
	if err != nil {
		t.Fatalf("read the Compose file: %v", err)
	}
	find := func(re string) time.Duration {
		t.Helper()
		m := regexp.MustCompile(re).FindSubmatch(compose)
		if m == nil {
			t.Fatalf("no %s in deploy/docker-compose.yml", re)
		}
		d, err := time.ParseDuration(string(m[1]))
		if err != nil {
			t.Fatalf("%s: %v", m[0], err)
		}
		return d
	}
	grace := find(`(?m)^\s+stop_grace_period:\s*(\S+)`)
	budget := find(`STOCKSVC_SHUTDOWN_GRACE:\s*\$\{STOCKSVC_SHUTDOWN_GRACE:-(\w+)\}`)
	delay := find(`STOCKSVC_SHUTDOWN_DELAY:\s*\$\{STOCKSVC_SHUTDOWN_DELAY:-(\w+)\}`)
	defaults, _, err := loadConfig(nil, envOf(nil), &bytes.Buffer{})
	if err != nil {
		t.Fatalf("default configuration: %v", err)
	}
	if budget != defaults.ShutdownGrace || delay != defaults.ShutdownDelay {
		t.Errorf("Compose defaults: budget %v, delay %v; the service's: %v, %v", budget, delay, defaults.ShutdownGrace, defaults.ShutdownDelay)
	}
	// A few seconds of margin for the process to exit and the runtime to notice.
	if grace < budget+3*time.Second {
		t.Errorf("stop_grace_period %v leaves less than 3 s beyond the shutdown budget %v", grace, budget)
	}
}
