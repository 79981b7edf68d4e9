package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"golang.org/x/sync/errgroup"
)

// A product sold with a hold (SaleRules.HoldFor) has its orders decided by the same purchase
// path, every layer on, and written held: their units are taken at once and given back unless
// the customer confirms (pays) before expires_at. Confirm, cancel and expiry race; Postgres
// decides each hold once, by a change of status conditioned on 'held', and gives the units back
// in the transaction that makes the change, so a release that is retried or replayed gives
// nothing twice.

var (
	// ErrHoldExpired means the hold ended before it was confirmed: its units went back (or go
	// back with the expiry already due); nothing was bought.
	ErrHoldExpired = errors.New("stock: hold expired")
	// ErrOrderCancelled means the order was cancelled: its units went back.
	ErrOrderCancelled = errors.New("stock: order cancelled")
	// ErrOrderConfirmed means the order is confirmed (paid) and cannot be cancelled here.
	ErrOrderConfirmed = errors.New("stock: order confirmed")
)

// HoldStore is what holds ask of the store (the Store embeds it).
//
// A confirm and a cancel are each decided by one statement that checks everything itself —
// the order's customer (customer, "" for any: an admin's call), its status and, for a confirm,
// its expires_at — and returns the order as it left it. Nothing is read after it to answer
// but to tell why it matched nothing, and nothing before it that it relies on (a cancel reads
// its order first for the products whose views it raises, and may answer from that read at
// once, but the statement checks again).
type HoldStore interface {
	// ConfirmHold confirms order id of customer ("" for any customer's) if it is held and its
	// hold has not expired, by the store's clock — its units leave its customer's held units
	// as it does — and returns the order as it stands, and whether this call confirmed it: a
	// confirmed order (also one confirmed before, or final at once) is returned as it is.
	// Errors: ErrOrderNotFound (also another customer's order), ErrHoldExpired (expired, or
	// held past expires_at), ErrOrderCancelled, ErrUnavailable.
	ConfirmHold(ctx context.Context, id uuid.UUID, customer string) (o Order, confirmed bool, err error)
	// CancelHold cancels order id of customer ("" for any customer's) if it is still held,
	// and gives its units back to its products (products: all of them, which it locks in
	// ascending id order first, as a cart's write does) and to its customer's counts (bought,
	// and held), in one statement. It returns the order as it stands — also when another call
	// or the expiry ended it, or it was confirmed: then Cancelled is false — and the products
	// it gave units back to, as it left them. Errors: ErrOrderNotFound (also another
	// customer's order), ErrUnavailable.
	CancelHold(ctx context.Context, id uuid.UUID, customer string, products []int64) (Cancel, error)
	// ReleaseHolds ends the holds among ids that are still held — cancelled, or with expire,
	// expired if their expires_at has passed — and gives their units back to their products
	// and their customers' counts (bought, and held), in one transaction that first locks the products' rows in
	// ascending id order (products: every product of those orders). It returns the products
	// it gave units back to, as it left them, and for each hold it ended the time from its
	// expires_at to the release (negative when released before it). Errors: ErrUnavailable.
	ReleaseHolds(ctx context.Context, ids []uuid.UUID, products []int64, expire bool) (Released, error)
	// DueHolds returns up to limit orders held whose expires_at is more than grace ago, oldest
	// first, with their products; among, when not nil, restricts them to those orders.
	// Errors: ErrUnavailable.
	DueHolds(ctx context.Context, among []uuid.UUID, grace time.Duration, limit int) (map[uuid.UUID][]int64, error)
	// Replicated returns once every write the store has committed is kept as an acknowledged
	// one must be — on Postgres with synchronous replication, on a standby — so that a state
	// read from the store (a hold another call ended) can be answered as done. ReleaseHolds,
	// CancelHold and ConfirmHold acknowledge their own writes so already. Errors:
	// ErrUnavailable.
	Replicated(ctx context.Context) error
}

// Cancel is what CancelHold did.
type Cancel struct {
	// Order is the order as it stands after the call.
	Order Order
	// Cancelled says that this call cancelled it (and gave its units back).
	Cancelled bool
	// Products are the products it gave units back to, as it left them.
	Products []Product
}

