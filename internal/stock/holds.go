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
type HoldStore interface {
	// ConfirmHold confirms order id if it is held and its hold has not expired, by the store's
	// clock — its units leave its customer's held units as it does — and returns the order as
	// it stands: a confirmed order (also one confirmed before, or final at once) is returned as
	// it is. Errors: ErrOrderNotFound, ErrHoldExpired (expired, or held past expires_at),
	// ErrOrderCancelled, ErrUnavailable.
	ConfirmHold(ctx context.Context, id uuid.UUID) (Order, error)
	// ReleaseHolds ends the holds among ids that are still held — cancelled, or with expire,
	// expired if their expires_at has passed — and gives their units back to their products
	// and their customers' counts (bought, and held), in one transaction that first locks the products' rows in
	// ascending id order (products: every product of those orders). It returns the products
	// it gave units back to, as it left them, and for each hold it ended the time from its
	// expires_at to the release (negative when released before it: a cancel). Errors:
	// ErrUnavailable.
	ReleaseHolds(ctx context.Context, ids []uuid.UUID, products []int64, expire bool) (Released, error)
	// DueHolds returns up to limit orders held whose expires_at is more than grace ago, oldest
	// first, with their products; among, when not nil, restricts them to those orders.
	// Errors: ErrUnavailable.
	DueHolds(ctx context.Context, among []uuid.UUID, grace time.Duration, limit int) (map[uuid.UUID][]int64, error)
	// Replicated returns once every write the store has committed is kept as an acknowledged
	// one must be — on Postgres with synchronous replication, on a standby — so that a state
	// read from the store (a hold another call ended) can be answered as done. ReleaseHolds
	// and ConfirmHold acknowledge their own writes so already. Errors: ErrUnavailable.
	Replicated(ctx context.Context) error
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

// Confirm confirms held order id — the customer paid — before its hold expires. A confirmed
// order is answered as it is (a retry). Errors: ErrOrderNotFound, ErrHoldExpired,
// ErrOrderCancelled, ErrUnavailable.
func (s *Service) Confirm(ctx context.Context, id uuid.UUID) (Order, error) {
	before, err := s.store.Order(ctx, id)
	if err != nil {
		return Order{}, err
	}
	o, err := s.store.ConfirmHold(ctx, id)
	if err == nil && before.Status == OrderStatusHeld && o.Status == OrderStatusConfirmed {
		s.metrics.holds(OrderStatusConfirmed, 1)
		s.metrics.unitsBecame(OrderStatusConfirmed, o.Items)
	}
	return o, err
}

// Cancel cancels held order id and gives its units back — to the stock, on every replica's
// views before it answers (as a restock does), and to the customer's count — once, however
// often it is called or raced. An order already expired is answered as it is. A cancel is
// answered only once it is replicated (Store.Replicated): one whose commit is on the primary
// alone is ErrUnavailable, outcome unknown, and so is an order found cancelled or expired by
// an earlier call until a standby has it. Errors: ErrOrderNotFound, ErrOrderConfirmed,
// ErrUnavailable, the context's error.
func (s *Service) Cancel(ctx context.Context, id uuid.UUID) (Order, error) {
	o, err := s.store.Order(ctx, id)
	if err != nil {
		return Order{}, err
	}
	switch o.Status {
	case OrderStatusConfirmed:
		return Order{}, ErrOrderConfirmed
	case OrderStatusCancelled, OrderStatusExpired:
		return s.ended(ctx, o)
	}
	n, err := s.release(ctx, []uuid.UUID{id}, orderProducts(o.Items), false)
	if err != nil {
		return Order{}, err
	}
	if n > 0 {
		s.metrics.holds(OrderStatusCancelled, n)
	}
	o, err = s.store.Order(ctx, id)
	switch {
	case err != nil:
		return Order{}, err
	case o.Status == OrderStatusConfirmed:
		// Confirmed between the read and the release: nothing was given back.
		return Order{}, ErrOrderConfirmed
	case n == 0:
		// Ended meanwhile by another call, or the expiry.
		return s.ended(ctx, o)
	}
	return o, nil
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
	n, err := s.release(ctx, ids, slices.Compact(products), true)
	if n > 0 {
		s.metrics.holds(OrderStatusExpired, n)
	}
	return n, err
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

// release gives the units of the holds ids back, the views of products raised around the
// write so that no replica refuses an order on the level before it once this returns; it
// reports how many holds it ended.
func (s *Service) release(ctx context.Context, ids []uuid.UUID, products []int64, expire bool) (int, error) {
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
			return 0, err
		}
	}
	rel, err := s.store.ReleaseHolds(ctx, ids, products, expire)
	left := map[int64]Product{}
	for _, p := range rel.Products {
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
		return 0, fmt.Errorf("release holds: %w", err)
	}
	s.metrics.unitsReleased(rel.Units, expire)
	for _, lag := range rel.Lag {
		if expire {
			s.metrics.expiryLag(lag)
		}
	}
	return len(rel.Lag), nil
}
