package asyncpg

import (
	"context"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// purgeBatch is the most records one purge statement deletes: as stockpg's purge of the
// purchase path's records, a batch that takes tens of milliseconds and holds its row locks only
// that long, however many records have piled up.
const purgeBatch = 5000

// purgeCutoffSQL is the purge's cutoff on Postgres's clock, the clock created_at was stamped
// with: a replica whose clock is off must neither keep records for ever nor purge fresh ones.
const purgeCutoffSQL = `SELECT now() - $1::interval`

// purgeRecordsSQL deletes up to $4 records of orders accepted for later created before $1 and
// at or after $2 (the last batch's newest, so that each batch starts where the previous one
// stopped instead of walking over the rows it deleted), oldest first, and returns how many and
// the newest created_at deleted. The records of an order accepted for later are the client's
// key it claimed (async_order_id) and its decision record (key $3 || the order's id, of the
// order's customer); stockpg's purge leaves both to this one.
//
// It keeps those of orders still pending, however old: the client's key (a retry must find its
// order, not buy again) and the decision record (stored, not yet copied; the copy needs it).
// Each is a NOT EXISTS on one equality with async_orders' primary key, so each is an index
// probe per row (an OR of the two would be a join filter, evaluated against every pending
// order for every row). Rows another purge (another replica) has locked are skipped: it is
// deleting them.
const purgeRecordsSQL = `
WITH deleted AS (
    DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(
        SELECT k.ctid FROM idempotency_keys k
         WHERE k.created_at < $1 AND k.created_at >= $2
           AND (k.async_order_id IS NOT NULL OR starts_with(k.key, $3))
           AND NOT EXISTS (SELECT 1 FROM async_orders a
                            WHERE a.id = k.async_order_id AND a.status = 'pending')
           AND NOT EXISTS (SELECT 1 FROM async_orders a
                            WHERE a.id = CASE WHEN starts_with(k.key, $3)
                                              THEN substr(k.key, length($3) + 1)::uuid END
                              AND a.customer_id = k.customer_id AND a.status = 'pending')
         ORDER BY k.created_at
         LIMIT $4
         FOR UPDATE OF k SKIP LOCKED))
    RETURNING created_at)
SELECT count(*), max(created_at) FROM deleted`

// PurgeRecords implements async.Store: one statement for the cutoff, then batches of at most
// purgeBatch records, each its own transaction, until a batch deletes fewer.
func (s *Store) PurgeRecords(ctx context.Context, retention time.Duration) (int64, error) {
	var cutoff time.Time
	if err := s.pool.QueryRow(ctx, purgeCutoffSQL, retention).Scan(&cutoff); err != nil {
		return 0, storeError("purge records: cutoff", err)
	}
	var total int64
	var from time.Time // the zero time is before every record
	for {
		var n int64
		var newest *time.Time
		if err := s.pool.QueryRow(ctx, purgeRecordsSQL, cutoff, from, stock.AcceptedKeyPrefix, purgeBatch).Scan(&n, &newest); err != nil {
			return total, storeError("purge records", err)
		}
		total += n
		if n < purgeBatch || newest == nil {
			return total, nil
		}
		from = *newest
	}
}
