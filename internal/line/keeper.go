package line

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/stocksvc/stocksvc/internal/clock"
)

// The keeper advances and refreshes the lines this replica serves. It is one goroutine the
// Service owns from Start to Stop — the poll — with two helpers it owns too: the listening
// connection, and the advances and reads it runs, at most one of each at a time per line and
// one more asked for (later asks are folded into that one). What asks for them:
//
//   - the store's announcements (LISTEN): a line changed on some replica → read it;
//   - a timer per line: the opening (→ the draw; tried again every OpeningRetry while the
//     store's clock says "not yet") and the end of the next admission (→ expire it, admit
//     the next);
//   - the requests: a join after the draw (→ place it), a leave, an order that used its pass;
//   - the poll, every Config.Poll: a line behind its version (an announcement lost), units
//     that came back (a restock, a hold released: the views show them) or ran out without an
//     admission's order (an order placed before the line was set), a rule that would admit
//     and no advance did, used marks not yet written.
//
// Any replica may advance any line: the store serializes them under the line's row lock, so
// replicas that all fire at the opening draw once.

// Start starts the keeper. Stop stops it.
func (s *Service) Start() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running {
		return
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.running = true
	s.live.Store(true)
	s.wg.Add(2)
	go func() {
		defer s.wg.Done()
		s.poll(s.ctx)
	}()
	go func() {
		defer s.wg.Done()
		s.listen(s.ctx)
	}()
}

// Stop stops the keeper and returns once every goroutine it started has returned: an advance
// in flight is cancelled, and its transaction rolls back (the next advance, on any replica,
// does its work). Used marks not written by then are lost: their admissions count as running
// until they run out, so the lines admit fewer, never more.
func (s *Service) Stop() {
	s.mu.Lock()
	if !s.running {
		s.mu.Unlock()
		return
	}
	s.running = false
	s.live.Store(false)
	s.cancel()
	lines := make([]*lineView, 0, len(s.lines))
	for _, v := range s.lines {
		lines = append(lines, v)
	}
	s.mu.Unlock()
	for _, v := range lines {
		v.mu.Lock()
		v.stopTimer()
		v.mu.Unlock()
	}
	s.wg.Wait()
}

// Flush writes the used marks this replica has not written yet, one advance per line that has
// some, within ctx: what a replica does after Stop on its way out, so that the admissions its
// last orders spent do not count as running until they run out. Errors: the advances', joined.
func (s *Service) Flush(ctx context.Context) error {
	s.mu.Lock()
	var lines []*lineView
	for _, v := range s.lines {
		lines = append(lines, v)
	}
	s.mu.Unlock()
	var errs []error
	for _, v := range lines {
		v.mu.Lock()
		pending := len(v.pending) > 0
		v.mu.Unlock()
		if !pending {
			continue
		}
		for {
			err := s.advanceOnce(ctx, v)
			if !errors.Is(err, ErrBusy) || clock.Sleep(ctx, busyRetry) != nil {
				break
			}
		}
		v.mu.Lock()
		if len(v.pending) > 0 {
			errs = append(errs, fmt.Errorf("line: %d used marks of product %d not written", len(v.pending), v.id))
		}
		v.mu.Unlock()
	}
	return errors.Join(errs...)
}

// spawn runs f in a goroutine of the keeper, if it runs.
func (s *Service) spawn(f func(ctx context.Context)) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.running {
		return false
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f(s.ctx)
	}()
	return true
}

// advance asks for an advance of product's line, if this replica serves it.
func (s *Service) advance(id int64) {
	v := s.known(id)
	if v == nil {
		return
	}
	v.mu.Lock()
	if v.advancing {
		v.advanceAgain = true
		v.mu.Unlock()
		return
	}
	v.advancing = true
	v.mu.Unlock()
	if !s.spawn(func(ctx context.Context) {
		for again := true; again; {
			s.advanceOnce(ctx, v)
			v.mu.Lock()
			again = v.advanceAgain && ctx.Err() == nil
			v.advancing, v.advanceAgain = again, false
			v.mu.Unlock()
		}
	}) {
		v.mu.Lock()
		v.advancing = false
		v.mu.Unlock()
	}
}

// refresh asks for a read of product's line, if this replica serves it.
func (s *Service) refresh(id int64) {
	v := s.known(id)
	if v == nil {
		return
	}
	v.mu.Lock()
	if v.refreshing {
		v.refreshAgain = true
		v.mu.Unlock()
		return
	}
	v.refreshing = true
	v.mu.Unlock()
	if !s.spawn(func(ctx context.Context) {
		for again := true; again; {
			rctx, cancel := context.WithTimeout(ctx, readTimeout)
			if err := s.read(rctx, v, false); err != nil && ctx.Err() == nil {
				s.cfg.Logger.Warn("line read failed", slog.Int64("product_id", v.id), slog.Any("error", err))
			}
			cancel()
			v.mu.Lock()
			again = v.refreshAgain && ctx.Err() == nil
			v.refreshing, v.refreshAgain = again, false
			v.mu.Unlock()
		}
	}) {
		v.mu.Lock()
		v.refreshing = false
		v.mu.Unlock()
	}
}

