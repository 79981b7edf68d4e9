package stock

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// Locker gives a holder exclusive access to products across every replica. The service takes
// no lock itself: its adapters (package stocklock, over Redis) implement this.
type Locker interface {
	// WithProducts runs fn while holding the lock of every product in ids, taken in ascending
	// id order (see Grant). fn's context is cancelled if a lock is lost. It returns ErrBusy
	// when the locks could not be had within the wait budget, ErrUnavailable (wrapped) when
	// the lock service is unreachable, the context's error when ctx ends, and otherwise fn's
	// error.
	WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *Grant) error) error
}

// Grant is what holding products' locks gives, and what the holder leaves for the next one.
type Grant struct {
	// Fences holds the fencing token of each product's lock.
	Fences map[int64]int64
	// Notes holds, for each product, what the last holder of its lock left when it let go:
	// the product's row as that holder's batch left it (a level), or "" for nothing. It is a
	// hint, never a fact: a batch decided from it is still refused by the version check if it
	// is stale.
	Notes map[int64]string
	// Leave is what the work leaves for the next holder of each product's lock; a product
	// without an entry leaves nothing, which takes away the note the work was given.
	Leave map[int64]string
}

// levelNote writes a product's level as a lock note; parseLevelNote reads one back. A product
// with a limit per customer leaves no note (noteFor): its batches must read what each customer
// has bought. The window rides along, in microseconds since the epoch (0 for none), so that a
// batch decided from the note refuses what the sale does not allow yet; a note from before the
// window existed reads as none, and the purchase statement, on Postgres's clock, refuses then.
func levelNote(l Level) string {
	return strconv.FormatInt(l.Stock, 10) + " " + strconv.FormatInt(l.Version, 10) + " " +
		strconv.FormatInt(micros(l.Sale.StartsAt), 10) + " " + strconv.FormatInt(micros(l.Sale.EndsAt), 10)
}

func parseLevelNote(note string) (Level, bool) {
	fields := strings.Fields(note)
	if len(fields) != 2 && len(fields) != 4 {
		return Level{}, false
	}
	var n [4]int64
	for i, f := range fields {
		v, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return Level{}, false
		}
		n[i] = v
	}
	if n[0] < 0 {
		return Level{}, false
	}
	return Level{Stock: n[0], Version: n[1], Sale: SaleRules{StartsAt: fromMicros(n[2]), EndsAt: fromMicros(n[3])}}, true
}

func micros(t *time.Time) int64 {
	if t == nil {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(us int64) *time.Time {
	if us == 0 {
		return nil
	}
	t := time.UnixMicro(us)
	return &t
}