// Released is what ReleaseHolds gave back.
type Released struct {
	Products []Product
	// Lag is, per hold released, expires_at to the release on the store's clock.
	Lag map[uuid.UUID]time.Duration
	// Units is how many units the holds released gave back, all together.
	Units int64
}

// HoldScheduler schedules the expiry of holds (package async does, with River jobs due at each
// hold's expires_at; a sweep catches what a lost schedule leaves).
type HoldScheduler interface {
	// ScheduleExpiries schedules each hold's expiry at its time.
	ScheduleExpiries(ctx context.Context, holds map[uuid.UUID]time.Time) error
}

// holdScheduler holds the Service's HoldScheduler, set once at wiring (UseHoldScheduler).
type holdScheduler struct{ p atomic.Pointer[HoldScheduler] }

// UseHoldScheduler makes h schedule the expiries of the holds the Service writes. The scheduler
// (package async) is made from the Service, so it is given afterwards, before the service
// serves; without one, only DueHolds' sweep ends holds.
func (s *Service) UseHoldScheduler(h HoldScheduler) { s.scheduler.p.Store(&h) }

// scheduleTimeout bounds the scheduling of a batch's expiries: the sweep is behind it.
const scheduleTimeout = time.Second

// scheduleExpiries schedules the expiries of a committed batch's holds. A failure costs only
// time: the sweep (ExpireDue) ends a hold whose job was never made.
func (s *Service) scheduleExpiries(holds map[uuid.UUID]time.Time) {
	if len(holds) == 0 {
		return
	}
	s.metrics.holds(outcomeHeld, len(holds))
	h := s.scheduler.p.Load()
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scheduleTimeout)
	defer cancel()
	if err := (*h).ScheduleExpiries(ctx, holds); err != nil {
		s.metrics.holdScheduleFailed()
	}
}

// Confirm confirms held order id of customer ("" for any customer's: an admin's call) — the
// customer paid — before its hold expires. A confirmed order is answered as it is (a retry).
// Another customer's order is one that does not exist. Errors: ErrOrderNotFound,
// ErrHoldExpired, ErrOrderCancelled, ErrUnavailable.
func (s *Service) Confirm(ctx context.Context, id uuid.UUID, customer string) (Order, error) {
	o, confirmed, err := s.store.ConfirmHold(ctx, id, customer)
	if err != nil {
		return Order{}, err
	}
	if confirmed {
		s.metrics.holds(OrderStatusConfirmed, 1)
		s.metrics.unitsBecame(OrderStatusConfirmed, o.Items)
	}
	return o, nil
}

// Cancel cancels held order id of customer ("" for any customer's: an admin's call) and gives
// its units back — to the stock, on every replica's views before it answers (as a restock
// does), and to the customer's count — once, however often it is called or raced. Another
// customer's order is one that does not exist; an order already expired is answered as it is.
// A cancel is answered only once it is replicated (Store.Replicated): one whose commit is on
// the primary alone is ErrUnavailable, outcome unknown, and so is an order found cancelled or
// expired by an earlier call until a standby has it. Errors: ErrOrderNotFound,
// ErrOrderConfirmed, ErrUnavailable, the context's error.
//
// It reads the order before the statement that decides it only for its products, whose views
// are raised around that statement (release); the statement checks the customer and the status
// again itself, so a confirm or an expiry between the two is seen by it.
func (s *Service) Cancel(ctx context.Context, id uuid.UUID, customer string) (Order, error) {
	o, err := s.store.Order(ctx, id)
	switch {
	case err != nil:
		return Order{}, err
	case customer != "" && o.CustomerID != customer:
		return Order{}, ErrOrderNotFound
	}
	switch o.Status {
	case OrderStatusConfirmed:
		return Order{}, ErrOrderConfirmed
	case OrderStatusCancelled, OrderStatusExpired:
		return s.ended(ctx, o)
	}
	products := orderProducts(o.Items)
	var c Cancel
	err = s.release(ctx, products, func() ([]Product, error) {
		var err error
		c, err = s.store.CancelHold(ctx, id, customer, products)
		return c.Products, err
	})
	switch {
	case err != nil:
		return Order{}, err
	case c.Cancelled:
		s.metrics.holds(OrderStatusCancelled, 1)
		s.metrics.unitsBecame(OrderStatusCancelled, c.Order.Items)
		return c.Order, nil
	case c.Order.Status == OrderStatusConfirmed:
		// Confirmed between the read and the cancel: nothing was given back.
		return Order{}, ErrOrderConfirmed
	}
	// Ended meanwhile by another call, or the expiry.
	return s.ended(ctx, c.Order)
}

