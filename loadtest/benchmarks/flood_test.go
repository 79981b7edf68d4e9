package benchmarks

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestPickFloodKinds(t *testing.T) {
	t.Parallel()
	kinds, err := pickFloodKinds("audit,missing-ids")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, k := range kinds {
		names = append(names, k.name)
	}
	if got := strings.Join(names, ","); got != "healthz,audit,missing-ids" {
		t.Errorf("kinds = %s, want the healthz baseline first, then the ones named", got)
	}
	if _, err := pickFloodKinds("audit,tea"); err == nil {
		t.Error("an unknown flood was accepted")
	}
}

// floodRounds makes rounds in which the buyers confirmed per[kind][i] orders in 1 s.
func floodRounds(per map[string][]int) []floodRound {
	var rounds []floodRound
	for _, k := range []string{"healthz", "audit", "missing-ids"} {
		for i, n := range per[k] {
			rounds = append(rounds, floodRound{kind: k, round: i + 1,
				buyers: wrkResult{wrkSummary: wrkSummary{window: time.Second, requests: n, statuses: map[int]int{201: n}}},
				flood:  wrkResult{wrkSummary: wrkSummary{window: time.Second, requests: 10, statuses: map[int]int{200: 10}}}})
		}
	}
	return rounds
}

func TestFloodSummaryAndChecks(t *testing.T) {
	t.Parallel()
	kinds, _ := pickFloodKinds("audit,missing-ids")
	lines := summariseFlood(kinds, floodRounds(map[string][]int{
		"healthz":     {1000, 3000, 2000},
		"audit":       {100, 900, 300},    // median 300 ÷ 2000
		"missing-ids": {1900, 2700, 1850}, // median 1900 ÷ 2000
	}))
	if len(lines) != 3 || lines[0].confirmed != 2000 {
		t.Fatalf("lines = %+v", lines)
	}
	if got := lines[1].ratio; math.Abs(got-0.15) > 1e-9 {
		t.Errorf("audit ratio = %v, want 0.15 (medians 300 ÷ 2000)", got)
	}
	if lines[1].low != 0.1 || lines[1].high != 0.3 {
		t.Errorf("audit rounds' ratios %v–%v, want 0.1–0.3 (each round ÷ the healthz round of its turn)", lines[1].low, lines[1].high)
	}
	if lines[2].flood[200] != 30 {
		t.Errorf("the flood's answers summed over rounds: %v", lines[2].flood)
	}
	failed := floodChecks(lines)
	if len(failed) != 1 || !strings.Contains(failed[0], "audit flood") {
		t.Errorf("checks = %q, want the audit flood's miss alone (missing ids at 0.95× meet 0.9×)", failed)
	}
	if failed := floodChecks(summariseFlood(kinds, floodRounds(map[string][]int{"healthz": {0}, "audit": {0}, "missing-ids": {0}}))); len(failed) != 3 {
		t.Errorf("no baseline: checks = %q, want the baseline and both targets failed", failed)
	}
}

func TestParseWrkCounters(t *testing.T) {
	t.Parallel()
	out := "Running 1s test\nwrk-status 201 10\nwrk-count same 4\nwrk-count refused-429 1\nwrk-status 201 5\nwrk-count same 3\n"
	c := parseWrkCounters(out)
	if c["same"] != 7 || c["refused-429"] != 1 || len(c) != 2 {
		t.Errorf("counters = %v, want same 7 and refused-429 1 (summed over threads)", c)
	}
}

// scriptedService stands in for the balancer: it answers orders as the test's rule says, by
// the request's Idempotency-Key and how many times that key came, echoing X-Request-ID as a
// replica does, and answers GETs 200.
type scriptedService struct {
	mu       sync.Mutex
	seen     map[string]int
	products map[string]int
	bearers  map[string]int // the Authorization headers of the orders, when recorded
	answer   func(key string, n int, w http.ResponseWriter)
}

