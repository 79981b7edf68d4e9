package line

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Config tunes a Service. Zero fields take the defaults documented on each.
type Config struct {
	// MaxQuantity is the most units one order may ask for (stock.Config.MaxQuantity): what one
	// buyer may take of a product without a limit per customer. Default 10.
	MaxQuantity int64
	// Poll is how often the keeper reads the versions of the lines this replica serves, and
	// checks whether one needs an advance that no announcement or timer asked for: the bound
	// on how late a lost announcement leaves a status. Default 250ms.
	Poll time.Duration
	// MaxWait caps a long-poll (Prefer: wait). Default 30s.
	MaxWait time.Duration
	// OpeningRetry is how soon an advance at the opening is tried again when the store's
	// clock says the sale has not opened yet while this replica's says it has. Default 20ms.
	OpeningRetry time.Duration
	// Idle is how long a line nobody asked this replica about is kept in its memory. Default
	// 10m.
	Idle time.Duration
	// Now is this replica's clock, which decides when a pass or an admission runs out for
	// the order path and the statuses; the store's decides the draw and records the
	// admissions. Default time.Now.
	Now func() time.Time
	// Logger receives the keeper's failures (an advance, a read, the listening connection),
	// which no request answers. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.MaxQuantity <= 0 {
		c.MaxQuantity = 10
	}
	if c.Poll <= 0 {
		c.Poll = 250 * time.Millisecond
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 30 * time.Second
	}
	if c.OpeningRetry <= 0 {
		c.OpeningRetry = 20 * time.Millisecond
	}
	if c.Idle <= 0 {
		c.Idle = 10 * time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Service runs the lines: joins, statuses and long-polls, leaves, the check of an order's
// passes, and — once started — the keeper that advances the lines this replica serves.
type Service struct {
	store    Store
	products Products
	views    Views
	cfg      Config
	metrics  *Metrics
	keys     keyring
	// keysRead is when the keys were last read, so that a token signed by an unknown key
	// reads them again at most once a second.
	keysMu   sync.Mutex
	keysRead time.Time
	loads    singleflight.Group

	mu    sync.RWMutex
	lines map[int64]*lineView
	// The keeper (keeper.go): running between Start and Stop; every goroutine it starts is
	// in wg.
	running bool
	// live is running, for the views' timers (which cannot take mu under their own lock).
	live   atomic.Bool
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Service over store, with the signing keys read from it (the first made when
// there is none). metrics may be nil. Start starts its keeper. Errors: as Store.Keys.
func New(ctx context.Context, store Store, products Products, views Views, cfg Config, metrics *Metrics) (*Service, error) {
	s := &Service{store: store, products: products, views: views, cfg: cfg.withDefaults(), metrics: metrics,
		lines: map[int64]*lineView{}}
	keys, err := store.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("line: signing keys: %w", err)
	}
	s.keys.set(keys)
	s.keysRead = time.Now()
	return s, nil
}

// lined returns product id, or ErrNoLine if it has no line: as this replica's view of its line
// last read it (the keeper reads it every Config.Poll), when that is under productFresh old and
// says it has one, else as the views show it. So a crowd asking about a line costs the views
// nothing, and Redis failing does not fail the line (the keeper's read falls back to Postgres);
// a line set on a product is seen at once, one removed within productFresh. Errors: ErrNoLine,
// the Views' errors.
func (s *Service) lined(ctx context.Context, id int64) (stock.Product, error) {
	now := s.cfg.Now()
	v := s.known(id)
	if v != nil {
		v.mu.Lock()
		p, at := v.product, v.productAt
		v.mu.Unlock()
		if p.Sale().Line.Lined() && now.Sub(at) < productFresh {
			return p, nil
		}
	}
	pv, err := s.views.Product(ctx, id)
	if err != nil {
		return stock.Product{}, err
	}
	if v != nil {
		v.mu.Lock()
		v.product, v.productAt = pv.Product, now
		v.mu.Unlock()
	}
	if !pv.Sale().Line.Lined() {
		return stock.Product{}, ErrNoLine
	}
	return pv.Product, nil
}

// productFresh is how long a line's view of its product answers for it (lined).
const productFresh = 2 * time.Second

// Join puts customer in product's line, or answers the ticket it has there, with its status.
// Errors: ErrNoLine, *stock.SaleEndedError (by this replica's clock), ErrUnavailable, the
// Views' errors, the context's.
func (s *Service) Join(ctx context.Context, product int64, customer string) (Joined, error) {
	p, err := s.lined(ctx, product)
	if err != nil {
		return Joined{}, err
	}
	now := s.cfg.Now()
	if p.SaleEndsAt != nil && !now.Before(*p.SaleEndsAt) {
		return Joined{}, &stock.SaleEndedError{ProductID: product, EndsAt: *p.SaleEndsAt}
	}
	if j, ok := s.rejoin(product, customer, p, now); ok {
		return j, nil
	}
	t, created, drawn, err := s.store.Join(ctx, product, customer)
	if err != nil {
		return Joined{}, err
	}
	if created {
		s.metrics.joined(product)
	}
	v, err := s.ensure(ctx, product)
	if err != nil {
		return Joined{}, err
	}
	v.mu.Lock()
	behind := drawn && v.drawnAt.IsZero()
	if t.Status.Open() {
		v.joined[t.CustomerID] = t
	}
	v.mu.Unlock()
	if behind {
		// The store says the line was drawn and this replica's view does not know yet: the
		// ticket is a late arrival, and its status must not say queued.
		if err := s.read(ctx, v, false); err != nil {
			return Joined{}, err
		}
	}
	return s.joinAnswer(v, t, drawn, created, p, now), nil
}

// joinAnswer answers a join with ticket t of v's line (drawn: whether the line was drawn
// when t was made, or, for a join answered from memory, is now), asking first for the advance
// the join may need: a late arrival is placed, and a line whose sale is open drawn, by one.
func (s *Service) joinAnswer(v *lineView, t Ticket, drawn, created bool, p stock.Product, now time.Time) Joined {
	opened := p.SaleStartsAt == nil || !now.Before(*p.SaleStartsAt)
	if drawn && t.Place == 0 || !drawn && opened {
		s.advance(v.id)
	}
	c := claims{kind: kindTicket, product: v.id, ticket: t.ID, customer: t.CustomerID}
	v.mu.Lock()
	if t.Changed > 0 || t.Place > 0 {
		v.learn(t)
	}
	v.touch(now, p)
	st := v.status(c, now, p, s.keys.sign)
	v.mu.Unlock()
	return Joined{Status: st, Token: s.keys.sign(c), Created: created}
}

// rejoin answers a join of customer, who joined product's line through this replica before
// and whose ticket this replica's view holds open, from memory: a client joining in a loop
// costs the store nothing after its first join here. The ticket is as open as the view knows
// (a leave or a use on another replica reaches it with the announcement, as it reaches a
// status); once the view sees it end, the next join goes to the store for a new one.
func (s *Service) rejoin(product int64, customer string, p stock.Product, now time.Time) (Joined, bool) {
	v := s.known(product)
	if v == nil {
		return Joined{}, false
	}
	v.mu.Lock()
	t, ok := v.joined[customer]
	if ok {
		if cur, known := v.tickets[t.ID]; known && cur.Changed >= t.Changed {
			t = cur
		}
		if _, used := v.used[t.ID]; used || !t.Status.Open() {
			delete(v.joined, customer)
			ok = false
		}
	}
	if !ok || !v.loaded {
		v.mu.Unlock()
		return Joined{}, false
	}
	drawn := !v.drawnAt.IsZero()
	v.mu.Unlock()
	return s.joinAnswer(v, t, drawn, false, p, now), true
}

// Status returns the status of the ticket token of product's line, from this replica's view.
// Errors: ErrInvalidTicket, ErrTicketNotFound, ErrNoLine, ErrUnavailable, the Views' errors,
// the context's.
func (s *Service) Status(ctx context.Context, product int64, token string) (Status, error) {
	return s.Wait(ctx, product, token, "", 0)
}

// Wait returns the status of the ticket token once it differs from etag (its ETag), or when
// wait (at most Config.MaxWait) has passed with it unchanged; with wait 0, at once. A change
// is learnt as soon as this replica's view of the line learns it (an announcement from
// Postgres, or the poll). Errors: as Status.
func (s *Service) Wait(ctx context.Context, product int64, token, etag string, wait time.Duration) (Status, error) {
	c, err := s.ticket(ctx, token, product)
	if err != nil {
		return Status{}, err
	}
	p, v, err := s.lineOf(ctx, product)
	if err != nil {
		return Status{}, err
	}
	if wait > 0 {
		s.metrics.polling(1)
		defer s.metrics.polling(-1)
	}
	deadline := s.cfg.Now().Add(min(wait, s.cfg.MaxWait))
	v.mu.Lock()
	v.touch(s.cfg.Now(), p)
	v.mu.Unlock()
	checked := false
	for {
		now := s.cfg.Now()
		v.mu.Lock()
		st := v.status(c, now, v.product, s.keys.sign)
		if st.State == Waiting && st.Place == 0 && !checked {
			v.mu.Unlock()
			// Drawn, and this replica knows of no place for it: a late arrival the next
			// advance places, or a ticket the store lost. Its row says which, once.
			checked = true
			if err := s.placeUnknown(ctx, v, c.ticket); err != nil {
				return Status{}, err
			}
			continue
		}
		if st.ETag != etag || !now.Before(deadline) {
			v.mu.Unlock()
			return st, nil
		}
		w := &waiter{ticket: c.ticket, at: v.wakeAt(st), ch: make(chan struct{})}
		v.waiters.add(w)
		ends := v.product.SaleEndsAt
		v.mu.Unlock()
		// A status also changes with the replica's clock: an admission or the sale runs out.
		until := deadline
		if st.State == Admitted && st.AdmittedUntil.Before(until) {
			until = st.AdmittedUntil
		}
		if ends != nil && ends.After(now) && ends.Before(until) {
			until = *ends
		}
		timer := time.NewTimer(until.Sub(now))
		select {
		case <-w.ch:
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
		v.mu.Lock()
		v.waiters.remove(w)
		v.mu.Unlock()
		if err := ctx.Err(); err != nil {
			return Status{}, fmt.Errorf("line: waiting for ticket %d: %w", c.ticket, context.Cause(ctx))
		}
	}
}

// placeUnknown reads ticket id, which v does not know to be placed although the line is
// drawn: a placed ticket is learnt, one not placed yet asks for an advance (which places it).
// Errors: ErrTicketNotFound, ErrUnavailable, the context's.
func (s *Service) placeUnknown(ctx context.Context, v *lineView, id int64) error {
	t, err := s.store.Ticket(ctx, v.id, id)
	if err != nil {
		return err
	}
	if t.Place == 0 && t.Status == TicketWaiting {
		s.advance(v.id)
		return nil
	}
	v.mu.Lock()
	v.learn(t)
	v.mu.Unlock()
	return nil
}

// Leave takes the ticket token out of product's line: its place, or its admission, passes to
// the next. Leaving again, or after the admission was used or ran out, answers the status as
// it stands. Errors: ErrInvalidTicket, ErrTicketNotFound, ErrNoLine, ErrUnavailable, the Views'
// errors, the context's.
func (s *Service) Leave(ctx context.Context, product int64, token string) (Status, error) {
	c, err := s.ticket(ctx, token, product)
	if err != nil {
		return Status{}, err
	}
	p, err := s.lined(ctx, product)
	if err != nil {
		return Status{}, err
	}
	t, err := s.store.Leave(ctx, product, c.ticket)
	if err != nil {
		return Status{}, err
	}
	v, err := s.ensure(ctx, product)
	if err != nil {
		return Status{}, err
	}
	now := s.cfg.Now()
	v.mu.Lock()
	v.learn(t)
	v.waiters.wakeTicket(t.ID)
	v.touch(now, p)
	st := v.status(c, now, p, s.keys.sign)
	v.mu.Unlock()
	// Those behind move up, and the next in line has the admission's room (the store passed
	// it on in the leave's change): here at once, and on every replica with the announcement.
	s.refresh(product)
	return st, nil
}

// Admit checks an order's passes before anything else the order costs: for each product of
// products that has a line (as this replica's views show it), a pass of passes must be a pass
// of this service for that product, all of one customer, not run out by this replica's clock,
// and not used by another order (one with the same Idempotency-Key key is its retry, and is
// let through to be answered with it) nor left, as this replica's view of the line knows. ticket,
// when not empty, is the order's Line-Ticket: a refusal then says where it stands.
//
// With wait > 0 (Prefer: wait), an order that sends no pass at all but its product's ticket
// waits in line instead of being refused: until the ticket is admitted — the order is then
// cleared with that admission, as if its pass had been sent, without the client's round trip
// between hearing the admission and sending the order — or its line reaches an end for it
// (sold out, left, expired), or wait (at most Config.MaxWait) passes: the refusal then says how
// long it waited. The wait ends with ctx.
//
// Cleared names the customer the passes were issued to (empty when no product of the order is
// lined), and how long the order may wait for its locks. Errors: *NotAdmittedError,
// *AdmissionExpiredError, *AdmissionUsedError, *SoldOutError (after a wait), ErrUnavailable,
// ErrTicketNotFound (after a wait), the Views' errors but *stock.ProductNotFoundError (the
// order is let through to be refused for it), the context's.
func (s *Service) Admit(ctx context.Context, products []int64, passes []string, ticket, key string, wait time.Duration) (Cleared, error) {
	var (
		cl      Cleared
		decoded []claims
		invalid bool
	)
	for _, id := range products {
		if _, err := s.lined(ctx, id); err != nil {
			if errors.Is(err, ErrNoLine) || errors.Is(err, stock.ErrProductNotFound) {
				continue
			}
			return Cleared{}, err
		}
		if decoded == nil && !invalid {
			decoded, invalid = s.passes(ctx, passes)
		}
		c, ok := passFor(decoded, id)
		if !ok && !invalid && len(decoded) == 0 && wait > 0 && ticket != "" {
			var err error
			if c, err = s.await(ctx, id, ticket, wait); err != nil {
				return Cleared{}, err
			}
			decoded, ok = append(decoded, c), true
		}
		switch {
		case !ok && (invalid || len(decoded) > 0):
			return Cleared{}, s.notAdmitted(ctx, id, refusedInvalid, "the Line-Pass sent is not a pass of this service for this product", ticket)
		case !ok:
			return Cleared{}, s.notAdmitted(ctx, id, refusedMissing, "no Line-Pass: join the line and order once admitted", ticket)
		case cl.Customer != "" && c.customer != cl.Customer:
			return Cleared{}, s.notAdmitted(ctx, id, refusedInvalid, "the passes of one order must be of one customer", ticket)
		case !s.cfg.Now().Before(c.until):
			s.metrics.refused(refusedExpired)
			return Cleared{}, &AdmissionExpiredError{ProductID: id, Until: c.until}
		}
		if err := s.unspent(ctx, id, c, key, ticket); err != nil {
			return Cleared{}, err
		}
		cl.Customer = c.customer
		cl.Admissions = append(cl.Admissions, Admission{ProductID: id, Ticket: c.ticket, Customer: c.customer, Until: c.until})
		left := min(c.until.Sub(s.cfg.Now()), s.cfg.MaxWait)
		if cl.LockWait == 0 || left < cl.LockWait {
			cl.LockWait = left
		}
	}
	return cl, nil
}

// await waits, for an order without a pass, until the ticket token of product id is admitted,
// and returns its pass; or until its line ends for it, or wait (at most Config.MaxWait)
// passes, with the refusal that says so. The order waits as a long-poll of its status does
// (Wait): it learns an admission as soon as this replica's view of the line does.
func (s *Service) await(ctx context.Context, id int64, token string, wait time.Duration) (claims, error) {
	t, err := s.ticket(ctx, token, id)
	if err != nil {
		// Not a ticket of this product: refused as an order without a pass is.
		return claims{}, s.notAdmitted(ctx, id, refusedMissing, "no Line-Pass, and the Line-Ticket is not a ticket of this product's line", "")
	}
	wait = min(wait, s.cfg.MaxWait)
	deadline := s.cfg.Now().Add(wait)
	etag := ""
	for {
		st, err := s.Wait(ctx, id, token, etag, deadline.Sub(s.cfg.Now()))
		if err != nil {
			return claims{}, err
		}
		switch st.State {
		case Admitted:
			c, err := s.verify(ctx, st.Pass, kindPass)
			if err != nil {
				return claims{}, fmt.Errorf("line: the pass of ticket %d: %w", st.Ticket, err)
			}
			return c, nil
		case SoldOut:
			return claims{}, &SoldOutError{ProductID: id}
		case SaleEnded:
			ends := s.cfg.Now()
			if p, err := s.lined(ctx, id); err == nil && p.SaleEndsAt != nil {
				ends = *p.SaleEndsAt
			}
			return claims{}, &stock.SaleEndedError{ProductID: id, EndsAt: ends}
		case Used:
			// Used by an order: this one's retry (its Idempotency-Key) is let through to be
			// answered with it, any other refused (Admit's unspent).
			return claims{kind: kindPass, product: id, ticket: t.ticket, customer: t.customer, until: st.AdmittedUntil}, nil
		case Left:
			s.metrics.refused(refusedLeft)
			return claims{}, &NotAdmittedError{ProductID: id, Reason: "the ticket left the line", Status: &st}
		case Expired:
			s.metrics.refused(refusedExpired)
			return claims{}, &AdmissionExpiredError{ProductID: id, Until: st.AdmittedUntil}
		}
		if !s.cfg.Now().Before(deadline) {
			s.metrics.refused(refusedMissing)
			return claims{}, &NotAdmittedError{ProductID: id, Reason: "not admitted within the wait: send the order again to wait on",
				Status: &st, Waited: wait}
		}
		etag = st.ETag
	}
}

// unspent checks that the admission of pass c was not used by another order, nor left or
// ended, as this replica's view of the line knows.
func (s *Service) unspent(ctx context.Context, id int64, c claims, key, ticket string) error {
	v, err := s.ensure(ctx, id)
	if err != nil {
		return err
	}
	v.mu.Lock()
	t, known := v.tickets[c.ticket]
	usedKey, usedHere := v.used[c.ticket]
	v.mu.Unlock()
	if !usedHere && known && t.Status == TicketUsed {
		usedHere, usedKey = true, t.UsedKey
	}
	switch {
	case usedHere && (key == "" || key != usedKey):
		s.metrics.refused(refusedUsed)
		return &AdmissionUsedError{ProductID: id}
	case known && t.Status == TicketLeft:
		return s.notAdmitted(ctx, id, refusedLeft, "the pass's ticket left the line", ticket)
	case known && t.Status == TicketExpired:
		s.metrics.refused(refusedExpired)
		return &AdmissionExpiredError{ProductID: id, Until: c.until}
	}
	return nil
}

// notAdmitted counts and returns a refusal for want of an admission, with the status of the
// order's ticket when it named a valid one of the product.
func (s *Service) notAdmitted(ctx context.Context, id int64, reason, detail, ticket string) error {
	s.metrics.refused(reason)
	e := &NotAdmittedError{ProductID: id, Reason: detail}
	if ticket != "" {
		if st, err := s.Status(ctx, id, ticket); err == nil {
			e.Status = &st
		}
	}
	return e
}

// passes verifies the order's Line-Pass values; invalid is true when one is not a pass of this
// service.
func (s *Service) passes(ctx context.Context, passes []string) (valid []claims, invalid bool) {
	valid = make([]claims, 0, len(passes))
	for _, p := range passes {
		c, err := s.verify(ctx, p, kindPass)
		if err != nil {
			invalid = true
			continue
		}
		valid = append(valid, c)
	}
	return valid, invalid
}

func passFor(passes []claims, product int64) (claims, bool) {
	for _, c := range passes {
		if c.product == product {
			return c, true
		}
	}
	return claims{}, false
}

// Used records that the order cleared by cl was confirmed or held (or accepted for later): its
// admissions are spent, on this replica at once and in the store by the next advance of each
// line (which then admits the next). key is the order's Idempotency-Key, if any.
func (s *Service) Used(cl Cleared, key string) {
	for _, a := range cl.Admissions {
		v := s.line(a.ProductID)
		v.mu.Lock()
		if _, done := v.used[a.Ticket]; !done {
			v.used[a.Ticket] = key
			v.pending = append(v.pending, Use{Ticket: a.Ticket, Key: key})
		}
		v.waiters.wakeTicket(a.Ticket)
		v.mu.Unlock()
		s.advance(a.ProductID)
	}
}

// Customer returns the customer the ticket token of product's line was issued to, checking
// only its signature: what a rate limit per customer is keyed on. Errors: ErrInvalidTicket.
func (s *Service) Customer(ctx context.Context, product int64, token string) (string, error) {
	c, err := s.ticket(ctx, token, product)
	return c.customer, err
}

// Draw returns product's draw, for an admin to show how the places were given. Errors:
// ErrNotDrawn, ErrUnavailable, the context's.
func (s *Service) Draw(ctx context.Context, product int64) (Draw, error) {
	return s.store.Drawn(ctx, product)
}

// Summary returns product's line as a whole, from this replica's view. Errors: ErrNoLine,
// ErrUnavailable, the Views' errors, the context's.
func (s *Service) Summary(ctx context.Context, product int64) (Summary, error) {
	p, v, err := s.lineOf(ctx, product)
	if err != nil {
		return Summary{}, err
	}
	now := s.cfg.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	v.touch(now, p)
	return Summary{ProductID: product, Version: v.version, DrawnAt: v.drawnAt, Drawn: v.drawn, InLine: v.waiting(),
		Active: v.active(now), Admissions: v.admissions, SoldOut: v.soldOut()}, nil
}

// lineOf returns product id as this replica's views show it and this replica's view of its
// line, read once if it never was. Errors: as lined and ensure.
func (s *Service) lineOf(ctx context.Context, id int64) (stock.Product, *lineView, error) {
	p, err := s.lined(ctx, id)
	if err != nil {
		return stock.Product{}, nil, err
	}
	v, err := s.ensure(ctx, id)
	if err != nil {
		return stock.Product{}, nil, err
	}
	return p, v, nil
}

// ticket verifies token as a ticket of product.
func (s *Service) ticket(ctx context.Context, token string, product int64) (claims, error) {
	c, err := s.verify(ctx, token, kindTicket)
	if err != nil {
		return claims{}, err
	}
	if c.product != product {
		return claims{}, ErrInvalidTicket
	}
	return c, nil
}

// verify verifies token as a token of kind, reading the keys again (at most once a second)
// when it names one this replica does not know.
func (s *Service) verify(ctx context.Context, token string, kind byte) (claims, error) {
	c, err := s.keys.verify(token, kind)
	if !errors.Is(err, errUnknownKey) {
		return c, err
	}
	s.keysMu.Lock()
	defer s.keysMu.Unlock()
	if time.Since(s.keysRead) >= time.Second {
		s.keysRead = time.Now()
		if keys, err := s.store.Keys(ctx); err == nil {
			s.keys.set(keys)
		}
	}
	if c, err = s.keys.verify(token, kind); errors.Is(err, errUnknownKey) {
		err = ErrInvalidTicket
	}
	return c, err
}

// line returns this replica's view of product's line, making it (not loaded) if it has none.
func (s *Service) line(id int64) *lineView {
	if v := s.known(id); v != nil {
		return v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	v, ok := s.lines[id]
	if !ok {
		v = newLineView(id)
		v.touched = s.cfg.Now()
		s.lines[id] = v
	}
	return v
}

// known returns this replica's view of product's line, nil if it has none.
func (s *Service) known(id int64) *lineView {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lines[id]
}

// ensure returns this replica's view of product's line, read from the store (once for every
// caller) if it was never. Errors: ErrUnavailable, the context's.
func (s *Service) ensure(ctx context.Context, id int64) (*lineView, error) {
	v := s.line(id)
	v.mu.Lock()
	loaded := v.loaded
	v.mu.Unlock()
	if loaded {
		return v, nil
	}
	ch := s.loads.DoChan(strconv.FormatInt(id, 10), func() (any, error) {
		// The read serves every caller that joins it: it must not end with the first.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), readTimeout)
		defer cancel()
		return nil, s.read(ctx, v, false)
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return v, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("line: reading the line of product %d: %w", id, context.Cause(ctx))
	}
}

// read reads what changed in v's line since the version v knows, and applies it; with
// recount, it counts the tickets waiting without a place again, however recently it did. A
// line that was never made (nobody joined yet) reads as an empty, loaded one.
func (s *Service) read(ctx context.Context, v *lineView, recount bool) error {
	now := s.cfg.Now()
	v.mu.Lock()
	since := v.version
	count := recount || !v.loaded || now.Sub(v.unplacedAt) >= countEvery
	v.mu.Unlock()
	snap, err := s.store.Line(ctx, v.id, since, count)
	if err != nil {
		return err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if !snap.Exists {
		v.loaded = true
		return nil
	}
	v.apply(snap, now)
	s.schedule(v, now)
	return nil
}

// countEvery is how often a replica counts the tickets of a line that wait without a place
// (the queue before the draw): a count, not an index probe, so at most once a second.
const countEvery = time.Second

// readTimeout bounds one read of a line, and advanceTimeout one advance.
const (
	readTimeout    = 2 * time.Second
	advanceTimeout = 5 * time.Second
)

// touch records that a request asked about v, and the product it found.
func (v *lineView) touch(now time.Time, p stock.Product) {
	v.touched = now
	v.product = p
}
