package stock

import (
	"strconv"
	"strings"
	"time"
)

// notedLevel returns the level the last holder noted for a batch of one product. The store's
// version check refuses a write decided from a stale one (a demonstration store without that
// check comes with a locker that gives no notes: demo.Parts).
func notedLevel(ids []int64, g *Grant) (Level, bool) {
	if len(ids) != 1 {
		return Level{}, false
	}
	return parseLevelNote(g.Notes[ids[0]])
}

// leaveLevel notes, for the next holder, the level a batch of one product left: the one it
// decided from, less what it committed.
func leaveLevel(g *Grant, ids []int64, snap Snapshot, w Write) {
	if len(ids) != 1 {
		return
	}
	l, ok := snap.Levels[ids[0]]
	if !ok || l.Sale.Limited() || l.Sale.HoldFor > 0 {
		// A product with a limit, or sold with a hold, is decided from a read of what its
		// customers bought, or hold.
		return
	}
	for _, d := range w.Decrements {
		l.Stock -= d.Quantity
		l.Version++
	}
	g.Leave[ids[0]] = levelNote(l)
}

// levelNote writes a product's level as a lock note; parseLevelNote reads one back. A product
// with a limit per customer, or sold with a hold, leaves no note (leaveLevel): its batches must
// read what each customer has bought, or holds. The window rides along, in microseconds since the epoch (0 for none), so that a
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