func (s *scriptedService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.WriteHeader(http.StatusOK)
		return
	}
	var body struct {
		Customer string `json:"customer_id"`
		Items    []struct {
			Product json.Number `json:"product_id"`
		} `json:"items"`
	}
	key := r.Header.Get("Idempotency-Key")
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || key == "" || len(body.Items) != 1 {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	s.seen[key]++
	n := s.seen[key]
	s.products[body.Items[0].Product.String()]++
	if s.bearers != nil {
		s.bearers[r.Header.Get("Authorization")]++
	}
	s.mu.Unlock()
	w.Header().Set("X-Request-ID", r.Header.Get("X-Request-ID"))
	s.answer(key, n, w)
}

// runScript runs wrk with script against svc for a second and returns its counters and
// answers by status.
func runScript(t *testing.T, script string, env []string, svc http.Handler) wrkResult {
	t.Helper()
	wrk, err := exec.LookPath("wrk")
	if err != nil {
		t.Skip("wrk is not installed")
	}
	srv := httptest.NewUnstartedServer(svc)
	srv.Listener.Close()
	if srv.Listener, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	t.Cleanup(srv.Close)
	dir := t.TempDir()
	path := filepath.Join(dir, "script.lua")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res, err := runWrkJobs(t.Context(), wrk, dir, "test", port, time.Second,
		wrkJob{name: "script", conns: 8, threads: 2, script: path, env: env})
	if err != nil {
		t.Fatal(err)
	}
	return res[0]
}

// TestReplayScriptJudgesPairs runs replayLua against services that answer a key's second
// request each in their own way, and checks that the script names each pair as the report
// says: a replay with the first's order and mark is `same`, another order is `different`, no
// mark is `unmarked`, a refusal is `refused-429`, and in concurrent mode the twins go out
// before the first's answer.
func TestReplayScriptJudgesPairs(t *testing.T) {
	t.Parallel()
	confirm := func(w http.ResponseWriter, location string, replayed bool) {
		w.Header().Set("Location", location)
		if replayed {
			w.Header().Set("Idempotent-Replayed", "true")
		}
		w.WriteHeader(http.StatusCreated)
	}
	cases := []struct {
		name   string
		mode   string
		second func(key string, w http.ResponseWriter)
		want   string
	}{
		{"replayed", replaySequential, func(key string, w http.ResponseWriter) { confirm(w, "/v1/orders/"+key, true) }, "same"},
		{"another order", replaySequential, func(key string, w http.ResponseWriter) { confirm(w, "/v1/orders/x"+key, false) }, "different"},
		{"unmarked", replaySequential, func(key string, w http.ResponseWriter) { confirm(w, "/v1/orders/"+key, false) }, "unmarked"},
		{"busy", replaySequential, func(key string, w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) }, "refused-429"},
		{"at once", replayConcurrent, func(key string, w http.ResponseWriter) { confirm(w, "/v1/orders/"+key, true) }, "same"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// In concurrent mode the first answer is held until its twin has arrived (or a
			// second has passed), so that the twin surely went out before it.
			var arrivedMu sync.Mutex
			arrived := map[string]chan struct{}{}
			twin := func(key string) chan struct{} {
				arrivedMu.Lock()
				defer arrivedMu.Unlock()
				if arrived[key] == nil {
					arrived[key] = make(chan struct{})
				}
				return arrived[key]
			}
			svc := &scriptedService{seen: map[string]int{}, products: map[string]int{}, answer: func(key string, n int, w http.ResponseWriter) {
				if n == 1 {
					if c.mode == replayConcurrent {
						select {
						case <-twin(key):
						case <-time.After(time.Second):
						}
					}
					confirm(w, "/v1/orders/"+key, false)
					return
				}
				if c.mode == replayConcurrent {
					close(twin(key))
				}
				c.second(key, w)
			}}
			res := runScript(t, replayLua, []string{"MODE=" + c.mode, "PRODUCT=5"}, svc)
			pairs := res.counters["pairs"]
			if pairs == 0 || res.counters[c.want] != pairs {
				t.Fatalf("counters %v: want every one of the %d pairs counted %s", res.counters, pairs, c.want)
			}
			svc.mu.Lock()
			defer svc.mu.Unlock()
			for key, n := range svc.seen {
				if n > 2 {
					t.Fatalf("key %s sent %d times, want at most twice", key, n)
				}
			}
			if c.mode == replayConcurrent && (res.counters["together"] == 0 || res.counters["late"] != 0) {
				t.Errorf("counters %v: every twin went out before its first's answer, so all should count together", res.counters)
			}
		})
	}
}

