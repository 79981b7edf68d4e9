package stockpg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/syncrep"
)

// A write whose commit Postgres answered without its synchronous standby may be lost by a
// failover (package syncrep says how that is told). So no write is acknowledged on such an
// answer — an order, a restock, a rule change, a hold's confirm, cancel or expiry
// (writeReplicated) — nor on a later read of it (the lookup of a lost commit, a replay of its
// key, a hold found ended) unless a standby is known to have it (replicated).

// replicated returns once everything the primary has committed is on a synchronous standby
// (when it has any), or says why it cannot tell: the wait failed, or was ended early. It runs
// s.barrier on a connection of its own (syncrep.Wait).
func (s *Store) replicated(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	return syncrep.Wait(ctx, conn.Conn(), s.barrier)
}

// Replicated implements stock.HoldStore: a hold ended by an earlier call is answered only once
// a standby has its end. Errors: stock.ErrUnavailable.
func (s *Store) Replicated(ctx context.Context) error {
	if err := s.replicated(ctx); err != nil {
		return notReplicated("wait for the synchronous standby", err)
	}
	return nil
}

// notReplicated is the error of a read that found an order it cannot show is on a standby.
func notReplicated(op string, err error) error {
	return fmt.Errorf("%w: %s: not known to be on a synchronous standby: %w", stock.ErrUnavailable, op, err)
}

// writeReplicated runs fn, which commits a write, on a connection of pool's own, so that the
// warning of that commit is seen (syncrep.Commit). A commit Postgres answered without its
// synchronous standby may be lost by a failover, so it is not acknowledged: the error is
// ErrUnavailable with ErrOutcomeUnknown (a retry under the same key, or a read, finds it once a
// standby has it). fn maps its own errors; failing to get a connection is mapped here.
func writeReplicated(ctx context.Context, pool *pgxpool.Pool, op string, fn func(conn *pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return dbError(op, err)
	}
	defer conn.Release()
	err = syncrep.Commit(conn.Conn().PgConn(), func() error { return fn(conn) })
	if errors.Is(err, syncrep.ErrNotReplicated) {
		return fmt.Errorf("%w: %w: %s: %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown, op, err)
	}
	return err
}
