package stock

import (
	"context"
	"errors"
)

// countOutcome counts an order's answer as the outcome the API answers for it
// (stocksvc_orders_total), and a confirmed order's units as sold.
func (s *Service) countOutcome(res OrderResult, err error) {
	switch {
	case err == nil && res.Replayed: // a key's accepted order too
		s.metrics.outcome(outcomeReplayed)
	case err == nil:
		s.metrics.outcome(outcomeConfirmed)
		for _, it := range res.Order.Items {
			s.metrics.sold(it.Quantity)
		}
	case errors.Is(err, ErrSoldOut):
		s.metrics.outcome(outcomeSoldOut)
	case refusedByRule(err):
		s.metrics.outcome(ruleOutcome(err))
	case errors.Is(err, ErrInvalid), errors.Is(err, ErrProductNotFound), errors.Is(err, ErrIdempotencyKeyReused):
		s.metrics.outcome(outcomeRejected)
	case errors.Is(err, ErrUnavailable), errors.Is(err, context.DeadlineExceeded):
		// What the API answers 503, whatever else the error holds (a lock lost while the
		// commit's reply was lost, say): a dependency down or slow, or an outcome unknown.
		s.metrics.outcome(outcomeUnavailable)
	case errors.Is(err, ErrBusy), errors.Is(err, ErrLockLost):
		s.metrics.outcome(outcomeBusy)
	case errors.Is(err, context.Canceled):
		s.metrics.outcome(outcomeCancelled)
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