// TestReplayScriptFreshKeys: in fresh mode no key is sent twice.
func TestReplayScriptFreshKeys(t *testing.T) {
	t.Parallel()
	svc := &scriptedService{seen: map[string]int{}, products: map[string]int{}, answer: func(key string, n int, w http.ResponseWriter) {
		w.WriteHeader(http.StatusCreated)
	}}
	res := runScript(t, replayLua, []string{"MODE=" + replayFresh, "PRODUCT=5"}, svc)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if res.statuses[201] == 0 || len(svc.seen) != sumValues(svc.seen) {
		t.Errorf("%d answers, %d keys for %d requests: want every key once", res.statuses[201], len(svc.seen), sumValues(svc.seen))
	}
}

// TestFloodScriptMissingIDs: the missing-ids flood orders products none of the run has, a
// different one nearly every time, each order with a key of its own.
func TestFloodScriptMissingIDs(t *testing.T) {
	t.Parallel()
	svc := &scriptedService{seen: map[string]int{}, products: map[string]int{}, answer: func(key string, n int, w http.ResponseWriter) {
		w.WriteHeader(http.StatusNotFound)
	}}
	res := runScript(t, floodLua, []string{"MODE=missing", "KEYPREFIX=m"}, svc)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	requests := sumValues(svc.seen)
	if res.statuses[404] == 0 || len(svc.seen) != requests {
		t.Fatalf("%d answers, %d keys for %d requests: want a key per order", res.statuses[404], len(svc.seen), requests)
	}
	if len(svc.products) < requests*9/10 {
		t.Errorf("%d products for %d orders: want nearly every one different", len(svc.products), requests)
	}
	for id := range svc.products {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 7e12 || len(id) != 13 {
			t.Fatalf("product id %q: want 7 followed by 12 digits", id)
		}
	}
}

// TestFloodScriptForged: the bad-signature flood sends a new token each time, all with the
// header and claims it was given and a signature of a real one's length and last character.
func TestFloodScriptForged(t *testing.T) {
	t.Parallel()
	svc := &scriptedService{seen: map[string]int{}, products: map[string]int{}, bearers: map[string]int{},
		answer: func(key string, n int, w http.ResponseWriter) { w.WriteHeader(http.StatusUnauthorized) }}
	const prefix = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJhIn0."
	res := runScript(t, floodLua, []string{"MODE=forged", "PRODUCT=5", "KEYPREFIX=f", "FORGED=" + prefix, "FORGED_LAST=Q"}, svc)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	requests := sumValues(svc.seen)
	if res.statuses[401] == 0 || len(svc.bearers) != requests {
		t.Fatalf("%d answers, %d tokens for %d requests: want a new token each time", res.statuses[401], len(svc.bearers), requests)
	}
	for b := range svc.bearers {
		sig, ok := strings.CutPrefix(b, "Bearer "+prefix)
		if !ok || len(sig) != 86 || !strings.HasSuffix(sig, "Q") || strings.Trim(sig, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Fatalf("bearer %q: want the prefix and 86 base64url characters ending in Q", b)
		}
	}
	if svc.products["5"] != requests {
		t.Errorf("products %v: want every order for product 5", svc.products)
	}
}

