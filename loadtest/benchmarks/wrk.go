package benchmarks

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// The closed loop of the throughput benchmark is driven by wrk: written in C, it costs a few
// microseconds of CPU per request where a Go HTTP client costs tens, and on two cores shared with
// the deployment every microsecond the load generator spends is taken from the service. It is
// closed-loop by design (each connection sends its next request when the answer is in), which is
// what this phase measures; the open-loop phases, which need arrivals on a schedule, use vegeta.

// orderLua makes each wrk request a new order of one unit of product $PRODUCT, with its own
// customer and Idempotency-Key (thread number, counter and randomness: unique across threads).
var orderLua = wrkScript(`
local product = os.getenv("PRODUCT")
local pause = tonumber(os.getenv("DELAY_MS") or "0")
if pause > 0 then
  -- Paced: each connection waits this long before its next request.
  function delay() return pause end
end
function request()
  local key = newKey("wrk")
  local body = string.format('{"customer_id":"c%d-%d","items":[{"product_id":%s,"quantity":1}]}', tid, counter, product)
  return wrk.format("POST", "/v1/orders", {["Content-Type"] = "application/json", ["Idempotency-Key"] = key}, body)
end
`)

// statusLua counts wrk's answers by status, which wrk alone does not (it counts non-2xx, all
// together), and prints the counts when the run is over, one line per thread and status. It
// sends GETs of the URL wrk was given, or, when $PRODUCT is set, a new order of one unit of
// that product per request, with its own customer and Idempotency-Key as in orderLua. A 409
// whose problem code is not sold-out is counted apart: the sold-out rounds must see none.
// Every round of the -cache mode runs this one script, so that the counting costs each kind
// of round the same.
var statusLua = wrkScript(`
local product = os.getenv("PRODUCT")
function start()
  notSoldOut = 0
end
if product then
  function request()
    local key = newKey("wrk")
    local body = string.format('{"customer_id":"c%d-%d","items":[{"product_id":%s,"quantity":1}]}', tid, counter, product)
    return wrk.format("POST", "/v1/orders", {["Content-Type"] = "application/json", ["Idempotency-Key"] = key}, body)
  end
end
function response(status, headers, body)
  countStatus(status)
  if status == 409 and not string.find(body or "", '"code":"sold-out"', 1, true) then
    notSoldOut = notSoldOut + 1
  end
end
function done(summary, latency, requests)
  printStatuses(function(t)
    io.write(string.format("wrk-409-not-sold-out %d\n", t:get("notSoldOut")))
  end)
end
`)

// notCreated counts the answers wrk saw that were not a 2xx: it does not tell them apart.
const notCreated = 999

var (
	wrkTotal    = regexp.MustCompile(`(\d+) requests in ([0-9.]+)(us|ms|s|m)`)
	wrkNon2xx   = regexp.MustCompile(`Non-2xx or 3xx responses: (\d+)`)
	wrkSocket   = regexp.MustCompile(`Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)`)
	wrkLatLine  = regexp.MustCompile(`(?m)^\s+(50|99)%\s+([0-9.]+)(us|ms|s)\s*$`)
	durationFor = map[string]time.Duration{"us": time.Microsecond, "ms": time.Millisecond, "s": time.Second, "m": time.Minute}
)

// wrkLoop runs clients connections of wrk against the deployment d for dur, buying product:
// closed-loop when rate is 0, else each connection paced to send one request every
// clients/rate seconds (an arrival rate of about rate while answers are fast; a connection
// still waits for its answer, so a deployment that falls behind is offered less, which sent/s
// then shows).
func (h *harness) wrkLoop(ctx context.Context, d *deployment, name string, product int64, clients int, rate float64, dur time.Duration) (phase, error) {
	script := filepath.Join(d.dir, "order.lua")
	if err := os.WriteFile(script, []byte(orderLua), 0o644); err != nil {
		return phase{}, err
	}
	env := []string{"PRODUCT=" + strconv.FormatInt(product, 10)}
	if rate > 0 {
		env = append(env, "DELAY_MS="+strconv.Itoa(max(1, int(float64(clients)*1000/rate))))
	}
	return h.wrkRun(ctx, d, name, []string{"-s", script}, "", env, clients, dur)
}

// wrkGets runs clients connections of wrk, each sending GET path in a closed loop, against the
// deployment d for dur. wrk's own requests, without a script: the cheapest load it makes. Every
// 2xx is counted as a 200.
func (h *harness) wrkGets(ctx context.Context, d *deployment, name, path string, clients int, dur time.Duration) (phase, error) {
	p, err := h.wrkRun(ctx, d, name, nil, path, nil, clients, dur)
	if err != nil {
		return phase{}, err
	}
	p.counts[http.StatusOK] = p.counts[http.StatusCreated]
	delete(p.counts, http.StatusCreated)
	p.pct[http.StatusOK] = p.pct[http.StatusCreated]
	delete(p.pct, http.StatusCreated)
	return p, nil
}

