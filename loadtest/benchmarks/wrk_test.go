package benchmarks

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// wrkOutput is what wrk 4.1 prints for a run with statusLua and --latency, two threads.
const wrkOutput = `Running 10s test @ http://127.0.0.1:40001
  2 threads and 128 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    12.31ms    5.10ms  80.02ms   71.00%
    Req/Sec     5.10k   400.00     6.00k    70.00%
  Latency Distribution
     50%   11.50ms
     75%   14.00ms
     90%   18.00ms
     99%   31.25ms
  101500 requests in 10.05s, 30.00MB read
  Socket errors: connect 0, read 2, write 0, timeout 1
  Non-2xx or 3xx responses: 101500
Requests/sec:  10099.50
Transfer/sec:      2.98MB
wrk-status 409 50000
wrk-409-not-sold-out 0
wrk-status 409 51490
wrk-status 429 10
wrk-409-not-sold-out 3
`

func TestParseWrkSummary(t *testing.T) {
	t.Parallel()
	got, err := parseWrkSummary(wrkOutput)
	if err != nil {
		t.Fatalf("parseWrkSummary: %v", err)
	}
	want := wrkSummary{requests: 101500, non2xx: 101500, failed: 3, window: 10050 * time.Millisecond,
		p50: 11.5, p99: 31.25, statuses: map[int]int{409: 101490, 429: 10}, notSoldOut: 3}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(wrkSummary{})); diff != "" {
		t.Errorf("parseWrkSummary (-want +got):\n%s", diff)
	}
	if _, err := parseWrkSummary("wrk: connection refused"); err == nil {
		t.Errorf("output without a request count was accepted")
	}
}

func TestParseWrkCountsNon2xxApartFromCreated(t *testing.T) {
	t.Parallel()
	p, err := parseWrk(wrkOutput)
	if err != nil {
		t.Fatalf("parseWrk: %v", err)
	}
	if p.count(http.StatusCreated) != 0 || p.count(notCreated) != 101500 || p.count(0) != 3 || p.pct[http.StatusCreated] != [2]float64{11.5, 31.25} {
		t.Errorf("parseWrk = counts %v, percentiles %v", p.counts, p.pct)
	}
}

// TestStatusLua runs wrk with statusLua for a second against a server that refuses every
// order — one in ten with a problem other than sold-out — and checks that the script counted
// every answer, the not-sold-out ones apart.
func TestStatusLua(t *testing.T) {
	t.Parallel()
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("no wrk on PATH")
	}
	var orders, bad, gets atomic.Int64
	var mu sync.Mutex
	keys := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			gets.Add(1)
			return
		}
		mu.Lock()
		keys[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusConflict)
		if orders.Add(1)%10 == 0 {
			bad.Add(1)
			fmt.Fprint(w, `{"code":"busy"}`)
			return
		}
		fmt.Fprint(w, `{"status":409,"code":"sold-out"}`)
	}))
	t.Cleanup(srv.Close)
	script := filepath.Join(t.TempDir(), "status.lua")
	if err := os.WriteFile(script, []byte(statusLua), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, wrk, "-t", "2", "-c", "4", "-d", "1s", "-s", script, srv.URL)
	cmd.Env = append(os.Environ(), "PRODUCT=7")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("wrk: %v\n%s", err, out)
	}
	s, err := parseWrkSummary(string(out))
	if err != nil {
		t.Fatal(err)
	}
	if s.requests == 0 || s.statuses[http.StatusConflict] != s.requests || gets.Load() != 0 {
		t.Errorf("wrk counted %d answers, the script %v; the server saw %d GETs\n%s", s.requests, s.statuses, gets.Load(), out)
	}
	// wrk stops without reading answers still in flight, which the server has counted.
	if s.notSoldOut == 0 || int64(s.notSoldOut) > bad.Load() {
		t.Errorf("the script counted %d 409s not sold-out; the server sent %d", s.notSoldOut, bad.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range keys {
		if k == "" || n > 1 {
			t.Errorf("Idempotency-Key %q sent %d times", k, n)
		}
	}
}
