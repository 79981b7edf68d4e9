// Package demo holds the parts that take defense layers away, for the demonstration modes of
// STOCKSVC_DEFENSE: a Locker that locks nothing, a Locker that hides the last holder's notes,
// and Views that learn less. With the matching store (stockpg.NewDemo), they are how the
// service shows what each layer stops. Production never builds them: the Service runs one
// purchase path, and the layers a demonstration removes are removed by the parts it is given.
package demo

import (
	"context"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Parts are the Service's Locker and Views for defense d: those given, when d is the
// production defense, and otherwise the same wrapped so that they no longer provide the layers
// d takes away. views may be nil.
func Parts(d stock.Defense, locker stock.Locker, views stock.Views) (stock.Locker, stock.Views) {
	if d == stock.DefaultDefense() {
		return locker, views
	}
	switch {
	case !d.Lock:
		locker = Unlocked{}
	case !d.Version:
		locker = withoutNotes{locker}
	}
	if views != nil {
		views = limitedViews{Views: views, defense: d}
	}
	return locker, views
}

// Unlocked is a Locker that takes no lock: every holder runs at once, with fencing token 0,
// which the fence condition of a write does not check. What it runs is detached from the
// caller's context, as a locked batch is (there is no lease to lose, and a batch that has begun
// runs to a known outcome).
type Unlocked struct{}

// WithProducts implements stock.Locker.
func (Unlocked) WithProducts(ctx context.Context, ids []int64, fn func(context.Context, *stock.Grant) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g := &stock.Grant{Fences: map[int64]int64{}, Notes: map[int64]string{}, Leave: map[int64]string{}}
	return fn(context.WithoutCancel(ctx), g)
}

// withoutNotes hides the last holder's notes: a batch decided from a note is safe only because
// the version check refuses a write decided from a stale one, and a store without that check
// must read instead.
type withoutNotes struct{ stock.Locker }

func (l withoutNotes) WithProducts(ctx context.Context, ids []int64, fn func(context.Context, *stock.Grant) error) error {
	return l.Locker.WithProducts(ctx, ids, func(ctx context.Context, g *stock.Grant) error {
		clear(g.Notes)
		return fn(ctx, g)
	})
}

// limitedViews are views for a store without every condition. Without the version check a
// committed write's level is not known from what it was decided from, so the views are not
// told it (they read again when their lease ends). The naive write can raise a stock, so a view
// that says sold out may be wrong: they refuse nothing.
type limitedViews struct {
	stock.Views
	defense stock.Defense
}

func (v limitedViews) Refusal(ctx context.Context, id int64) stock.Refusal {
	if v.defense.Naive() {
		return stock.Refusal{}
	}
	return v.Views.Refusal(ctx, id)
}

// Writing marks nothing where Committed tells nothing: no update would ever clear the mark.
func (v limitedViews) Writing(ctx context.Context, w stock.Write) error {
	if v.defense.Version {
		return v.Views.Writing(ctx, w)
	}
	return nil
}

func (v limitedViews) Committed(id int64, left, version int64, at time.Time) {
	if v.defense.Version {
		v.Views.Committed(id, left, version, at)
	}
}
