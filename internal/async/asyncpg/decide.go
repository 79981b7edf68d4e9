package asyncpg

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// storeRefusalsSQL stores the refusals the purchase path answered without storing (it stores
// those of a batch that also sells; a batch refused whole from a read stores them at best), so
// that every decision is a record before it is copied. A key that has a record keeps it.
const storeRefusalsSQL = `
INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available)
SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[])
ON CONFLICT (customer_id, key) DO NOTHING`

// copyDecisionsSQL copies each order's decision — its key's record — into the order, once, and
// returns the orders it decided with how long each waited (on Postgres's clock, the same one
// that stamped its acceptance). A refusal's reason is $3 (async.ReasonSoldOut), a given-up
// order's $4 (async.ReasonInternal).
const copyDecisionsSQL = `
UPDATE async_orders a
   SET status = CASE k.outcome WHEN 'confirmed' THEN 'confirmed' ELSE 'rejected' END,
       reason = CASE k.outcome WHEN 'confirmed' THEN NULL WHEN 'failed' THEN $4::text ELSE $3::text END,
       rejected_product = k.product_id, requested = k.requested, available = k.available,
       decided_at = greatest(k.created_at, a.accepted_at)
  FROM idempotency_keys k
 WHERE a.id = ANY($1) AND a.status = 'pending' AND k.customer_id = a.customer_id AND k.key = $2 || a.id::text
RETURNING a.status, extract(epoch FROM a.decided_at - a.accepted_at)::float8`

// rejectSQL rejects orders whose refusal is not an idempotency record (a product that went
// missing, a rule that changed): there is nothing to replay, so the order row is the decision.
const rejectSQL = `
UPDATE async_orders
   SET status = 'rejected', reason = $2, decided_at = greatest(now(), accepted_at)
 WHERE id = $1 AND status = 'pending'
RETURNING extract(epoch FROM decided_at - accepted_at)::float8`

// Record implements async.Store: the refusals to store and the copies in one round trip, then
// a statement per order rejected without a record.
func (s *Store) Record(ctx context.Context, orders []stock.Accepted, decisions []stock.Decision, rejects map[uuid.UUID]async.Reason) ([]async.Decided, error) {
	var customers, keys, outcomes []string
	var fingerprints [][]byte
	var products, requested, available []int64
	ids := make([]uuid.UUID, 0, len(orders))
	for i, o := range orders {
		d := decisions[i]
		if _, ok := rejects[o.ID]; ok {
			continue
		}
		if soldOut, ok := errors.AsType[*stock.SoldOutError](d.Err); ok {
			customers, keys = append(customers, o.CustomerID), append(keys, stock.AcceptedKey(o.ID))
			fingerprints = append(fingerprints, stock.Fingerprint(o.CustomerID, o.Items))
			outcomes = append(outcomes, outcomeSoldOut)
			products, requested, available = append(products, soldOut.ProductID), append(requested, soldOut.Requested), append(available, soldOut.Available)
		}
		// Every order's record is copied if it has one, decided by this round or not: an
		// order that failed may have been decided by an earlier round whose copy was lost.
		ids = append(ids, o.ID)
	}
	var out []async.Decided
	if len(ids) > 0 {
		b := &pgx.Batch{}
		if len(keys) > 0 {
			b.Queue(storeRefusalsSQL, customers, keys, fingerprints, outcomes, products, requested, available)
		}
		b.Queue(copyDecisionsSQL, ids, stock.AcceptedKeyPrefix, string(async.ReasonSoldOut), string(async.ReasonInternal)).
			Query(func(rows pgx.Rows) error {
				var d async.Decided
				var secs float64
				_, err := pgx.ForEachRow(rows, []any{&d.Status, &secs}, func() error {
					d.Waited = seconds(secs)
					out = append(out, d)
					return nil
				})
				return err
			})
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return nil, storeError("record decisions", err)
		}
	}
	for id, reason := range rejects {
		var secs float64
		err := s.pool.QueryRow(ctx, rejectSQL, id, string(reason)).Scan(&secs)
		if errors.Is(err, pgx.ErrNoRows) {
			continue // no longer pending
		}
		if err != nil {
			return out, storeError("reject order", err)
		}
		out = append(out, async.Decided{Status: async.StatusRejected, Waited: seconds(secs)})
	}
	return out, nil
}

// failSQL counts a failed attempt to decide order $1, and at the attempt that reaches the cap
// ($2) rejects it (reason $5, async.ReasonInternal) as every decision is made: a record under
// the order's key ($4; fingerprint $6), outcome 'failed', copied into the order in the same
// statement. The record is what keeps the rejection from racing a drain that decides the order
// meanwhile (one paused after reading its line, which has since passed on): the purchase path
// stores its decision under the same key, and the primary key lets one of the two in. The
// other replays it — the drain's purchase answers stock.ErrGivenUp and sells nothing — or, when
// the purchase stored first (found by NOT EXISTS, or by the insert, which waits for a purchase
// still committing), nothing here is written: the order is left to be copied, the record being
// the truth. The error is kept for operators.
const failSQL = `
WITH o AS (
  SELECT a.id, a.customer_id, a.attempts + 1 AS attempts
    FROM async_orders a
   WHERE a.id = $1 AND a.status = 'pending'
     AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.customer_id = a.customer_id AND k.key = $4)
     FOR UPDATE
), r AS (
  INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome)
  SELECT o.customer_id, $4, $6, 'failed' FROM o WHERE o.attempts >= $2
  ON CONFLICT (customer_id, key) DO NOTHING
  RETURNING created_at
)
UPDATE async_orders a
   SET attempts = o.attempts,
       last_error = left($3, 2000),
       status = CASE WHEN r.created_at IS NULL THEN 'pending' ELSE 'rejected' END,
       reason = CASE WHEN r.created_at IS NULL THEN NULL ELSE $5::text END,
       decided_at = CASE WHEN r.created_at IS NULL THEN NULL ELSE greatest(r.created_at, a.accepted_at) END
  FROM o LEFT JOIN r ON true
 WHERE a.id = o.id AND (o.attempts < $2 OR r.created_at IS NOT NULL)
RETURNING a.status, a.attempts, extract(epoch FROM coalesce(a.decided_at, a.accepted_at) - a.accepted_at)::float8`

// Fail implements async.Store: one statement (failSQL).
func (s *Store) Fail(ctx context.Context, o stock.Accepted, maxAttempts int, cause string) (async.Failure, error) {
	var f async.Failure
	var secs float64
	err := s.pool.QueryRow(ctx, failSQL, o.ID, maxAttempts, cause, stock.AcceptedKey(o.ID), string(async.ReasonInternal),
		stock.Fingerprint(o.CustomerID, o.Items)).Scan(&f.Status, &f.Attempts, &secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return async.Failure{}, nil
	}
	if err != nil {
		return async.Failure{}, storeError("count a failed attempt", err)
	}
	f.Waited = seconds(secs)
	return f, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