// advanceOnce runs one advance of v's line, with the used marks this replica has not written
// yet (kept for the next one if it fails), and reads the line when it changed. It returns
// the advance's error.
func (s *Service) advanceOnce(ctx context.Context, v *lineView) error {
	v.mu.Lock()
	used := v.pending
	v.pending = nil
	v.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, advanceTimeout)
	defer cancel()
	var early bool
	begun := time.Now()
	a, err := s.store.Advance(ctx, v.id, used, func(ctx context.Context, st Standing) (Plan, error) {
		var p Plan
		var err error
		p, early, err = s.plan(ctx, v.id, st)
		return p, err
	})
	s.metrics.advanced(time.Since(begun), a, err)
	if err != nil {
		v.mu.Lock()
		v.pending = append(used, v.pending...)
		if errors.Is(err, ErrBusy) {
			// Another replica's advance runs and announces what it does, but it began
			// before what asked for this one, and cannot write this replica's marks: tried
			// again once it is likely done.
			now := time.Now()
			v.setTimerBy(s, now.Add(busyRetry), now)
		}
		v.mu.Unlock()
		if ctx.Err() == nil && !isNoLine(err) && !errors.Is(err, ErrBusy) {
			s.cfg.Logger.Warn("line advance failed", slog.Int64("product_id", v.id), slog.Any("error", err))
		}
		return err
	}
	s.metrics.admitted(v.id, a.Admitted)
	if a.Changed {
		// An advance that placed tickets leaves none waiting without a place but those that
		// joined since: counted again, so that the poll does not take the old count for
		// tickets still to place.
		if err := s.read(ctx, v, a.Drawn+a.Placed > 0); err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("line read failed", slog.Int64("product_id", v.id), slog.Any("error", err))
		}
	}
	if early {
		v.mu.Lock()
		v.setTimer(s, time.Now().Add(s.cfg.OpeningRetry))
		v.mu.Unlock()
	}
	return nil
}

// busyRetry is how soon an advance that found another holding the line is tried again.
const busyRetry = 10 * time.Millisecond

// setTimerBy sets v's timer to at, unless it is set to fire sooner (and after now). v.mu is
// held.
func (v *lineView) setTimerBy(s *Service, at, now time.Time) {
	if v.timer != nil && !v.timerAt.After(at) && v.timerAt.After(now) {
		return
	}
	v.setTimer(s, at)
}

// plan decides an advance of product id's line from st and the product as Postgres has it:
// the draw once the sale has opened by the store's clock, and the admissions by the rule
// (Admissions). early reports an opening that this replica's clock says has come and the
// store's does not yet (the advance is tried again shortly).
func (s *Service) plan(ctx context.Context, id int64, st Standing) (_ Plan, early bool, _ error) {
	p, err := s.products.Product(ctx, id)
	if err != nil {
		return Plan{}, false, err
	}
	rules := p.Sale()
	if !rules.Line.Lined() {
		return Plan{}, false, ErrNoLine
	}
	opened := rules.StartsAt == nil || !st.Now.Before(*rules.StartsAt)
	ended := rules.EndsAt != nil && !st.Now.Before(*rules.EndsAt)
	plan := Plan{Stock: p.Stock, AdmissionFor: rules.Line.AdmissionFor}
	if !st.Drawn && opened {
		plan.Seed = NewSeed()
	}
	perBuyer := rules.MaxPerCustomer
	if perBuyer == 0 {
		perBuyer = s.cfg.MaxQuantity
	}
	plan.Admit = Admissions(Room{Open: opened && !ended, Stock: p.Stock, PerBuyer: perBuyer, Admit: rules.Line.Admit, Active: st.Active})
	if p.Stock == 0 {
		if plan.Holding, err = s.products.Holding(ctx, id); err != nil {
			return Plan{}, false, err
		}
	}
	early = !opened && !s.cfg.Now().Before(*rules.StartsAt)
	return plan, early, nil
}

func isNoLine(err error) bool { return errors.Is(err, ErrNoLine) }

// schedule sets v's timer to its next due advance: the opening while the line is not drawn,
// else the end of the next admission. v.mu is held.
func (s *Service) schedule(v *lineView, now time.Time) {
	var at time.Time
	switch starts := v.product.SaleStartsAt; {
	case v.drawnAt.IsZero() && starts != nil && starts.After(now):
		at = *starts
	case v.drawnAt.IsZero():
	default:
		if end := v.nextEnd(); !end.IsZero() {
			// Postgres's clock decides that an admission ran out: a little after it.
			at = end.Add(expiryMargin)
		}
	}
	if !at.IsZero() {
		v.setTimerBy(s, at, now)
	}
}

// expiryMargin is how long after an admission's end the advance that ends it is asked for.
const expiryMargin = 10 * time.Millisecond

// setTimer (re)sets v's timer to advance v's line at at. v.mu is held.
func (v *lineView) setTimer(s *Service, at time.Time) {
	v.stopTimer()
	if !s.live.Load() {
		return // a stopped keeper sets no timers
	}
	v.timerAt = at
	v.timer = time.AfterFunc(time.Until(at), func() { s.advance(v.id) })
}

