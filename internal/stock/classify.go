package stock

import (
	"context"
	"errors"
)

// countOutcome counts an order's answer as the outcome the API answers for it
// (stocksvc_orders_total), and the units of an order it wrote as what they became
// (stocksvc_units_total): confirmed — sold, as the audit counts them — or held, whose units
// are counted again by holds.go when the hold is confirmed, cancelled or expires.
func (s *Service) countOutcome(res OrderResult, err error) {
	switch {
	case err == nil && res.Replayed: // a key's accepted order too
		s.metrics.outcome(outcomeReplayed)
	case err == nil && res.Order.Status == OrderStatusHeld:
		s.metrics.outcome(outcomeHeld)
		s.metrics.unitsBecame(OrderStatusHeld, res.Order.Items)
	case err == nil:
		s.metrics.outcome(outcomeConfirmed)
		s.metrics.unitsBecame(OrderStatusConfirmed, res.Order.Items)
	case errors.Is(err, ErrSoldOut):
		s.metrics.outcome(outcomeSoldOut)
	case refusedByRule(err):
		s.metrics.outcome(ruleOutcome(err))
	case errors.Is(err, ErrIdempotencyKeyReused):
		s.metrics.outcome(outcomeKeyReused)
	case errors.Is(err, ErrProductNotFound):
		s.metrics.outcome(outcomeProductNotFound)
	case errors.Is(err, ErrInvalid):
		s.metrics.outcome(outcomeInvalid)
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// What the API answers 503, whatever else the error holds (a lock lost while the
		// commit's reply was lost, say): a dependency down or slow, or an outcome unknown.
		s.metrics.outcome(outcomeUnavailable)
	case errors.Is(err, ErrBusy), errors.Is(err, ErrLockLost):
		s.metrics.outcome(outcomeBusy)
	case errors.Is(err, context.Canceled):
		s.metrics.outcome(outcomeClientGone)
	default:
		s.metrics.outcome(outcomeError)
	}
}

// caughtBy returns the layer that refused a write, if one did.
func caughtBy(err error) (Layer, bool) {
	var caught *CaughtError
	if errors.As(err, &caught) {
		return caught.Layer, true
	}
	return "", false
}