// ended answers a cancel with hold o, which an earlier call or the expiry ended: once that end
// is replicated, since the earlier call's commit may be on the primary alone.
func (s *Service) ended(ctx context.Context, o Order) (Order, error) {
	if err := s.store.Replicated(ctx); err != nil {
		return Order{}, err
	}
	return o, nil
}

// ExpireHolds expires the holds among ids whose time has come, giving their units back, and
// reports how many it expired (a hold confirmed, cancelled or expired meanwhile is left as it
// is). Errors: ErrUnavailable, the context's error.
func (s *Service) ExpireHolds(ctx context.Context, holds map[uuid.UUID][]int64) (int, error) {
	if len(holds) == 0 {
		return 0, nil
	}
	ids := make([]uuid.UUID, 0, len(holds))
	var products []int64
	for id, ps := range holds {
		ids = append(ids, id)
		products = append(products, ps...)
	}
	slices.Sort(products)
	products = slices.Compact(products)
	var rel Released
	err := s.release(ctx, products, func() ([]Product, error) {
		var err error
		rel, err = s.store.ReleaseHolds(ctx, ids, products, true)
		return rel.Products, err
	})
	if err != nil {
		return 0, err
	}
	s.metrics.unitsReleased(rel.Units, true)
	for _, lag := range rel.Lag {
		s.metrics.expiryLag(lag)
	}
	if n := len(rel.Lag); n > 0 {
		s.metrics.holds(OrderStatusExpired, n)
	}
	return len(rel.Lag), nil
}

// ExpireDue expires up to limit holds whose expires_at passed more than grace ago — among the
// orders among, when not nil: a scheduled expiry's; all of them: the sweep behind the scheduled
// expiries, which ends a hold whose job was lost — and reports how many. Errors: as
// ExpireHolds.
func (s *Service) ExpireDue(ctx context.Context, among []uuid.UUID, grace time.Duration, limit int) (int, error) {
	due, err := s.store.DueHolds(ctx, among, grace, limit)
	if err != nil {
		return 0, err
	}
	return s.ExpireHolds(ctx, due)
}

// orderProducts lists the products of items, ascending, once each.
func orderProducts(items []Item) []int64 {
	ids := make([]int64, len(items))
	for i, it := range items {
		ids[i] = it.ProductID
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// release runs write, which gives units of products back and returns the products it raised as
// it left them, with the views of products raised around it, so that no replica refuses an
// order on the level before it once this returns; the customers' counts of the products raised
// are forgotten (they went down).
func (s *Service) release(ctx context.Context, products []int64, write func() ([]Product, error)) error {
	var dones []func(*Product)
	if s.cfg.Views != nil {
		// Every product's raise waits out a lease: they wait together.
		dones = make([]func(*Product), len(products))
		g, gctx := errgroup.WithContext(ctx)
		for i, id := range products {
			g.Go(func() error {
				done, err := s.cfg.Views.Raise(gctx, id)
				dones[i] = done
				return err
			})
		}
		if err := g.Wait(); err != nil {
			for _, done := range dones {
				if done != nil {
					done(nil)
				}
			}
			return err
		}
	}
	raised, err := write()
	left := map[int64]Product{}
	for _, p := range raised {
		left[p.ID] = p
		s.customers.forget(p.ID) // counts went down
	}
	for i, done := range dones {
		if p, ok := left[products[i]]; ok && err == nil {
			done(&p)
		} else {
			done(nil) // unchanged, or unknown: the next read rebuilds the view
		}
	}
	if err != nil {
		return fmt.Errorf("release holds: %w", err)
	}
	return nil
}
