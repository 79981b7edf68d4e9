package main

import (
	"context"
	"encoding/binary"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// pgMessage encodes one backend message.
func pgMessage(typ byte, body string) []byte {
	b := []byte{typ, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(4+len(body)))
	return append(b, body...)
}

// TestPGWatchFindsCommitPoints feeds the commit cut's protocol reader what Postgres answers
// for an explicit transaction, an implicit one, a read and a rollback, split at every byte:
// only the two commits of writes are commit points.
func TestPGWatchFindsCommitPoints(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		stream [][]byte
		want   bool
	}{
		{"explicit transaction", [][]byte{pgMessage('C', "BEGIN\x00"), pgMessage('Z', "T"), pgMessage('C', "UPDATE 1\x00"),
			pgMessage('Z', "T"), pgMessage('C', "INSERT 0 1\x00"), pgMessage('Z', "T"), pgMessage('C', "COMMIT\x00"), pgMessage('Z', "I")}, true},
		{"implicit transaction", [][]byte{pgMessage('1', ""), pgMessage('2', ""), pgMessage('D', "\x00\x01\x00\x00\x00\x015"),
			pgMessage('C', "UPDATE 1\x00"), pgMessage('Z', "I")}, true},
		{"read", [][]byte{pgMessage('T', strings.Repeat("x", 300)), pgMessage('D', "row"), pgMessage('C', "SELECT 1\x00"), pgMessage('Z', "I")}, false},
		{"rollback", [][]byte{pgMessage('C', "BEGIN\x00"), pgMessage('Z', "T"), pgMessage('C', "UPDATE 1\x00"), pgMessage('Z', "T"),
			pgMessage('C', "ROLLBACK\x00"), pgMessage('Z', "I")}, false},
		{"failed transaction", [][]byte{pgMessage('C', "UPDATE 1\x00"), pgMessage('Z', "T"), pgMessage('E', "SERROR\x00"), pgMessage('Z', "E"),
			pgMessage('C', "ROLLBACK\x00"), pgMessage('Z', "I")}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var all []byte
			for _, m := range c.stream {
				all = append(all, m...)
			}
			for split := 0; split <= len(all); split++ {
				var w pgWatch
				got := w.feed(all[:split])
				got = w.feed(all[split:]) || got
				if got != c.want {
					t.Fatalf("split at %d: commit point = %v, want %v", split, got, c.want)
				}
			}
			var w pgWatch
			if got := w.feed(all) || w.feed(all); got != c.want {
				t.Errorf("twice in one stream: commit point = %v, want %v", got, c.want)
			}
		})
	}
}

func TestPickScenarios(t *testing.T) {
	t.Parallel()
	all, err := pickScenarios("all")
	if err != nil || len(all) < 13 {
		t.Fatalf("all = %d scenarios, %v", len(all), err)
	}
	two, err := pickScenarios("kill-replica, expire-locks")
	if err != nil || len(two) != 2 || two[0].name != "kill-replica" || two[1].name != "expire-locks" {
		t.Errorf("two = %+v, %v", two, err)
	}
	if _, err := pickScenarios("kill-everything"); err == nil {
		t.Error("an unknown scenario was accepted")
	}
	if _, err := parseOptions([]string{"-fault", "burst", "-runs", "0"}, io.Discard); err == nil {
		t.Error("-runs 0 was accepted")
	}
}

