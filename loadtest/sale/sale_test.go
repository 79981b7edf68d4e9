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
			err := h.report(run, Options{Duration: 30 * time.Second}, c.invariants, nil, timing{})
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

func TestHotScenarios(t *testing.T) {
	t.Parallel()
	if got := hotScenarios("rush,carts, retries,race"); got != "rush, carts, retries" {
		t.Errorf("hotScenarios = %q, want the race left out", got)
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
