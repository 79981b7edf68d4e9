package stock

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
)

// Orders accepted now and decided later (the asynchronous route) are decided by the same
// purchase path as every other order, through this file's three calls: Prepare checks and
// canonicalises a request before it is accepted, RefusedNow refuses one the views already know
// cannot be served, and DecideAccepted decides accepted orders — under the products' locks, in
// one batch per round, with their decision stored under AcceptedKey so that deciding an order
// twice (a worker that crashed after the commit, say) replays the first decision.

// AcceptedKeyPrefix begins every AcceptedKey. It starts with a control character, which
// validKey refuses in a client's Idempotency-Key: no request can claim, or collide with, an
// accepted order's key.
const AcceptedKeyPrefix = "\x1eaccepted:"

// AcceptedKey is the idempotency key under which the decision of the accepted order id is
// stored: a confirmed order (whose id is also id), a refusal for lack of stock, or the order
// given up (ErrGivenUp).
func AcceptedKey(id uuid.UUID) string { return AcceptedKeyPrefix + id.String() }

// ErrGivenUp is the decision of an order accepted for later whose deciding failed too many
// times: it is rejected for it, nothing sold (package async stores that decision under the
// order's AcceptedKey, so that a decision made by another drain meanwhile cannot also be
// stored). DecideAccepted answers it to a drain that comes to the order afterwards.
var ErrGivenUp = errors.New("stock: the order was given up after failed attempts to decide it")

// Prepared is an order request that passed validation, in canonical form.
type Prepared struct {
	CustomerID string
	// Items are in ascending product order, no product twice.
	Items []Item
	// Key is the client's Idempotency-Key ("" for none) and Fingerprint what the request
	// means (customer and items), to tell a retry from another request under the same key.
	Key         string
	Fingerprint []byte
}

// Prepare validates req as PlaceOrder does. Errors: *ValidationError.
func (s *Service) Prepare(req OrderRequest) (Prepared, error) {
	items, err := s.validateOrder(req)
	if err != nil {
		return Prepared{}, err
	}
	return Prepared{CustomerID: req.CustomerID, Items: items, Key: req.IdempotencyKey,
		Fingerprint: requestFingerprint(req.CustomerID, items)}, nil
}

// Fingerprint is what an order of customerID for items (ascending product order) means, as
// idempotency records store it.
func Fingerprint(customerID string, items []Item) []byte {
	return requestFingerprint(customerID, items)
}

// RefusedNow returns the refusal PlaceOrder would answer at once, without a query or a lock,
// for an order of one product: *ProductNotFoundError, *SaleNotOpenError, *SaleEndedError,
// *CustomerLimitError or *SoldOutError; nil otherwise (including for a key with a stored
// outcome, which must be replayed instead).
func (s *Service) RefusedNow(ctx context.Context, p Prepared) error {
	if len(p.Items) != 1 {
		return nil
	}
	err := s.refuseFromView(ctx, p.Items[0], p.Key, p.CustomerID)
	if err != nil {
		s.countOutcome(OrderResult{}, err)
	}
	return err
}

// Accepted is an order accepted for later, to be decided now.
type Accepted struct {
	ID         uuid.UUID
	CustomerID string
	Items      []Item // ascending product order
}

// Decision is what deciding an accepted order gave: Result, or Err as PlaceOrder's errors
// (*SoldOutError and ErrGivenUp are decisions; ErrBusy, ErrUnavailable, ErrLockLost and the
// context's error leave the order undecided, to be tried again).
type Decision struct {
	Result OrderResult
	Err    error
}

// DecideAccepted decides orders accepted for later and returns a decision per order, in their
// order. Orders of one product each, all for the same product, are decided together, in the
// order given: they join the product's queue on this replica at once, ahead of any order that
// arrives after them, and the queue's batches allocate in queue order. A cart must come alone.
// ctx bounds the wait; a batch that has begun finishes regardless, as for PlaceOrder.
func (s *Service) DecideAccepted(ctx context.Context, orders []Accepted) []Decision {
	out := make([]Decision, len(orders))
	if len(orders) == 0 {
		return out
	}
	tickets := make([]*ticket, len(orders))
	for i, o := range orders {
		tickets[i] = &ticket{id: o.ID, customerID: o.CustomerID, items: o.Items, key: AcceptedKey(o.ID),
			fingerprint: requestFingerprint(o.CustomerID, o.Items)}
	}
	var outcomes []outcome
	switch first := orders[0].Items; {
	case len(first) > 1 && len(orders) == 1:
		ids := make([]int64, len(first))
		for i, it := range first {
			ids[i] = it.ProductID
		}
		outcomes = s.decide(ctx, ids, tickets, nil, nil)
		s.replayStored(ctx, tickets, outcomes)
	case len(first) == 1 && sameProduct(orders):
		outcomes = s.batches.submitAll(ctx, first[0].ProductID, tickets)
	default:
		err := fmt.Errorf("stock: decide accepted: want orders of one and the same product, or one cart")
		outcomes = failAll(len(orders), err)
	}
	for i, o := range outcomes {
		d := Decision{Err: o.err}
		if o.err == nil {
			d.Result = o.result()
		}
		s.countOutcome(d.Result, d.Err)
		out[i] = d
	}
	return out
}

func sameProduct(orders []Accepted) bool {
	for _, o := range orders {
		if len(o.Items) != 1 || o.Items[0].ProductID != orders[0].Items[0].ProductID {
			return false
		}
	}
	return true
}