func TestMeasureAvailability(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	ops := []*op{
		{in: stockInput{Kind: kindOrder}, out: stockOutput{Outcome: outConfirmed}, attempts: []attempt{{start: ms(0), end: ms(10), status: 201, replica: true}}},
		{in: stockInput{Kind: kindOrder}, out: stockOutput{Outcome: outConfirmed}, attempts: []attempt{
			{start: ms(20), end: ms(120), status: 503, code: "unavailable", replica: true},
			{start: ms(300), end: ms(350), status: 409, code: "idempotency-key-in-flight", replica: true},
			{start: ms(500), end: ms(2510), status: 201, replica: true}}},
		{in: stockInput{Kind: kindOrder}, out: stockOutput{Outcome: outSoldOut}, attempts: []attempt{
			{start: ms(30), end: ms(230), status: 429, code: "busy", replica: true},
			{start: ms(2600), end: ms(2700), status: 409, code: "sold-out", replica: true}}},
		{in: stockInput{Kind: kindRead}, out: stockOutput{Outcome: outRefused}, attempts: []attempt{{start: ms(40), end: ms(5040), err: "timeout"}}},
	}
	a := measureAvailability(ops, []window{{ms(100), ms(400)}})
	if a.longestStall != ms(2500) || a.stallAt != ms(10) {
		t.Errorf("longest stall %v from %v, want 2.5s from 10ms", a.longestStall, a.stallAt)
	}
	if a.busy != ms(100) || a.unavailable != ms(100) {
		t.Errorf("busy %v, unavailable %v; want 100ms each (the 429, the 503; the timed-out read is not an order)", a.busy, a.unavailable)
	}
	if a.failedAttempts != 2 || a.timeouts != 1 || a.staleInFlight != 1 {
		t.Errorf("failed %d, timeouts %d, stale in-flight %d; want 2, 1, 1", a.failedAttempts, a.timeouts, a.staleInFlight)
	}
	if a.duringFault[503] != 1 || a.duringFault[429] != 1 || a.duringFault[409] != 1 {
		t.Errorf("answers during the fault = %v", a.duringFault)
	}
	if a.slowest != ms(2010) {
		t.Errorf("slowest answer %v, want 2.01s", a.slowest)
	}
}

// TestDrillCatchesUnsafeDefense runs a real drill — two replicas on their own database and
// key prefix, a burst of orders — with every defense layer off (STOCKSVC_DEFENSE=none: read
// the stock, write back stock − quantity). Concurrent buyers then overwrite each other's
// decrements, and the checker must say so: the history is not linearizable, Porcupine's
// picture is written, and the SQL verdict finds the units sold beyond the stock.
func TestDrillCatchesUnsafeDefense(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two replicas and sells for about 10 s")
	}
	databaseURL, redisURL := testenv.DatabaseURL(t), testenv.RedisURL(t)
	dir := t.TempDir()
	binary := filepath.Join(dir, "stocksvc")
	build := exec.Command("go", "build", "-o", binary, "github.com/stocksvc/stocksvc/cmd/stocksvc")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build stocksvc: %v\n%s", err, out)
	}
	var log strings.Builder
	h := &harness{w: &log, out: dir, binary: binary, opts: options{
		replicas: 2, defense: "none", lockWait: 2 * time.Second, lockTTL: 2 * time.Second, direct: true,
		databaseURL: databaseURL, redisURL: redisURL, drillRate: 40, clientTimeout: 5 * time.Second, checkTimeout: time.Minute,
	}}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	sc, err := pickScenarios("burst")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := h.runDrill(ctx, h.drillPlan(), sc[0], 1, 7)
	if o.err != nil {
		t.Fatalf("drill: %v\n%s", o.err, log.String())
	}
	h.printOutcome(o)
	if testing.Verbose() {
		t.Log(log.String())
	}
	if o.verdict() != "FAIL" || o.writes.result != porcupine.Illegal {
		t.Fatalf("verdict %s, orders+restocks %v: the unsafe defense passed the checker\n%s", o.verdict(), o.writes.result, log.String())
	}
	if _, err := os.Stat(o.writes.visual); err != nil {
		t.Errorf("no visualisation of the violation: %v", err)
	}
	sqlCaught := false
	for _, inv := range o.invariants {
		if !inv.ok && (inv.name == "no oversell" || strings.HasPrefix(inv.name, "conservation")) {
			sqlCaught = true
		}
	}
	if !sqlCaught {
		t.Errorf("the SQL verdict did not see the lost updates:\n%s", log.String())
	}
}