// TestFloodScriptTokens: with a file of tokens, every order carries one of them, and the body
// names no customer (the token does).
func TestFloodScriptTokens(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(file, []byte("tok-a\ntok-b\ntok-c\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svc := &scriptedService{seen: map[string]int{}, products: map[string]int{}, bearers: map[string]int{},
		answer: func(key string, n int, w http.ResponseWriter) { w.WriteHeader(http.StatusCreated) }}
	res := runScript(t, floodLua, []string{"MODE=order", "PRODUCT=5", "KEYPREFIX=b", "TOKENS=" + file}, svc)
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if res.statuses[201] == 0 || len(svc.bearers) != 3 {
		t.Fatalf("bearers %v: want the three tokens of the file", svc.bearers)
	}
	for b := range svc.bearers {
		if !strings.HasPrefix(b, "Bearer tok-") {
			t.Fatalf("bearer %q, want one of the file's", b)
		}
	}
}

func sumValues(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func TestReplayChecks(t *testing.T) {
	t.Parallel()
	round := func(mode string, n int, counters map[string]int) replayRound {
		return replayRound{mode: mode, round: 1, wrkResult: wrkResult{
			wrkSummary: wrkSummary{window: time.Second, requests: n, statuses: map[int]int{201: n}}, counters: counters}}
	}
	good := summariseReplays([]replayRound{
		round(replayFresh, 1000, nil),
		round(replaySequential, 950, map[string]int{"pairs": 400, "same": 400}),
		round(replayConcurrent, 920, map[string]int{"pairs": 400, "same": 399, "retry": 1}),
	})
	if failed := replayChecks(good, boughtTwice{orders: 10, stored: 10}); len(failed) != 0 {
		t.Errorf("a good run failed: %q", failed)
	}
	bad := summariseReplays([]replayRound{
		round(replayFresh, 1000, nil),
		round(replaySequential, 500, map[string]int{"pairs": 400, "same": 390, "refused": 10, "refused-429": 10}),
		round(replayConcurrent, 950, map[string]int{"pairs": 400, "different": 1, "unmarked": 2}),
	})
	failed := replayChecks(bad, boughtTwice{keys: 1, orders: 11, stored: 10})
	want := []string{"sequential replays: 500 answers/s, 0.50×", "replays of a confirmed order were not answered with it (429 ×10)",
		"two different orders", "neither answer marked", "1 keys bought more than once", "11 orders but 10 confirmed"}
	if len(failed) != len(want) {
		t.Errorf("checks = %q, want %d failures", failed, len(want))
	}
	for _, w := range want {
		if !strings.Contains(strings.Join(failed, "\n"), w) {
			t.Errorf("no failure says %q: %q", w, failed)
		}
	}
	if got := fmt.Sprintf("%.2f", bad[1].ratio); got != "0.50" {
		t.Errorf("sequential ratio %s, want 0.50", got)
	}
}

// TestOrderScriptSendsFreshOrders runs orderLua, the throughput benchmark's closed loop, and
// checks that every request is an order of $PRODUCT with a key no other request had, and that
// the script, which has no response(), prints no counts of its own.
func TestOrderScriptSendsFreshOrders(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	keys := map[string]int{}
	var wrong atomic.Int64
	svc := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPost || !strings.Contains(string(body), `"product_id":5,`) {
			wrong.Add(1)
		}
		mu.Lock()
		keys[r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
		w.WriteHeader(http.StatusCreated)
	})
	res := runScript(t, orderLua, []string{"PRODUCT=5"}, svc)
	if res.requests == 0 || wrong.Load() != 0 {
		t.Fatalf("%d requests, %d not an order of product 5", res.requests, wrong.Load())
	}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range keys {
		if k == "" || n != 1 {
			t.Fatalf("key %q sent %d times: want every key once", k, n)
		}
	}
	if strings.Contains(res.out, "wrk-status") {
		t.Fatalf("orderLua printed status counts:\n%s", res.out)
	}
}