// wrkRun runs wrk with args (a script) against path on d's balancer, with env, and samples the
// CPU and the batches around it.
func (h *harness) wrkRun(ctx context.Context, d *deployment, name string, args []string, path string, env []string, clients int, dur time.Duration) (phase, error) {
	before, err := d.sample(ctx)
	if err != nil {
		return phase{}, err
	}
	argv := append([]string{"-t", "2", "-c", strconv.Itoa(clients), "-d", fmt.Sprintf("%ds", int(dur.Seconds())), "--latency"}, args...)
	argv = append(argv, fmt.Sprintf("http://127.0.0.1:%d%s", d.front, path))
	cmd := exec.CommandContext(ctx, h.Wrk, argv...)
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return phase{}, fmt.Errorf("wrk: %w: %s", err, out.String())
	}
	after, err := d.sample(ctx)
	if err != nil {
		return phase{}, err
	}
	_ = os.WriteFile(filepath.Join(d.dir, strings.ReplaceAll(name, " ", "-")+".wrk.txt"), out.Bytes(), 0o644)
	p, err := parseWrk(out.String())
	if err != nil {
		return phase{}, err
	}
	p.name, p.generator = name, "wrk"
	for _, e := range env {
		if ms, ok := strings.CutPrefix(e, "DELAY_MS="); ok {
			n, _ := strconv.Atoi(ms)
			p.offered = float64(clients) * 1000 / float64(n)
		}
	}
	p.cpu = after.cpu.minus(before.cpu)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		p.cpu["load generator"] += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	p.batches = after.batches.minus(before.batches)
	return p, nil
}

// parseWrk reads what wrk printed: every answer not counted as non-2xx is a 201 here (the only
// 2xx an order gets), and wrk's latency percentiles are over all answers.
func parseWrk(out string) (phase, error) {
	s, err := parseWrkSummary(out)
	if err != nil {
		return phase{}, err
	}
	p := phase{window: s.window}
	p.counts = map[uint16]int{http.StatusCreated: s.requests - s.non2xx, 0: s.failed}
	if s.non2xx > 0 {
		p.counts[notCreated] = s.non2xx // wrk does not say which: 429s under overload, mostly
	}
	p.pct = map[uint16][2]float64{http.StatusCreated: {s.p50, s.p99}}
	return p, nil
}

// wrkSummary is what wrk prints at the end of a run.
type wrkSummary struct {
	requests int           // answers received
	non2xx   int           // answers other than 2xx and 3xx
	failed   int           // socket errors: connect, read, write and timeout
	window   time.Duration // how long wrk ran
	p50, p99 float64       // ms, over all answers
	// statuses counts the answers by status, and notSoldOut the 409s whose problem code was
	// not sold-out; both only when the script was statusLua (nil and 0 otherwise).
	statuses   map[int]int
	notSoldOut int
}

var (
	wrkStatus     = regexp.MustCompile(`(?m)^wrk-status (\d+) (\d+)$`)
	wrkNotSoldOut = regexp.MustCompile(`(?m)^wrk-409-not-sold-out (\d+)$`)
)

func parseWrkSummary(out string) (wrkSummary, error) {
	var s wrkSummary
	m := wrkTotal.FindStringSubmatch(out)
	if m == nil {
		return s, errors.New("wrk printed no request count: " + out)
	}
	s.requests, _ = strconv.Atoi(m[1])
	secs, _ := strconv.ParseFloat(m[2], 64)
	s.window = time.Duration(secs * float64(durationFor[m[3]]))
	if m := wrkNon2xx.FindStringSubmatch(out); m != nil {
		s.non2xx, _ = strconv.Atoi(m[1])
	}
	if m := wrkSocket.FindStringSubmatch(out); m != nil {
		for _, f := range m[1:] {
			n, _ := strconv.Atoi(f)
			s.failed += n
		}
	}
	for _, m := range wrkLatLine.FindAllStringSubmatch(out, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		ms := v * float64(durationFor[m[3]]) / float64(time.Millisecond)
		if m[1] == "50" {
			s.p50 = ms
		} else {
			s.p99 = ms
		}
	}
	for _, m := range wrkStatus.FindAllStringSubmatch(out, -1) {
		if s.statuses == nil {
			s.statuses = map[int]int{}
		}
		code, _ := strconv.Atoi(m[1])
		n, _ := strconv.Atoi(m[2])
		s.statuses[code] += n // one line per wrk thread
	}
	for _, m := range wrkNotSoldOut.FindAllStringSubmatch(out, -1) {
		n, _ := strconv.Atoi(m[1])
		s.notSoldOut += n
	}
	return s, nil
}