func (v *lineView) stopTimer() {
	if v.timer != nil {
		v.timer.Stop()
		v.timer = nil
	}
}

// poll runs the keeper's poll every Config.Poll until ctx ends.
func (s *Service) poll(ctx context.Context) {
	t := time.NewTicker(s.cfg.Poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.pollOnce(ctx)
		}
	}
}

// pollOnce looks at every line this replica serves: it forgets those nobody asked about for
// Config.Idle, reads those whose version moved without an announcement reaching it, and asks
// for an advance of those that need one.
func (s *Service) pollOnce(ctx context.Context) {
	now := s.cfg.Now()
	s.mu.Lock()
	lines := make([]*lineView, 0, len(s.lines))
	ids := make([]int64, 0, len(s.lines))
	for id, v := range s.lines {
		v.mu.Lock()
		idle := now.Sub(v.touched) > s.cfg.Idle && v.waiters.n == 0 && len(v.pending) == 0
		if idle {
			v.stopTimer()
			delete(s.lines, id)
			s.metrics.forget(id)
		}
		v.mu.Unlock()
		if !idle {
			lines = append(lines, v)
			ids = append(ids, id)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return
	}
	slices.Sort(ids)
	rctx, cancel := context.WithTimeout(ctx, readTimeout)
	versions, err := s.store.Versions(rctx, ids)
	cancel()
	if err != nil && ctx.Err() == nil {
		s.cfg.Logger.Warn("line versions read failed", slog.Any("error", err))
	}
	for _, v := range lines {
		s.look(ctx, v, versions, err == nil, now)
	}
}

// look is the poll's look at one line.
func (s *Service) look(ctx context.Context, v *lineView, versions map[int64]int64, read bool, now time.Time) {
	vctx, cancel := context.WithTimeout(ctx, readTimeout)
	pv, err := s.views.Product(vctx, v.id)
	cancel()
	p := pv.Product
	v.mu.Lock()
	if err == nil {
		if p.Sale() != v.product.Sale() {
			// A change of the rules (an end, a new opening, the line's settings) changes
			// every status.
			v.waiters.wakeAll()
		}
		v.product, v.productAt = p, now
	}
	p = v.product
	rules := p.Sale()
	lined := rules.Line.Lined()
	ended := rules.EndsAt != nil && !now.Before(*rules.EndsAt)
	behind := read && versions[v.id] > v.version
	recount := v.loaded && now.Sub(v.unplacedAt) >= countEvery && (v.drawnAt.IsZero() || v.unplaced > 0)
	opened := rules.StartsAt == nil || !now.Before(*rules.StartsAt)
	waiting := v.waiting()
	var admittable int64
	if v.loaded && !v.drawnAt.IsZero() && lined && !ended {
		perBuyer := rules.MaxPerCustomer
		if perBuyer == 0 {
			perBuyer = s.cfg.MaxQuantity
		}
		admittable = min(Admissions(Room{Open: opened, Stock: p.Stock, PerBuyer: perBuyer, Admit: rules.Line.Admit, Active: v.active(now)}), waiting)
	}
	due := lined && v.loaded && (len(v.pending) > 0 ||
		v.drawnAt.IsZero() && opened && v.unplaced > 0 ||
		admittable > 0 ||
		v.stockKnown && (p.Stock > v.stock || p.Stock == 0 && v.stock > 0) ||
		!v.drawnAt.IsZero() && v.unplaced > 0 ||
		!v.nextEnd().IsZero() && !now.Before(v.nextEnd()))
	if lined && !ended {
		s.metrics.line(v.id, waiting, v.counts, admittable, v.drawn)
		s.schedule(v, now)
	} else {
		s.metrics.forget(v.id)
	}
	v.mu.Unlock()
	if behind || recount {
		s.refresh(v.id)
	}
	if due {
		s.advance(v.id)
	}
}

// listen keeps a connection listening for the store's announcements until ctx ends, opening
// it again when it fails; each time it listens anew, every line this replica serves is read
// (what was announced meanwhile is lost).
func (s *Service) listen(ctx context.Context) {
	for attempt := 0; ; attempt++ {
		err := s.store.Listen(ctx, func() {
			attempt = 0
			s.mu.Lock()
			ids := make([]int64, 0, len(s.lines))
			for id := range s.lines {
				ids = append(ids, id)
			}
			s.mu.Unlock()
			for _, id := range ids {
				s.refresh(id)
			}
		}, func(product, version int64) {
			v := s.known(product)
			if v == nil {
				return
			}
			v.mu.Lock()
			behind := version > v.version
			v.mu.Unlock()
			if behind {
				s.refresh(product)
			}
		})
		if ctx.Err() != nil {
			return
		}
		s.metrics.listenFailed()
		s.cfg.Logger.Warn("line listening failed; polling until it listens again", slog.Any("error", err))
		if clock.Sleep(ctx, min(time.Duration(attempt+1)*time.Second/2, 5*time.Second)) != nil {
			return
		}
	}
}
