package stock

import (
	"context"
	"errors"
	"time"
)

// refuseFromView refuses an order for one product that the views know does not exist, is not
// on sale (ruleRefusal), or is sold out, with no query and no lock, and returns nil when they
// know none of these.
//
// "Does not exist" comes from a Postgres read that began at most one lease before the order,
// and a creation is answered only once every such read from before it is older than that
// (Views.Created), so it never hides a product whose creation has been answered. Nothing is
// stored for an order of a product that does not exist, so a key has no outcome to replay —
// unless the product came into existence since: only an order decided between the insert's
// commit and the creation's answer (its id guessed), retried within one lease, could meet
// such a refusal.
//
// A view is never above the stock in Postgres (purchases lower it after the view was read; a
// restock waits out every lease before raising it), so "sold out" from a view is true when it
// is said, and the "available" it reports, 0, is exact. An order with an Idempotency-Key is
// refused so only when the key has no stored outcome for the product to replay (storedKeys); a
// key used before for some other request is then answered sold-out, not
// idempotency-key-reused: both sell nothing.
func (s *Service) refuseFromView(ctx context.Context, it Item, key, customer string) error {
	if s.cfg.Views == nil {
		return nil
	}
	r := s.cfg.Views.Refusal(ctx, it.ProductID)
	if r.Missing {
		return &ProductNotFoundError{ProductID: it.ProductID}
	}
	if err := s.ruleRefusal(ctx, it, key, customer, r); err != nil {
		return err
	}
	if !r.SoldOut {
		return nil
	}
	if key != "" {
		if unclaimed, ok := s.keys.unclaimed(ctx, it.ProductID, r.Version, RecordKey{CustomerID: customer, Key: key}); !ok || !unclaimed {
			return nil
		}
	}
	s.metrics.refusedFromView()
	return &SoldOutError{ProductID: it.ProductID, Requested: it.Quantity, Available: 0}
}

// ruleRefusal refuses an order for one product, of customer, that the sale rules of its view
// (nil when unknown) refuse: a sale not open yet or ended, on this replica's clock (Config.Now),
// or a customer this replica knows has no room left under the limit (customerMemory). Postgres's
// clock decides every sale, so a replica whose clock runs ahead lets orders through that the
// purchase statement then refuses; one that runs behind refuses for as long as it lags, saying
// when to come back. A refusal by a rule stores nothing, so an order with a key is refused only
// once the key is known to have no stored outcome (keyUnclaimed): an order confirmed before an
// admin ended the sale is replayed, not refused.
func (s *Service) ruleRefusal(ctx context.Context, it Item, key, customer string, r Refusal) error {
	if !r.Known || s.cfg.SkipRuleChecks {
		return nil
	}
	sale, version := r.Sale, r.Version
	err := sale.closed(it.ProductID, s.cfg.Now())
	// A product sold with holds gives units back when they expire, so what a customer was seen
	// to have is no bound from below there: its batches decide the limit.
	if err == nil && sale.Limited() && sale.HoldFor == 0 {
		if over := s.customers.refusal(it.ProductID, sale.MaxPerCustomer, customer, it.Quantity); over != nil {
			err = over
		}
	}
	if err == nil {
		return nil
	}
	if key != "" && !s.keyUnclaimed(ctx, it.ProductID, RecordKey{CustomerID: customer, Key: key}, version, err) {
		return nil // the purchase path answers it, from the record
	}
	s.metrics.refusedFast(err)
	return err
}

// windowMargin is how far from the opening a replica's clock must be for an order with a key to
// be refused "not open" from the product's key set: nothing is confirmed before the opening,
// by Postgres's clock, and the margin covers a replica's clock running that much behind it.
const windowMargin = time.Second

// keyUnclaimed reports whether key is known to have no stored outcome, so that an order refused
// by a rule (err) may be answered so without the purchase path. While the sale is closed
// nothing is confirmed for the product, so, as for a sold-out product, the keys with an outcome
// for it at the view's version are loaded once per replica and version (storedKeys); an order
// of a customer at the limit has its key looked up (one query for the crowd of the moment):
// other customers' orders are confirmed meanwhile.
func (s *Service) keyUnclaimed(ctx context.Context, id int64, key RecordKey, version int64, err error) bool {
	if notOpen, ok := errors.AsType[*SaleNotOpenError](err); !errors.Is(err, ErrCustomerLimit) && (!ok || notOpen.Opens() > windowMargin) {
		unclaimed, known := s.keys.unclaimed(ctx, id, version, key)
		return known && unclaimed
	}
	records, lookupErr := s.lookups.get(ctx, []RecordKey{key})
	_, stored := records[key]
	return !stored && lookupErr == nil
}
