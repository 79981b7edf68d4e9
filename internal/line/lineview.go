package line

import (
	"container/heap"
	"encoding/hex"
	"hash/fnv"
	"math/bits"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// lineView is this replica's view of one line: the line's row and every ticket that was
// placed or ended, as of the version it last read, from which any ticket's status follows
// without a query (a place is fixed once given). A ticket it does not know is still
// waiting: it was made, and has not been placed or ended, since.
type lineView struct {
	id int64

	mu     sync.Mutex
	loaded bool
	// The line's row, as of version.
	version, drawn, placed, admissions int64
	drawnAt                            time.Time
	stock                              int64
	stockKnown, holding                bool
	// unplaced is how many tickets waited without a place at unplacedAt.
	unplaced   int64
	unplacedAt time.Time
	tickets    map[int64]Ticket
	// passed holds, ascending, the places of the placed tickets no longer waiting: a ticket
	// at place p has p-1 tickets before it, of which those in passed wait no more.
	passed []int64
	// counts counts the known tickets by status; admitted holds those admitted.
	counts   map[TicketStatus]int64
	admitted map[int64]struct{}
	// used holds the tickets this replica's orders used (with their keys), until the store
	// says so: a refresh from before the mark must not make them admitted again.
	used map[int64]string
	// pending are the used marks still to write (Store.Advance).
	pending []Use
	// joined holds, by customer, the open tickets whose joins this replica answered from the
	// store, so that joining again is answered from memory (Service.rejoin) until they end.
	joined  map[string]Ticket
	waiters waiters
	pace    pace
	// product is the product as this replica's views last showed it, at productAt.
	product   stock.Product
	productAt time.Time
	// touched is when a request last asked about the line.
	touched time.Time

	// The keeper's: advances and refreshes coalesced, one at a time and one more asked for.
	advancing, advanceAgain, refreshing, refreshAgain bool
	// timer advances the line at the opening or at the next admission's end (timerAt).
	timer   *time.Timer
	timerAt time.Time
}

func newLineView(id int64) *lineView {
	return &lineView{id: id, tickets: map[int64]Ticket{}, counts: map[TicketStatus]int64{}, admitted: map[int64]struct{}{}, used: map[int64]string{},
		joined: map[string]Ticket{}, waiters: waiters{byTicket: map[int64]map[*waiter]struct{}{}}}
}

// soldOut reports whether the last advance found no units left.
func (v *lineView) soldOut() bool { return v.stockKnown && v.stock == 0 }

// apply takes what a read of the store saw, if it is not older than what the view knows,
// and wakes the waiters whose status it may have changed.
func (v *lineView) apply(s Snapshot, now time.Time) {
	if !s.Exists || v.loaded && s.Version < v.version {
		if s.Unplaced >= 0 && s.Exists {
			v.unplaced, v.unplacedAt = s.Unplaced, now
		}
		return
	}
	lineWide := !v.loaded || s.DrawnAt.IsZero() != v.drawnAt.IsZero() ||
		(s.StockKnown && s.Stock == 0) != v.soldOut() || s.Holding != v.holding
	v.loaded = true
	v.version, v.drawn, v.placed, v.drawnAt = s.Version, s.Drawn, s.Placed, s.DrawnAt
	v.stock, v.stockKnown, v.holding = s.Stock, s.StockKnown, s.Holding
	if s.Admissions > v.admissions {
		v.pace.saw(now, s.Admissions)
	}
	v.admissions = s.Admissions
	if s.Unplaced >= 0 {
		v.unplaced, v.unplacedAt = s.Unplaced, now
	}
	for _, t := range s.Tickets {
		v.learn(t)
		if !lineWide {
			v.waiters.wakeTicket(t.ID)
		}
	}
	if lineWide {
		v.waiters.wakeAll()
		return
	}
	v.waiters.wakePassed(len(v.passed))
}

// learn records what the store says of ticket t.
func (v *lineView) learn(t Ticket) {
	old, had := v.tickets[t.ID]
	if had && old.Changed > t.Changed {
		return
	}
	v.tickets[t.ID] = t
	if had {
		v.counts[old.Status]--
	}
	v.counts[t.Status]++
	if t.Status == TicketAdmitted {
		v.admitted[t.ID] = struct{}{}
	} else {
		delete(v.admitted, t.ID)
	}
	if t.Place > 0 && t.Status != TicketWaiting && (!had || old.Place == 0 || old.Status == TicketWaiting) {
		i, _ := slices.BinarySearch(v.passed, t.Place)
		v.passed = slices.Insert(v.passed, i, t.Place)
	}
	if t.Status == TicketUsed {
		delete(v.used, t.ID)
	}
	if j, ok := v.joined[t.CustomerID]; ok && j.ID == t.ID && !t.Status.Open() {
		delete(v.joined, t.CustomerID)
	}
}

// ahead returns how many placed tickets still wait before place p.
func (v *lineView) ahead(p int64) int64 {
	before, _ := slices.BinarySearch(v.passed, p)
	return p - 1 - int64(before)
}

// waiting returns how many tickets are in line: queued for the draw, or waiting.
func (v *lineView) waiting() int64 {
	if v.drawnAt.IsZero() {
		return v.unplaced
	}
	return v.placed - int64(len(v.passed)) + max(v.unplaced, 0)
}

// status is ticket c's status at now, the product's sale being sale (the replica's clock
// decides whether an admission or the sale has run out; the store's when it records it).
// sign signs the pass of an admitted ticket.
func (v *lineView) status(c claims, now time.Time, p stock.Product, sign func(claims) string) Status {
	st := Status{ProductID: v.id, Ticket: c.ticket, CustomerID: c.customer}
	t, known := v.tickets[c.ticket]
	if _, used := v.used[c.ticket]; used && known {
		t.Status = TicketUsed
	}
	st.Place, st.AdmittedUntil = t.Place, t.AdmittedUntil
	rules := p.Sale()
	switch {
	case known && t.Status == TicketUsed:
		st.State = Used
	case known && t.Status == TicketExpired:
		st.State = Expired
	case known && t.Status == TicketLeft:
		st.State = Left
	case rules.EndsAt != nil && !now.Before(*rules.EndsAt):
		st.State = SaleEnded
	case known && t.Status == TicketAdmitted && !now.Before(t.AdmittedUntil):
		st.State = Expired
	case v.soldOut():
		st.State, st.MayReturn = SoldOut, v.holding
	case known && t.Status == TicketAdmitted:
		st.State = Admitted
		st.Pass = sign(claims{kind: kindPass, product: v.id, ticket: c.ticket, until: t.AdmittedUntil, customer: c.customer})
	case v.drawnAt.IsZero():
		st.State, st.Queued = Queued, v.unplaced
	default:
		st.State = Waiting
		if known && t.Place > 0 {
			st.Ahead = v.ahead(t.Place)
		} else {
			st.Ahead = v.placed - int64(len(v.passed))
		}
		st.Estimate = v.pace.estimate(st.Ahead, now, rules.Line)
	}
	st.ETag = etag(st)
	return st
}

// etag is st's entity tag: its state, place, admission and sold-out flag, and, for a placed
// waiting ticket, how many halvings of Ahead it is from the front.
func etag(st Status) string {
	h := fnv.New64a()
	b := make([]byte, 0, 64)
	b = append(b, st.State...)
	b = strconv.AppendInt(append(b, '|'), st.Place, 10)
	if st.State == Waiting && st.Place > 0 {
		b = strconv.AppendInt(append(b, '|'), int64(bits.Len64(uint64(st.Ahead))), 10)
	}
	if !st.AdmittedUntil.IsZero() {
		b = strconv.AppendInt(append(b, '|'), st.AdmittedUntil.UnixMicro(), 10)
	}
	if st.MayReturn {
		b = append(b, "|r"...)
	}
	h.Write(b)
	return `"` + hex.EncodeToString(h.Sum(nil)) + `"`
}

// wakeAt returns when, in tickets passed, st (computed now) may change without the ticket
// itself changing: for a placed waiting ticket, once Ahead has halved; else never (-1).
func (v *lineView) wakeAt(st Status) int {
	if st.State != Waiting || st.Place == 0 || st.Ahead == 0 {
		return -1
	}
	half := int64(1) << (bits.Len64(uint64(st.Ahead)) - 1)
	return len(v.passed) + int(st.Ahead-half+1)
}

// nextEnd returns the earliest end of an admission running, or zero.
func (v *lineView) nextEnd() time.Time {
	var first time.Time
	for id := range v.admitted {
		if _, used := v.used[id]; !used {
			if until := v.tickets[id].AdmittedUntil; first.IsZero() || until.Before(first) {
				first = until
			}
		}
	}
	return first
}

// active returns how many admissions run at now, as this replica knows.
func (v *lineView) active(now time.Time) int64 {
	var n int64
	for id := range v.admitted {
		if _, used := v.used[id]; !used && now.Before(v.tickets[id].AdmittedUntil) {
			n++
		}
	}
	return n
}

// pace estimates the admissions per second of a line from what its reads saw over the last
// minute.
type pace struct {
	samples []paceSample
}

type paceSample struct {
	at         time.Time
	admissions int64
}

const paceWindow = time.Minute

func (p *pace) saw(at time.Time, admissions int64) {
	p.samples = append(p.samples, paceSample{at, admissions})
	cut := 0
	for cut < len(p.samples)-1 && at.Sub(p.samples[cut].at) > paceWindow {
		cut++
	}
	p.samples = p.samples[cut:]
}

// estimate returns how long ahead tickets take to be admitted: at the pace observed over the
// last minute, or, with none observed, at the settings' (admit buyers every admission_for,
// the slowest a line that is never used goes).
func (p *pace) estimate(ahead int64, now time.Time, l stock.LineRules) time.Duration {
	if ahead == 0 {
		return 0
	}
	if n := len(p.samples); n > 1 && now.Sub(p.samples[n-1].at) < paceWindow {
		first, last := p.samples[0], p.samples[n-1]
		if span := last.at.Sub(first.at); span >= time.Second && last.admissions > first.admissions {
			perSecond := float64(last.admissions-first.admissions) / span.Seconds()
			return time.Duration(float64(ahead) / perSecond * float64(time.Second)).Round(time.Second)
		}
	}
	if l.Admit <= 0 {
		return 0
	}
	return time.Duration((ahead + l.Admit - 1) / l.Admit * int64(l.AdmissionFor))
}

// waiter is a long-poll waiting for its ticket's status to change: woken (ch closed) when its
// ticket changes, when something every status depends on changes, or when at tickets have
// passed (at < 0: never so).
type waiter struct {
	ticket int64
	at     int
	ch     chan struct{}
	index  int // in the heap; -1 when not in it
}

// waiters are a line's long-polls, so that a change wakes only those whose status it may
// change: a crowd of thousands is not woken at every admission.
type waiters struct {
	byTicket map[int64]map[*waiter]struct{}
	byAt     waiterHeap
	n        int
}

func (ws *waiters) add(w *waiter) {
	set := ws.byTicket[w.ticket]
	if set == nil {
		set = map[*waiter]struct{}{}
		ws.byTicket[w.ticket] = set
	}
	set[w] = struct{}{}
	w.index = -1
	if w.at >= 0 {
		heap.Push(&ws.byAt, w)
	}
	ws.n++
}

// remove takes w out without waking it; false if it was woken already.
func (ws *waiters) remove(w *waiter) bool {
	set := ws.byTicket[w.ticket]
	if _, ok := set[w]; !ok {
		return false
	}
	delete(set, w)
	if len(set) == 0 {
		delete(ws.byTicket, w.ticket)
	}
	if w.index >= 0 {
		heap.Remove(&ws.byAt, w.index)
	}
	ws.n--
	return true
}

func (ws *waiters) wake(w *waiter) {
	if ws.remove(w) {
		close(w.ch)
	}
}

func (ws *waiters) wakeTicket(id int64) {
	for w := range ws.byTicket[id] {
		ws.wake(w)
	}
}

func (ws *waiters) wakePassed(passed int) {
	for len(ws.byAt) > 0 && ws.byAt[0].at <= passed {
		ws.wake(ws.byAt[0])
	}
}

func (ws *waiters) wakeAll() {
	for _, set := range ws.byTicket {
		for w := range set {
			ws.wake(w)
		}
	}
}

type waiterHeap []*waiter

func (h waiterHeap) Len() int           { return len(h) }
func (h waiterHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h waiterHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *waiterHeap) Push(x any) {
	w := x.(*waiter)
	w.index = len(*h)
	*h = append(*h, w)
}
func (h *waiterHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	w.index = -1
	return w
}
