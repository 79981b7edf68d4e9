package faults

import (
	"net/http"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/model"
)

func TestNoSaleWindow(t *testing.T) {
	t.Parallel()
	s := time.Second
	order := func(attempts ...model.Attempt) *model.Op {
		return &model.Op{In: model.Input{Kind: model.KindOrder}, Attempts: attempts}
	}
	ok := func(start, end time.Duration) model.Attempt {
		return model.Attempt{Start: start, End: end, Status: http.StatusCreated}
	}
	failed := func(start, end time.Duration) model.Attempt {
		return model.Attempt{Start: start, End: end, Status: http.StatusServiceUnavailable}
	}
	tests := []struct {
		name      string
		ops       []*model.Op
		w         window
		gap, from time.Duration
	}{
		{"a kill: an order sent before and confirmed after says nothing", []*model.Op{
			order(ok(9*s, 11*s)), order(failed(10*s, 11*s), ok(12*s, 15*s)), order(ok(13*s, 14*s)),
		}, window{10 * s, 12 * s}, 4 * s, 10 * s},
		{"a switchover: the old primary sells a while, then none sells", []*model.Op{
			order(ok(10*s+s/10, 10*s+s/5)), order(ok(10*s+s/2, 10*s+6*s/10)), order(failed(11*s, 12*s), ok(13*s, 14*s)),
			order(ok(14*s, 14*s+s/10)),
		}, window{10 * s, 13 * s}, 14*s - (10*s + s/2), 10*s + s/2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			gap, from, found := noSaleWindow(tt.ops, tt.w)
			if !found || gap != tt.gap || from != tt.from {
				t.Errorf("noSaleWindow = %v from %v (%v), want %v from %v", gap, from, found, tt.gap, tt.from)
			}
		})
	}
	if _, _, found := noSaleWindow([]*model.Op{order(failed(11*s, 12*s))}, window{10 * s, 12 * s}); found {
		t.Error("a window with no confirmed order after the fault was measured")
	}
}
