package demo_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/demo"
)

// noting is a Locker that grants every product with fence 7 and a note, and counts grants.
type noting struct{ grants int }

func (l *noting) WithProducts(ctx context.Context, ids []int64, fn func(context.Context, *stock.Grant) error) error {
	l.grants++
	g := &stock.Grant{Fences: map[int64]int64{}, Notes: map[int64]string{}, Leave: map[int64]string{}}
	for _, id := range ids {
		g.Fences[id], g.Notes[id] = 7, "5 3"
	}
	return fn(ctx, g)
}

// told records what the Service tells views.
type told struct {
	stock.Views // nil: only Refusal and Committed are called here
	committed   int
}

func (v *told) Refusal(context.Context, int64) stock.Refusal { return stock.Refusal{SoldOut: true} }
func (v *told) Committed(int64, int64, int64, time.Time)     { v.committed++ }

func grant(t *testing.T, l stock.Locker, ctx context.Context) (*stock.Grant, context.Context) {
	t.Helper()
	var got *stock.Grant
	var inner context.Context
	if err := l.WithProducts(ctx, []int64{1}, func(ctx context.Context, g *stock.Grant) error {
		got, inner = g, ctx
		return nil
	}); err != nil {
		t.Fatalf("WithProducts: %v", err)
	}
	return got, inner
}

func TestProductionPartsAreUntouched(t *testing.T) {
	l, v := &noting{}, &told{}
	gotL, gotV := demo.Parts(stock.DefaultDefense(), l, v)
	if gotL != stock.Locker(l) || gotV != stock.Views(v) {
		t.Errorf("Parts(production) = %T, %T; want the locker and views given", gotL, gotV)
	}
}

func TestWithoutLockNothingIsLocked(t *testing.T) {
	l := &noting{}
	for _, d := range []stock.Defense{{}, {Check: true}, {Version: true, Guard: true, Check: true}} {
		locker, _ := demo.Parts(d, l, nil)
		ctx, cancel := context.WithCancel(context.Background())
		g, inner := grant(t, locker, ctx)
		cancel()
		if len(g.Fences) != 0 || len(g.Notes) != 0 || g.Leave == nil {
			t.Errorf("%v: grant %+v, want no fences, no notes, somewhere to leave one", d, g)
		}
		if inner.Err() != nil {
			t.Errorf("%v: the work's context ended with the caller's: a batch that has begun must finish", d)
		}
	}
	if l.grants != 0 {
		t.Errorf("the real locker was asked %d times, want never", l.grants)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (demo.Unlocked{}).WithProducts(ctx, []int64{1}, func(context.Context, *stock.Grant) error {
		t.Error("ran work for a caller that had gone")
		return nil
	}); !errors.Is(err, context.Canceled) {
		t.Errorf("WithProducts after the caller left = %v, want context.Canceled", err)
	}
}

func TestWithoutVersionNoNotes(t *testing.T) {
	l := &noting{}
	locker, _ := demo.Parts(stock.Defense{Lock: true, Guard: true, Check: true}, l, nil)
	g, _ := grant(t, locker, context.Background())
	if l.grants != 1 || g.Fences[1] != 7 || len(g.Notes) != 0 {
		t.Errorf("grant %+v after %d real grants; want the real lock's fence and no note", g, l.grants)
	}
}

func TestLimitedViews(t *testing.T) {
	cases := []struct {
		d             stock.Defense
		refuses, told bool
	}{
		{d: stock.Defense{}, refuses: false, told: false},
		{d: stock.Defense{Lock: true, Guard: true, Check: true}, refuses: true, told: false},
		{d: stock.Defense{Version: true, Check: true}, refuses: true, told: true},
	}
	for _, tc := range cases {
		v := &told{}
		_, views := demo.Parts(tc.d, &noting{}, v)
		if got := views.Refusal(context.Background(), 1).SoldOut; got != tc.refuses {
			t.Errorf("%v: refuses sold out = %v, want %v", tc.d, got, tc.refuses)
		}
		views.Committed(1, 0, 1, time.Now())
		if got := v.committed == 1; got != tc.told {
			t.Errorf("%v: views told of a commit = %v, want %v", tc.d, got, tc.told)
		}
	}
	if _, views := demo.Parts(stock.Defense{}, &noting{}, nil); views != nil {
		t.Errorf("Parts without views = %v, want nil", views)
	}
}
