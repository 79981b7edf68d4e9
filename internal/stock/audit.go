package stock

import (
	"context"
	"errors"
	"time"
)

// maxAudits is how many audits a replica runs at once. An audit recounts every order of the
// product, which on a product with a million orders holds a connection of the purchase path's
// pool, and a core of Postgres, for seconds: one at a time leaves the rest to the sale.
const maxAudits = 1

// auditRetry is what a refused audit is told to wait: about what a large recount takes.
const auditRetry = 5 * time.Second

// Audit accounts for product id's stock by recounting what was received and sold. One audit
// runs at a time, on this replica (refused here without a query) and across the replicas (the
// store refuses a recount while another runs); another is refused rather than queued: a queue
// would start recounts for callers long gone, and a crowd of them would keep Postgres scanning
// after the crowd had left. Errors: *ProductNotFoundError, ErrUnavailable, a *BusyError when
// another audit is running.
func (s *Service) Audit(ctx context.Context, id int64) (Audit, error) {
	if !s.audits.TryAcquire(1) {
		return Audit{}, &BusyError{RetryAfter: auditRetry, Reason: "another audit is running on this replica"}
	}
	defer s.audits.Release(1)
	a, err := s.store.Audit(ctx, id)
	if errors.Is(err, ErrBusy) {
		return Audit{}, &BusyError{RetryAfter: auditRetry, Reason: err.Error()}
	}
	return a, err
}
