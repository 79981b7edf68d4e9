package sale

import (
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

func TestReadOrderLog(t *testing.T) {
	t.Parallel()
	id1, id2 := uuid.New(), uuid.New()
	log := `time="2026-11-22T05:29:31Z" level=info msg="ORDER ` + id1.String() + ` hot=2" source=console
time="2026-11-22T05:29:31Z" level=info msg="something else" source=console
time="2026-11-22T05:29:32Z" level=info msg="ORDER ` + id2.String() + ` second=1,hot=1" source=console
`
	path := filepath.Join(t.TempDir(), "console.log")
	if err := os.WriteFile(path, []byte(log), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readOrderLog(path)
	if err != nil {
		t.Fatalf("readOrderLog: %v", err)
	}
	if len(got) != 2 || got[0].id != id1 || got[0].units["hot"] != 2 || got[1].id != id2 || got[1].units["second"] != 1 || got[1].units["hot"] != 1 {
		t.Errorf("readOrderLog = %+v", got)
	}
	if err := os.WriteFile(path, []byte(`msg="ORDER not-a-uuid hot=1"`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readOrderLog(path); err == nil {
		t.Errorf("a malformed order line was accepted")
	}
}

func TestReadOrderSamples(t *testing.T) {
	t.Parallel()
	csvText := `metric_name,timestamp,metric_value,check,error,error_code,expected_response,group,method,name,proto,scenario,service,status,subproto,tls_version,url,extra_tags,metadata
http_reqs,1795325371700,1.000000,,,,true,,POST,POST /v1/orders,HTTP/1.1,rush,,201,,,u,,
http_req_duration,1795325371700,12.500000,,,,true,,POST,POST /v1/orders,HTTP/1.1,rush,,201,,,u,,
http_req_duration,1795325371650,3.000000,,,,true,,POST,POST /v1/orders,HTTP/1.1,rush,,429,,,u,,
http_req_duration,1795325371600,1.000000,,,,true,,GET,GET /readyz,HTTP/1.1,,,200,,,u,,
`
	path := filepath.Join(t.TempDir(), "requests.csv.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gz := gzip.NewWriter(f)
	if _, err := gz.Write([]byte(csvText)); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	got, err := readOrderSamples(path)
	if err != nil {
		t.Fatalf("readOrderSamples: %v", err)
	}
	if len(got) != 2 || got[0].status != 429 || got[1].status != 201 || got[1].duration != 12.5 || !got[1].end.Equal(time.UnixMilli(1795325371700)) ||
		got[1].scenario != "rush" {
		t.Errorf("samples = %+v, want the two order durations sorted by end time", got)
	}
}

func TestComparisonTable(t *testing.T) {
	t.Parallel()
	rows := []Comparison{
		{label: "a", title: "(a) default", PurchasesPerS: 200, sellOut: 3 * time.Second, sold: 1000, stock: 1000, P99Confirmed: 20, p99All: 10},
		{label: "b", title: "(b) naive", PurchasesPerS: 100, sold: 800, stock: 1000, refusedShare: 0.25, P99Confirmed: 300, p99All: 310},
	}
	got := comparisonTable(rows, 3, Options{Rate: 300, Duration: 15 * time.Second, Stock: 1000})
	for _, want := range []string{"| (a) default | 200 | 3s | 0.0% |", "| (b) naive | 100 (0.50×) | not sold out (800/1000) | 25.0% |"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

// TestReportVerdict: a run cut short by Ctrl-C is neither a pass nor a finding (k6's own
// non-zero exit on interruption included), unless what did run broke an invariant.
func TestReportVerdict(t *testing.T) {
	t.Parallel()
	held := []verdict.Invariant{{Name: "no oversell", OK: true, Detail: "0 units"}}
	broken := []verdict.Invariant{{Name: "no oversell", OK: false, Detail: "3 units"}}
	k6Interrupted := errors.New("exit status 105")
	cases := []struct {
		name       string
		stopped    bool
		k6Err      error
		invariants []verdict.Invariant
		want       error
		verdict    string
	}{
		{"completed", false, nil, held, nil, "verdict       PASS"},
		{"violation", false, nil, broken, env.ErrFailed, "verdict       FAIL"},
		{"k6 failed", false, errors.New("exit status 99"), held, env.ErrFailed, "verdict       FAIL"},
		{"stopped", true, k6Interrupted, held, env.ErrStopped, "verdict       STOPPED early"},
		{"stopped with a violation", true, k6Interrupted, broken, env.ErrFailed, "verdict       FAIL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var out strings.Builder
			h := &harness{&env.Harness{Cluster: env.ClusterOptions{Replicas: 1}, W: &out}}
			run := &saleRun{killed: -1, stopped: c.stopped, k6Err: c.k6Err, dir: t.TempDir(),
				replicas: []replicaReport{{name: "r1"}}}
			run.summary.State.TestRunDurationMs = 12_000
			err := h.report(run, Options{Duration: 30 * time.Second}, c.invariants, nil, timing{}, orderLog{})
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Errorf("report() = %v, want %v", err, c.want)
			}
			if !strings.Contains(out.String(), c.verdict) {
				t.Errorf("summary lacks %q:\n%s", c.verdict, out.String())
			}
			if stoppedLine := strings.Contains(out.String(), "stopped       by a signal after 12.0s of 30s"); stoppedLine != c.stopped {
				t.Errorf("summary says stopped = %v, want %v:\n%s", stoppedLine, c.stopped, out.String())
			}
		})
	}
}

// TestCustomers: in token mode the sale mints a token for each of the customers vu-1, vu-2,
// ... that the replicas, set up by the identity's Env, accept as those customers; in body
// mode there is no identity and no tokens file.
func TestCustomers(t *testing.T) {
	t.Parallel()
	h := &harness{&env.Harness{W: io.Discard}}
	dir := t.TempDir()
	id, path, err := h.customers(dir, "sale", Options{VUs: 10, CustomerAuth: "token"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []string
	if err := json.Unmarshal(b, &tokens); err != nil {
		t.Fatal(err)
	}
	if len(tokens) != tokenCustomers(10) || tokenCustomers(10) < 2*10+2*4+50 {
		t.Fatalf("%d tokens, want tokenCustomers(10) = %d, as many as flashsale.js may start VUs", len(tokens), tokenCustomers(10))
	}
	settings := map[string]string{}
	for _, kv := range id.Env() {
		k, v, _ := strings.Cut(kv, "=")
		settings[k] = v
	}
	v, err := identity.NewVerifier(context.Background(), identity.Config{Issuer: settings["STOCKSVC_JWT_ISSUER"],
		Audience: settings["STOCKSVC_JWT_AUDIENCE"], JWKSFile: settings["STOCKSVC_JWKS_FILE"]})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for i, tok := range []string{tokens[0], tokens[len(tokens)-1]} {
		want := []string{"vu-1", "vu-" + strconv.Itoa(len(tokens))}[i]
		if got, err := v.Verify(context.Background(), tok); err != nil || got != want {
			t.Errorf("token for %s verifies as %q, %v", want, got, err)
		}
	}

	id, path, err = h.customers(t.TempDir(), "sale", Options{VUs: 10, CustomerAuth: "body"})
	if id != nil || path != "" || err != nil {
		t.Errorf("body mode: identity %v, tokens %q, %v; want none", id, path, err)
	}
}

// TestTotalsMatchTheConsole: the report page's totals and latency are the console's, from the
// same figures: the counts k6 kept, the replicas' and the balancer's, and the latency of the
// orders in k6's request log by outcome, which the page's own table computes the same way.
func TestTotalsMatchTheConsole(t *testing.T) {
	t.Parallel()
	run := &saleRun{killed: 1, dir: t.TempDir(), balancer: map[string]int64{"r1": 700, "r2": 90},
		replicas: []replicaReport{{name: "r1", orders: 690, catches: map[string]float64{"guard": 4, "fence": 1}}, {name: "r2", killed: true}}}
	summary := `{"state": {"testRunDurationMs": 10000}, "metrics": {
		"confirmed_orders": {"values": {"count": 50}}, "confirmed_units_hot": {"values": {"count": 100}},
		"confirmed_units_second": {"values": {"count": 7}}, "sold_out": {"values": {"count": 600}},
		"busy": {"values": {"count": 3}}, "http_reqs": {"values": {"count": 800}},
		"http_req_failed": {"values": {"rate": 0.00125}}, "dropped_iterations": {"values": {"count": 2}}}}`
	if err := json.Unmarshal([]byte(summary), &run.summary); err != nil {
		t.Fatal(err)
	}
	var log orderLog
	for i := range 100 {
		// Confirmed answers of 1..100 ms, sold-out ones of 2 ms, one unavailable of 900 ms.
		log.answers = append(log.answers,
			report.Answer{At: time.Duration(i) * time.Millisecond, Latency: time.Duration(i+1) * time.Millisecond, Class: report.Confirmed},
			report.Answer{At: time.Second, Latency: 2 * time.Millisecond, Class: report.SoldOut})
	}
	log.answers = append(log.answers, report.Answer{At: 2 * time.Second, Latency: 900 * time.Millisecond, Class: report.Down})
	var out strings.Builder
	h := &harness{&env.Harness{Cluster: env.ClusterOptions{Replicas: 2}, W: &out}}
	if err := h.report(run, Options{Duration: 10 * time.Second}, nil, nil, timing{}, log); err != nil {
		t.Fatalf("report() = %v", err)
	}
	console := out.String()
	for _, want := range []string{
		"purchases     50 confirmed = 5.0/s over 10.0s", "units sold    hot 100, second 7, race 0",
		"rejections    sold-out 600 (60.0/s), busy 3 (0.3/s), other 0, unavailable 1",
		// Nearest rank over the 100 confirmed answers: p99 is the 99th, 99 ms.
		"confirmed  50.0/ 95.0/  99.0 ms   sold-out   2.0/  2.0/   2.0 ms   busy       -",
		"requests      800, failed 0.125%, dropped iterations 2",
		"per replica   r1 690 orders (balancer: 700 reqs), r2 killed (balancer: 90)",
		"layer catches version 0, guard 4, fence 1, check 0",
	} {
		if !strings.Contains(console, want) {
			t.Errorf("the console lacks %q:\n%s", want, console)
		}
	}
	page := map[string]string{}
	for _, g := range newSaleTotals(run, log, timing{}).groups() {
		for _, f := range g.Fields {
			page[g.Name+"/"+f.Name] = f.Value
		}
	}
	for key, want := range map[string]string{
		"Totals/orders confirmed": "50 (5.0/s)", "Totals/units sold": "hot 100, second 7, race 0",
		"Refusals by reason/sold-out": "600 (60.0/s)", "Refusals by reason/unavailable": "1",
		"Requests/failed": "0.125%", "Per replica/r2": "killed (balancer: 90)", "Defense-layer catches (live replicas)/guard": "4",
	} {
		if page[key] != want {
			t.Errorf("the page's %s = %q, want %q as the console", key, page[key], want)
		}
	}
	// The page's latency table is report.LatencyOf over the same answers.
	if l := report.LatencyOf(log.answers, report.Confirmed); l.P99 != 99 || l.N != 100 {
		t.Errorf("the page's confirmed latency %+v, want the console's p99 of 99 ms over 100 answers", l)
	}
}
