// Package syncrep tells a commit that a synchronous standby has from one Postgres answered
// without it. On a Postgres with synchronous replication (a Patroni cluster in
// synchronous_mode_strict: docs/operations.md, "Running on an HA Postgres"), the server answers
// a commit once a synchronous standby has it. A cancel of that wait — the client's cancel
// request when its context ends, statement_timeout — ends it early: the server answers the
// commit anyway, with the warning "canceling wait for synchronous replication due to user
// request", and the transaction, on the primary alone, is visible to every later read. A
// failover loses it.
//
// The warning comes as a notice: a pool whose connections have OnNotice as their notice
// handler marks the connection it came on, Commit and Wait read the mark. The package knows
// nothing about what is written; its users (the service's Postgres adapters) decide what an
// unreplicated commit means to their callers.
package syncrep

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// cancelPrefix starts the warning Postgres sends when it ends a commit's wait early
// (src/backend/replication/syncrep.c; the server's messages are not translated: lc_messages C).
const cancelPrefix = "canceling wait for synchronous replication"

// cancelledKey marks, in a connection's CustomData, that Postgres ended a commit's wait on it
// early. The mark lives and dies with the connection, which one goroutine uses at a time: the
// notice handler runs inside the call that reads the commit's answer.
const cancelledKey = "stocksvc.sync-wait-cancelled"

// ErrNotReplicated says a commit was answered without its synchronous standby: it may be on the
// primary alone.
var ErrNotReplicated = errors.New("syncrep: postgres ended the commit's wait for a synchronous standby early (" + cancelPrefix + "): it may be on the primary alone")

// Barrier writes a commit record of its own — pg_current_xact_id gives the statement's
// transaction an id — so that its commit waits until a synchronous standby has everything the
// primary committed before it. Without synchronous replication it returns at once.
const Barrier = `SELECT pg_current_xact_id()`

// OnNotice is a pool's notice handler (pgconn.Config.OnNotice): it marks the connection on
// which Postgres ended a commit's wait for its synchronous standby early.
func OnNotice(c *pgconn.PgConn, n *pgconn.Notice) {
	if strings.HasPrefix(n.Message, cancelPrefix) {
		c.CustomData()[cancelledKey] = true
	}
}

// Cancelled reports whether Postgres ended a commit's wait on c early since the last call, and
// forgets it.
func Cancelled(c *pgconn.PgConn) bool {
	data := c.CustomData()
	_, ok := data[cancelledKey]
	delete(data, cancelledKey)
	return ok
}

// Commit runs fn, which commits on c, and returns ErrNotReplicated when Postgres answered that
// commit without its synchronous standby; fn's own error as it is.
func Commit(c *pgconn.PgConn, fn func() error) error {
	Cancelled(c) // only fn's commit counts
	if err := fn(); err != nil {
		return err
	}
	if Cancelled(c) {
		return ErrNotReplicated
	}
	return nil
}

// Wait runs barrier (Barrier, or a test's stand-in) on c and returns once everything the
// primary has committed is on a synchronous standby (at once without one): ErrNotReplicated
// when the wait was ended early, the driver's error when the statement failed.
func Wait(ctx context.Context, c *pgx.Conn, barrier string) error {
	return Commit(c.PgConn(), func() error {
		_, err := c.Exec(ctx, barrier)
		return err
	})
}
