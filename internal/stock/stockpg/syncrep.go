package stockpg

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// On a Postgres with synchronous replication (a Patroni cluster in synchronous_mode_strict:
// docs/operations.md, "Running on an HA Postgres"), the server answers a commit once a
// synchronous standby has it. A cancel of that wait — the client's cancel request when its
// context ends, statement_timeout — ends it early: the server answers the commit anyway, with
// the warning "canceling wait for synchronous replication due to user request", and the
// transaction, on the primary alone, is visible to every later read. A failover loses it. So
// no write is acknowledged on such an answer — an order, a restock, a rule change, a hold's
// confirm, cancel or expiry, an order accepted for later (writeReplicated) — nor on a later
// read of it (the lookup of a lost commit, a replay of its key, a hold found ended) unless a
// standby is known to have it (replicated).

// syncCancelPrefix starts the warning Postgres sends when it ends a commit's wait early
// (src/backend/replication/syncrep.c; the server's messages are not translated: lc_messages C).
const syncCancelPrefix = "canceling wait for synchronous replication"

// syncCancelledKey marks, in a connection's CustomData, that Postgres ended a commit's wait on
// it early. The mark lives and dies with the connection, which one goroutine uses at a time:
// the notice handler runs inside the call that reads the commit's answer.
const syncCancelledKey = "stocksvc.sync-wait-cancelled"

// OnNotice is the pool's notice handler (pgconn.Config.OnNotice): it marks the connection on
// which Postgres ended a commit's wait for its synchronous standby early.
func OnNotice(c *pgconn.PgConn, n *pgconn.Notice) {
	if strings.HasPrefix(n.Message, syncCancelPrefix) {
		c.CustomData()[syncCancelledKey] = true
	}
}

// SyncWaitCancelled reports whether Postgres ended a commit's wait for its synchronous standby
// early on c since it was last asked (OnNotice marks it), and clears the mark: linepg holds a
// join to what the purchase path holds an order to.
func SyncWaitCancelled(c *pgconn.PgConn) bool { return cancelledSyncWait(c) }

// cancelledSyncWait reports whether c received the warning since it was last asked.
func cancelledSyncWait(c *pgconn.PgConn) bool {
	data := c.CustomData()
	_, ok := data[syncCancelledKey]
	delete(data, syncCancelledKey)
	return ok
}

// errNotReplicated says a commit was answered without its synchronous standby: it may be on
// the primary alone.
var errNotReplicated = errors.New("postgres ended the commit's wait for a synchronous standby early (" + syncCancelPrefix + "): it may be on the primary alone")

// replicatedSQL writes a commit record of its own — pg_current_xact_id gives the statement's
// transaction an id — so that its commit waits until a synchronous standby has everything the
// primary committed before it. Without synchronous replication it returns at once.
const replicatedSQL = `SELECT pg_current_xact_id()`

// replicated returns once everything the primary has committed is on a synchronous standby
// (when it has any), or says why it cannot tell: the wait failed, or was ended early.
func (s *Store) replicated(ctx context.Context) error {
	return replicated(ctx, s.pool, s.barrier)
}

// Replicated implements stock.HoldStore: a hold ended by an earlier call is answered only once
// a standby has its end. Errors: stock.ErrUnavailable.
func (s *Store) Replicated(ctx context.Context) error {
	if err := s.replicated(ctx); err != nil {
		return notReplicated("wait for the synchronous standby", err)
	}
	return nil
}

// replicated runs barrier (replicatedSQL, or a test's stand-in) on a connection of pool's own
// and reports whether Postgres ended its commit's wait for a synchronous standby early.
func replicated(ctx context.Context, pool *pgxpool.Pool, barrier string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	cancelledSyncWait(conn.Conn().PgConn()) // only this commit's warning counts
	if _, err := conn.Exec(ctx, barrier); err != nil {
		return err
	}
	if cancelledSyncWait(conn.Conn().PgConn()) {
		return errNotReplicated
	}
	return nil
}

// notReplicated is the error of a read that found an order it cannot show is on a standby.
func notReplicated(op string, err error) error {
	return fmt.Errorf("%w: %s: not known to be on a synchronous standby: %w", stock.ErrUnavailable, op, err)
}

// writeReplicated runs fn, which commits a write, on a connection of pool's own, so that the
// warning of that commit is seen. A commit Postgres answered without its synchronous standby
// may be lost by a failover, so it is not acknowledged: the error is ErrUnavailable with
// ErrOutcomeUnknown (a retry under the same key, or a read, finds it once a standby has it).
// fn maps its own errors; failing to get a connection is mapped here.
func writeReplicated(ctx context.Context, pool *pgxpool.Pool, op string, fn func(conn *pgxpool.Conn) error) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return dbError(op, err)
	}
	defer conn.Release()
	cancelledSyncWait(conn.Conn().PgConn()) // only fn's commit counts
	if err := fn(conn); err != nil {
		return err
	}
	if cancelledSyncWait(conn.Conn().PgConn()) {
		return fmt.Errorf("%w: %w: %s: %w", stock.ErrUnavailable, stock.ErrOutcomeUnknown, op, errNotReplicated)
	}
	return nil
}
