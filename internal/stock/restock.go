package stock

import (
	"context"
	"errors"
	"fmt"
)

// Restock adds stock to a product, under the product's lock (so a restock never races a
// batch's read-decide-write). With an idempotency key it is done once:
// a retry is answered with the first restock (Replayed), and the same key on another request is
// ErrIdempotencyKeyReused. Errors: *ValidationError, *ProductNotFoundError,
// ErrIdempotencyKeyReused, ErrBusy, ErrLockLost, ErrUnavailable.
func (s *Service) Restock(ctx context.Context, req RestockRequest) (RestockResult, error) {
	if req.Quantity < 1 || req.Quantity > MaxStock {
		return RestockResult{}, &ValidationError{Field: "quantity", Reason: fmt.Sprintf("must be between 1 and %d", MaxStock)}
	}
	if err := validKey(req.IdempotencyKey); err != nil {
		return RestockResult{}, err
	}
	r := Restocking{ProductID: req.ProductID, Quantity: req.Quantity, Key: req.IdempotencyKey}
	if r.Key != "" {
		r.Fingerprint = restockFingerprint(r.ProductID, r.Quantity)
	}
	restock := func(ctx context.Context) (RestockResult, error) {
		res, err := s.store.Restock(ctx, r)
		if errors.Is(err, ErrConflict) {
			// Another request stored the key first; nothing was written. Now it is there.
			res, err = s.store.Restock(ctx, r)
		}
		return res, err
	}
	if s.cfg.Views != nil {
		restock = s.raising(r.ProductID, restock)
	}
	// A product that does not exist needs no lock (nor a view's epoch) to say so, and taking
	// one would leave its fencing counter behind in Redis for good.
	snap, err := s.store.Snapshot(ctx, []int64{r.ProductID}, nil, nil)
	if err != nil {
		return RestockResult{}, err
	}
	if _, ok := snap.Levels[r.ProductID]; !ok {
		return RestockResult{}, &ProductNotFoundError{ProductID: r.ProductID}
	}
	var res RestockResult
	err = s.locker.WithProducts(ctx, []int64{r.ProductID}, func(ctx context.Context, g *Grant) error {
		ctx, cancel := context.WithTimeout(ctx, s.cfg.PurchaseTimeout)
		defer cancel()
		r.Fence = g.Fences[r.ProductID] // 0 without a lock; and no note left: the level changes
		var err error
		res, err = restock(ctx)
		return err
	})
	if layer, ok := caughtBy(err); ok {
		s.metrics.caught(layer)
	}
	return res, err
}

// raising wraps a restock so that the views allow it: no view of the product is leased across
// the write, so that once it has returned no replica refuses an order on the level before it.
func (s *Service) raising(id int64, restock func(context.Context) (RestockResult, error)) func(context.Context) (RestockResult, error) {
	return func(ctx context.Context) (RestockResult, error) {
		done, err := s.cfg.Views.Raise(ctx, id)
		if err != nil {
			return RestockResult{}, err
		}
		res, err := restock(ctx)
		if err == nil && !res.Replayed {
			done(&res.Product)
		} else {
			// Failed, unknown, or a replay (whose product is the level an earlier restock
			// left, not today's): the next read rebuilds the view from Postgres.
			done(nil)
		}
		return res, err
	}
}
