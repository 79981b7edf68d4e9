package faults

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

func TestMain(m *testing.M) { testenv.Main(m) }

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
	if err := CheckScenarios("kill-replica,restart-redis", 3); err == nil {
		t.Error("a Redlock run accepted a drill that restarts the one Redis")
	}
	if err := CheckScenarios("kill-replica,restart-redlock-node", 3); err != nil {
		t.Errorf("a Redlock run refused its drills: %v", err)
	}
}

func TestMeasureAvailability(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	ops := []*model.Op{
		{In: model.Input{Kind: model.KindOrder}, Out: model.Output{Outcome: model.Confirmed}, Attempts: []model.Attempt{{Start: ms(0), End: ms(10), Status: 201, Replica: true}}},
		{In: model.Input{Kind: model.KindOrder}, Out: model.Output{Outcome: model.Confirmed}, Attempts: []model.Attempt{
			{Start: ms(20), End: ms(120), Status: 503, Code: "unavailable", Replica: true},
			{Start: ms(300), End: ms(350), Status: 409, Code: "idempotency-key-in-flight", Replica: true},
			{Start: ms(500), End: ms(2510), Status: 201, Replica: true}}},
		{In: model.Input{Kind: model.KindOrder}, Out: model.Output{Outcome: model.SoldOut}, Attempts: []model.Attempt{
			{Start: ms(30), End: ms(230), Status: 429, Code: "busy", Replica: true},
			{Start: ms(2600), End: ms(2700), Status: 409, Code: "sold-out", Replica: true}}},
		{In: model.Input{Kind: model.KindRead}, Out: model.Output{Outcome: model.Refused}, Attempts: []model.Attempt{{Start: ms(40), End: ms(5040), Err: "timeout"}}},
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
// key prefix, the usual load, and volleys of simultaneous orders — with every defense layer off (STOCKSVC_DEFENSE=none: read
// the stock, write back stock − quantity). Concurrent buyers then overwrite each other's
// decrements, and the checker must say so: a history is not linearizable, and Porcupine's
// picture is written. (The SQL verdict usually fails too; this test is about the checker.)
func TestDrillCatchesUnsafeDefense(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts two replicas and sells for about 10 s")
	}
	databaseURL, redisURL := testenv.DatabaseURL(t), testenv.RedisURL(t)
	dir := t.TempDir()
	binary := filepath.Join(dir, "stocksvc")
	var buildLog strings.Builder
	if err := cluster.BuildService(t.Context(), binary, &buildLog); err != nil {
		t.Fatalf("%v\n%s", err, buildLog.String())
	}
	var log strings.Builder
	h := &harness{&env.Harness{W: &log, Out: dir, Binary: binary, Cluster: env.ClusterOptions{
		Replicas: 2, Defense: "none", LockWait: 2 * time.Second, DatabaseURL: databaseURL, RedisURL: redisURL,
	}}}
	drills := DrillOptions{LockTTL: 2 * time.Second, Direct: true,
		// A modest rate keeps the history narrow enough for Porcupine to prove the violation
		// quickly, even under the race detector on a busy machine; the volleys overlap buyers.
		Rate: 15, ClientTimeout: 5 * time.Second, CheckTimeout: 2 * time.Minute,
	}
	t.Cleanup(http.DefaultClient.CloseIdleConnections)
	// Volleys of eight simultaneous orders for the hot product, spread over both replicas:
	// without a lock or a condition on the write, simultaneous buyers read the same stock.
	volleys := scenario{name: "volleys", about: "volleys of 8 simultaneous hot orders, every 100 ms for 2 s",
		expected: 2 * time.Second, extraLoad: 20, inject: func(ctx context.Context, d *drillEnv) error {
			for range 20 {
				for range 8 {
					d.client.Go(func() { d.client.Order(context.WithoutCancel(ctx), d.hot, 1) })
				}
				if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
					return err
				}
			}
			return nil
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	o := h.runDrill(ctx, drills.plan(), volleys, 1, 7)
	if o.err != nil {
		t.Fatalf("drill: %v\n%s", o.err, log.String())
	}
	h.printOutcome(o)
	if testing.Verbose() {
		t.Log(log.String())
	}
	var caught model.CheckResult
	for _, c := range []model.CheckResult{o.writes, o.reads} {
		if c.Result == porcupine.Illegal {
			caught = c
		}
	}
	if o.verdict() != "FAIL" || caught.Result != porcupine.Illegal {
		t.Fatalf("verdict %s, orders+restocks %v, with reads %v: the unsafe defense passed the checker\n%s",
			o.verdict(), o.writes.Result, o.reads.Result, log.String())
	}
	if _, err := os.Stat(caught.Visual); err != nil {
		t.Errorf("no visualisation of the violation: %v", err)
	}
}

// TestNoFenceCatches: a Redlock drill fails when the fence refused any write, since with no
// lock lost that means a fencing token went backwards.
func TestNoFenceCatches(t *testing.T) {
	t.Parallel()
	for _, n := range []float64{0, 1, 3} {
		d := &drillEnv{catches: map[string]float64{"fence": n, "version": 2}}
		if failed, _ := noFenceCatches(d, nil, availability{}); (len(failed) > 0) != (n > 0) {
			t.Errorf("%v fence catches: failed = %q", n, failed)
		}
	}
}
