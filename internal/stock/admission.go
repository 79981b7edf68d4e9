package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/google/uuid"
)

// PlaceOrder buys every item of req, all or nothing.
//
// An order with an Idempotency-Key is decided once: a request with a key that already has a
// stored outcome — stored by an earlier batch, on any replica, or by an earlier order of the
// same batch — is answered with that outcome (Replayed), never bought again. The key's record
// is written in the same transaction as the order, so Postgres alone keeps one order per key.
//
// Errors: *ValidationError; *ProductNotFoundError; *SoldOutError (nothing was sold; Replayed
// when it is a stored answer); a sale rule's refusal, nothing sold or stored under the key
// (*SaleNotOpenError, *SaleEndedError, *CustomerLimitError, *HoldLimitError); ErrIdempotencyKeyReused; ErrBusy (the product's queue is full,
// its lock could not be had in time, or writes kept conflicting; nothing was sold — a
// *BusyError says when to retry); ErrLockLost (a lock expired mid-batch and a defense layer
// refused the write; nothing was sold); ErrUnavailable (Postgres or Redis unreachable, or —
// with ErrOutcomeUnknown — the outcome of the commit is unknown: retry with the same key;
// whatever else the error holds, an error with ErrUnavailable never means "nothing was sold");
// the context's error when the caller gave up while the order was still queued (nothing was
// sold). A keyed order is refused busy (or its lock lost) only once its key is known to have
// no stored outcome: one that has is answered with it (replayStored).
func (s *Service) PlaceOrder(ctx context.Context, req OrderRequest) (res OrderResult, err error) {
	defer func() { s.countOutcome(res, err) }()

	items, err := s.validateOrder(req)
	if err != nil {
		return OrderResult{}, err
	}
	if len(items) == 1 {
		// Before anything else is made for the order: before a sale opens, and after a
		// sell-out, this is most of them.
		if err := s.refuseFromView(ctx, items[0], req.IdempotencyKey, req.CustomerID); err != nil {
			return OrderResult{}, err
		}
	}
	t := &ticket{id: uuid.Must(uuid.NewV7()), customerID: req.CustomerID, items: items, key: req.IdempotencyKey, lockWait: req.LockWait}
	if t.key != "" {
		t.fingerprint = requestFingerprint(req.CustomerID, items)
	}
	var o outcome
	if len(items) == 1 {
		o = s.batches.submit(ctx, items[0].ProductID, t)
		if busy, ok := errors.AsType[*BusyError](o.err); ok && busy.Shed {
			// Turned away before any batch looked at it: its key may still have an
			// outcome from an earlier attempt, which a refusal must not hide.
			out := [1]outcome{o}
			s.replayStored(ctx, []*ticket{t}, out[:])
			o = out[0]
		}
	} else {
		ids := make([]int64, len(items))
		for i, it := range items {
			ids[i] = it.ProductID
		}
		out := s.decide(ctx, ids, []*ticket{t}, nil, nil)
		s.replayStored(ctx, []*ticket{t}, out)
		o = out[0]
	}
	if o.err != nil {
		return OrderResult{}, o.err
	}
	return o.result(), nil
}

// validateOrder checks req against the rules and returns its items sorted by product id: the
// order in which rows are written, so that concurrent carts never deadlock in Postgres.
func (s *Service) validateOrder(req OrderRequest) ([]Item, error) {
	if err := ValidateCustomerID(req.CustomerID); err != nil {
		return nil, err
	}
	switch {
	case len(req.Items) == 0:
		return nil, &ValidationError{Field: "items", Reason: "must not be empty"}
	case len(req.Items) > MaxItems:
		return nil, &ValidationError{Field: "items", Reason: fmt.Sprintf("must have at most %d entries", MaxItems)}
	}
	if err := validKey(req.IdempotencyKey); err != nil {
		return nil, err
	}
	items := slices.Clone(req.Items)
	slices.SortStableFunc(items, func(a, b Item) int { return cmpInt64(a.ProductID, b.ProductID) })
	// The field is named by the item's place in the request, not in the sorted copy.
	field := func(it Item, name string) string {
		return fmt.Sprintf("items[%d].%s", slices.Index(req.Items, it), name)
	}
	for i, it := range items {
		switch {
		case it.ProductID < 1:
			return nil, &ValidationError{Field: field(it, "product_id"), Reason: "must be a positive product id"}
		case it.Quantity < 1 || it.Quantity > s.cfg.MaxQuantity:
			return nil, &ValidationError{Field: field(it, "quantity"), Reason: fmt.Sprintf("must be between 1 and %d", s.cfg.MaxQuantity)}
		case i > 0 && items[i-1].ProductID == it.ProductID:
			return nil, &ValidationError{Field: field(it, "product_id"), Reason: fmt.Sprintf("product %d appears more than once", it.ProductID)}
		}
	}
	return items, nil
}

// validKey checks an Idempotency-Key: empty (none), or at most MaxIdempotencyKeyLen characters
// of plain text (characters, as every other limit here counts them, not bytes).
func validKey(key string) error {
	if utf8.RuneCountInString(key) > MaxIdempotencyKeyLen {
		return &ValidationError{Field: "Idempotency-Key", Reason: fmt.Sprintf("must be at most %d characters", MaxIdempotencyKeyLen)}
	}
	return plainText("Idempotency-Key", key)
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
