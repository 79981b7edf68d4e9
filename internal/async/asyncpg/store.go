// Package asyncpg is the Postgres adapter of package async: the async.Store over Postgres and
// River. It owns async_orders — every statement that reads or writes that table is here — and
// River's jobs, which it inserts in the transactions that accept the orders they decide (so an
// accepted order is never lost) and runs with River's workers, which call the queue's
// async.Worker. Nothing outside this package knows that the queue is Postgres and River, but
// for the advisory locks that operators find in pg_locks (LineLockKeys).
//
// The records of orders accepted for later are idempotency records, in the table of the
// purchase path's (package stockpg, which owns it): a key is one order's whichever route it
// comes by, and Postgres keeps a key unique only within one table. So the statements here
// that must decide a key in the same statement as an order's row write that table too: the
// acceptance claims the client's key (under the product's accept lock, in the one statement
// that writes the order), a refusal the purchase path answered without storing is stored as
// the order's decision record, and an order given up stores its rejection under the order's
// decision key, where the purchase path stores its decision, so that the primary key lets
// exactly one of the two in. Reading a key's record for a client is stockpg's (async.Records).
package asyncpg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/syncrep"
)

// Store is the async.Store over Postgres and River.
type Store struct {
	pool *pgxpool.Pool
	// inserts makes jobs: a River client that only inserts, since a replica that does not
	// decide orders (async workers 0) still accepts them.
	inserts *river.Client[pgx.Tx]
	// runner runs the jobs once Start has made it; nil before.
	runner *river.Client[pgx.Tx]
}

var _ async.Store = (*Store)(nil)

// New returns the Store over pool, whose database has the service's and River's migrations
// applied, and whose connections have syncrep.OnNotice as their notice handler (an acceptance
// Postgres answers without its synchronous standby is not acknowledged).
func New(pool *pgxpool.Pool) (*Store, error) {
	inserts, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		AdvisoryLockPrefix: riverLockPrefix,
		// It only inserts, and returns every failure to its caller.
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		return nil, fmt.Errorf("asyncpg: river client: %w", err)
	}
	return &Store{pool: pool, inserts: inserts}, nil
}

// storeError translates a failure of the store's statements, or of River's inserts, into
// async.Store's errors, in one place: no row where one order was asked for is
// stock.ErrOrderNotFound; a commit Postgres answered without its synchronous standby is
// stock.ErrUnavailable with stock.ErrOutcomeUnknown (a retry under the same key finds the
// order once a standby has it); the caller's own cancellation stays what it is; any other
// failure leaves the orders as they were, to be tried again: stock.ErrUnavailable. No
// statement here refuses what a caller could change: a missing product or a taken key is
// found by the statements and answered as a result, not as an error.
func storeError(op string, err error) error {
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%s: %w", op, stock.ErrOrderNotFound)
	case errors.Is(err, syncrep.ErrNotReplicated):
		return fmt.Errorf("%w: %w: %s: %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown, op, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %w", stock.ErrUnavailable, op, err)
}

// tx runs fn in a transaction, committed when fn returns nil, on a connection of its own, so
// that its commit's warning is seen (syncrep.Commit): an acceptance is acknowledged (202) only
// once a synchronous standby has it. fn's errors and the driver's are returned as they are.
func (s *Store) tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return syncrep.Commit(conn.Conn().PgConn(), func() error { return pgx.BeginFunc(ctx, conn, fn) })
}

// RowQuerier is a pool, a connection or a transaction.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

const pendingSQL = `SELECT count(*) FROM async_orders WHERE status = 'pending'`

// CountPending counts the orders accepted for later and still pending in db's database: for
// the check before a rollback of the schema (cmd/stocksvc's "migrate down"), which runs no
// Store. Errors: stock.ErrUnavailable, the context's error.
func CountPending(ctx context.Context, db RowQuerier) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, pendingSQL).Scan(&n); err != nil {
		return 0, storeError("count pending orders", err)
	}
	return n, nil
}

// Pending implements async.Store: one count over the partial index of pending orders.
func (s *Store) Pending(ctx context.Context) (int64, error) {
	return CountPending(ctx, s.pool)
}

// oldestPendingSQL returns how long the front of each line has waited, longest first, the
// carts counting as one line: one pass over the pending orders, as the count above.
const oldestPendingSQL = `
SELECT coalesce(product_id::text, 'cart'), greatest(extract(epoch FROM now() - min(accepted_at)), 0)::float8
  FROM async_orders
 WHERE status = 'pending'
 GROUP BY product_id
 ORDER BY 2 DESC
 LIMIT $1`

// OldestPending implements async.Store.
func (s *Store) OldestPending(ctx context.Context, limit int) ([]async.LineAge, error) {
	rows, _ := s.pool.Query(ctx, oldestPendingSQL, limit)
	ages, err := pgx.CollectRows(rows, pgx.RowToStructByPos[async.LineAge])
	if err != nil {
		return nil, storeError("read the oldest pending orders", err)
	}
	return ages, nil
}
