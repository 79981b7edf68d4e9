package faults

import (
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

// TestRestartCountsOnlyItsOwnFailures: rolling-restart holds against the restart the failed
// requests made while it ran, not a read that timed out before it began (issue #31's run
// beside a CPU-bound loop: reads giving up after their second, 3 s before the first SIGTERM).
func TestRestartCountsOnlyItsOwnFailures(t *testing.T) {
	t.Parallel()
	s := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	op := func(kind model.Kind, ats ...model.Attempt) *model.Op {
		return &model.Op{In: model.Input{Kind: kind}, Attempts: ats}
	}
	ops := []*model.Op{
		op(model.KindRead, model.Attempt{Start: s(8), End: s(9), Err: "timeout"}),                                                      // before
		op(model.KindOrder, model.Attempt{Start: s(9.5), End: s(10.5), Status: 503, Code: "unavailable", Replica: true, Server: "r2"}), // across the start
		op(model.KindOrder, model.Attempt{Start: s(12), End: s(12.1), Status: 201, Replica: true}),                                     // during, fine
		op(model.KindRead, model.Attempt{Start: s(13), End: s(14), Err: "timeout"}),                                                    // during
		op(model.KindRead, model.Attempt{Start: s(30), End: s(31), Err: "timeout"}),                                                    // after
		{Final: true, In: model.Input{Kind: model.KindRead}, Attempts: []model.Attempt{{Start: s(12), End: s(12)}}},                    // the database's read: no request
	}
	attempts, failed, kinds := failedDuring(ops, []window{{start: s(10), end: s(25)}})
	if attempts != 3 || failed != 2 || kinds != "1× 503 unavailable from r2, 1× no answer (timeout)" {
		t.Errorf("failedDuring = %d attempts, %d failed (%s); want 3, 2 (1× 503 unavailable from r2, 1× no answer (timeout))", attempts, failed, kinds)
	}
}
