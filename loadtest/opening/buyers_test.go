package opening

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeLine is a line of one ticket, as the service's routes answer it: the ticket waits
// until admit is closed (a long-poll answers 304 until then), then it is admitted; an order
// with the pass wins unless soldOut, one without is not-admitted.
type fakeLine struct {
	mu      sync.Mutex
	admit   chan struct{}
	soldOut bool
	seen    []string // method and path (and which credential) of every request
	left    bool
	// runOut is how many orders waiting in line (Line-Ticket, Prefer: wait) see their wait run
	// out before the ticket is admitted (then admit is not looked at).
	runOut int
}

func (f *fakeLine) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	what := r.Method + " " + r.URL.Path
	if r.Header.Get("Line-Pass") != "" {
		what += " pass"
	}
	inLine := r.URL.Path == "/v1/orders" && r.Header.Get("Line-Ticket") == "T" && r.Header.Get("Prefer") != ""
	if inLine {
		what += " ticket"
	}
	f.seen = append(f.seen, what)
	soldOut := f.soldOut
	admitted := false
	select {
	case <-f.admit:
		admitted = true
	default:
	}
	if inLine && f.runOut > 0 {
		f.runOut--
		admitted = false
		w.Header().Set("Preference-Applied", "wait=10")
	}
	f.mu.Unlock()
	ticket := func(status string) {
		w.Header().Set("ETag", `"`+status+`"`)
		w.Header().Set("Content-Type", "application/json")
		body := `{"status":"` + status + `","ticket":"T"`
		if status == "admitted" {
			body += `,"pass":"P"`
		}
		_, _ = w.Write([]byte(body + "}"))
	}
	problem := func(status int, code string) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(status)
		_, _ = w.Write([]byte(`{"code":"` + code + `"}`))
	}
	state := "waiting"
	switch {
	case soldOut:
		state = "sold_out"
	case admitted:
		state = "admitted"
	}
	switch {
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/line"):
		w.WriteHeader(http.StatusCreated)
		ticket("queued")
	case r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/line/ticket"):
		if r.Header.Get("If-None-Match") == `"`+state+`"` {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		ticket(state)
	case r.Method == http.MethodDelete:
		f.mu.Lock()
		f.left = true
		f.mu.Unlock()
		ticket("left")
	case r.URL.Path == "/v1/orders" && (r.Header.Get("Line-Pass") == "P" || inLine && admitted) && !soldOut:
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"status":"confirmed"}`))
	case r.URL.Path == "/v1/orders" && soldOut:
		problem(http.StatusConflict, "sold-out")
	default:
		problem(http.StatusConflict, "not-admitted")
	}
}

func newFake(t *testing.T) (*fakeLine, *buyer) {
	t.Helper()
	f := &fakeLine{admit: make(chan struct{})}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	b := newBuyer(srv.URL, "tok", "c", 1)
	t.Cleanup(b.close)
	return f, b
}

// TestPoliteInLine: a polite buyer joins and sends its order with its ticket to wait in line,
// sends it again at once when the wait ran out, and wins once admitted.
func TestPoliteInLine(t *testing.T) {
	t.Parallel()
	f, b := newFake(t)
	f.runOut = 1
	close(f.admit)
	o := politeInLine(context.Background(), b, time.Now(), false)
	if !o.won || o.unresolved || o.left {
		t.Fatalf("outcome %+v, want won", o)
	}
	if got := strings.Join(f.seen, ", "); got != "POST /v1/products/1/line, POST /v1/orders ticket, POST /v1/orders ticket" {
		t.Errorf("requests: %s", got)
	}
	if o.requests != 3 {
		t.Errorf("requests counted %d, want 3", o.requests)
	}
}

// TestPoliteInLineHearsSoldOut: told sold_out while waiting, a polite buyer stops and notes
// when; a leaver leaves at its first status after joining.
func TestPoliteInLineHearsSoldOut(t *testing.T) {
	t.Parallel()
	f, b := newFake(t)
	f.soldOut = true
	before := time.Now()
	o := politeInLine(context.Background(), b, time.Now(), false)
	if o.won || !o.waited || o.learnt.Before(before) {
		t.Errorf("outcome %+v, want waited and learnt", o)
	}
	f2, b2 := newFake(t)
	o = politeInLine(context.Background(), b2, time.Now(), true)
	if !o.left || !f2.left || o.won {
		t.Errorf("leaver: outcome %+v, fake left %v", o, f2.left)
	}
}

// TestScript: a script cycles join, plain poll, order without a pass, order with its pass,
// and wins once admitted; without a line it only sends orders, and stops at sold-out.
func TestScript(t *testing.T) {
	t.Parallel()
	f, b := newFake(t)
	close(f.admit)
	o := script(context.Background(), b, time.Now(), true)
	if !o.won {
		t.Fatalf("outcome %+v, want won", o)
	}
	want := "POST /v1/products/1/line, GET /v1/products/1/line/ticket, POST /v1/orders, POST /v1/orders pass"
	if got := strings.Join(f.seen, ", "); got != want {
		t.Errorf("requests: %s, want %s", got, want)
	}
	f2, b2 := newFake(t)
	f2.soldOut = true
	o = script(context.Background(), b2, time.Now(), false)
	if o.won || o.learnt.IsZero() || strings.Join(f2.seen, ",") != "POST /v1/orders" {
		t.Errorf("without a line: outcome %+v after %v", o, f2.seen)
	}
}

// TestPoliteNoLine: without a line a polite buyer comes back when told and stops at sold-out;
// a round that ends first leaves it unresolved.
func TestPoliteNoLine(t *testing.T) {
	t.Parallel()
	f, b := newFake(t)
	f.soldOut = true
	if o := politeNoLine(context.Background(), b, time.Now()); o.won || !o.waited || o.learnt.IsZero() {
		t.Errorf("outcome %+v, want sold out heard", o)
	}
	_, b2 := newFake(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if o := politeNoLine(ctx, b2, time.Now().Add(time.Hour)); !o.unresolved {
		t.Errorf("outcome %+v, want unresolved", o)
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	ds := []time.Duration{5, 1, 4, 2, 3}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{0.5, 3}, {1, 5}, {0.99, 5}, {0.2, 1}} {
		if got := percentile(ds, c.p); got != c.want {
			t.Errorf("percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if percentile(nil, 0.5) != 0 {
		t.Error("no values: 0")
	}
}

// TestFairReport: the table has a row per round, the probability per mix, the speed ratio of
// the medians, and the verdict fails on a ratio out of the bound with the line (not without).
func TestFairReport(t *testing.T) {
	t.Parallel()
	m := mix{200, 200, 200}
	rounds := []roundResult{
		{mix: m, seed: 1, lined: true, politeWins: 100, scriptWins: 100, soldOut: 300 * time.Millisecond, learnt: []time.Duration{20 * time.Millisecond}},
		{mix: m, seed: 1, lined: false, politeWins: 4, scriptWins: 196, soldOut: 200 * time.Millisecond},
	}
	text := fairReport([]mix{m}, rounds, nil, FairOptions{Leavers: 20})
	for _, want := range []string{"| 200 polite, 200 scripts, 200 units | 1 | with | 100 / 200 | 100 / 200 | 1.00 |", "| 4 / 200 | 196 / 200 | 0.02 |",
		"200 polite, 200 scripts, 200 units: 0.9787", "median 300ms with, 200ms without: 1.50×", "verdict: PASS"} {
		if !strings.Contains(text, want) {
			t.Errorf("report lacks %q:\n%s", want, text)
		}
	}
	rounds[0].politeWins, rounds[0].scriptWins = 80, 120
	if !fairFailed(rounds) {
		t.Error("a ratio of 0.67 with the line must fail")
	}
}
