// Package linepg is the line.Store on Postgres: the only package that knows the schema of
// lines, line_tickets and line_keys, and the only one that announces (NOTIFY) and listens for
// (LISTEN) their changes.
package linepg

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/syncrep"
)

// Channel is the channel a line's changes are announced on, with the payload
// "<product id>:<version>".
const Channel = "stocksvc_line"

// Store is the line.Store on Postgres.
type Store struct {
	pool *pgxpool.Pool
	// Tests set these to hold a transaction at a point of its own (export_test.go): once a
	// join holds its line's row, once a draw holds it, once an advance holds it.
	joinLocked, drawLocked, advanceLocked func(ctx context.Context)
}

var _ line.Store = (*Store)(nil)

// New returns the Store over pool. The schema comes from package migrations.
func New(pool *pgxpool.Pool) *Store { return &Store{pool: pool} }

// ticketColumns are a ticket's columns as ticketRow reads them.
const ticketColumns = `id, product_id, customer_id, status, place, joined_at, admitted_until, used_key, changed`

type ticketRow struct {
	ID            int64      `db:"id"`
	ProductID     int64      `db:"product_id"`
	CustomerID    string     `db:"customer_id"`
	Status        string     `db:"status"`
	Place         *int64     `db:"place"`
	JoinedAt      time.Time  `db:"joined_at"`
	AdmittedUntil *time.Time `db:"admitted_until"`
	UsedKey       *string    `db:"used_key"`
	Changed       int64      `db:"changed"`
}

func (r ticketRow) ticket() line.Ticket {
	t := line.Ticket{ID: r.ID, ProductID: r.ProductID, CustomerID: r.CustomerID, Status: line.TicketStatus(r.Status),
		JoinedAt: r.JoinedAt, Changed: r.Changed}
	if r.Place != nil {
		t.Place = *r.Place
	}
	if r.AdmittedUntil != nil {
		t.AdmittedUntil = *r.AdmittedUntil
	}
	if r.UsedKey != nil {
		t.UsedKey = *r.UsedKey
	}
	return t
}

func collectTicket(rows pgx.Rows) (line.Ticket, error) {
	r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[ticketRow])
	return r.ticket(), err
}

// openTicketSQL reads a customer's open ticket in a line, and whether the line was drawn.
const openTicketSQL = `
SELECT ` + ticketColumns + `, (SELECT drawn_at IS NOT NULL FROM lines WHERE product_id = $1) AS drawn
  FROM line_tickets WHERE product_id = $1 AND customer_id = $2 AND status IN ('waiting', 'admitted')`

// The join: the line's row FOR KEY SHARE, which the draw's FOR UPDATE waits for (and which
// waits for the draw), so that a ticket made before the draw commits is in it and one made
// after it knows the line was drawn; the other changes of the line take the row FOR NO KEY
// UPDATE, which does not wait for joins. A line is made by its first join.
const (
	shareLineSQL  = `SELECT drawn_at IS NOT NULL FROM lines WHERE product_id = $1 FOR KEY SHARE`
	makeLineSQL   = `INSERT INTO lines (product_id) VALUES ($1) ON CONFLICT DO NOTHING`
	joinTicketSQL = `
INSERT INTO line_tickets (product_id, customer_id) VALUES ($1, $2)
    ON CONFLICT (product_id, customer_id) WHERE status IN ('waiting', 'admitted') DO NOTHING
RETURNING ` + ticketColumns
	joinedTicketSQL = `SELECT ` + ticketColumns + ` FROM line_tickets WHERE product_id = $1 AND customer_id = $2 AND status IN ('waiting', 'admitted')`
)

// Join implements line.Store: a customer who already has an open ticket (a retry, or a script
// joining in a loop) is answered with one read; a new ticket is one short transaction.
func (s *Store) Join(ctx context.Context, product int64, customer string) (line.Ticket, bool, bool, error) {
	rows, _ := s.pool.Query(ctx, openTicketSQL, product, customer)
	open, err := pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (joined, error) {
		var j joined
		var r ticketRow
		err := row.Scan(&r.ID, &r.ProductID, &r.CustomerID, &r.Status, &r.Place, &r.JoinedAt, &r.AdmittedUntil, &r.UsedKey, &r.Changed, &j.drawn)
		j.ticket = r.ticket()
		return j, err
	})
	switch {
	case err == nil:
		return open.ticket, false, open.drawn, nil
	case !errors.Is(err, pgx.ErrNoRows):
		return line.Ticket{}, false, false, dbError("join", err)
	}
	// The join's commit on a connection of its own, to see Postgres's warning of a wait for
	// the synchronous standby ended early (syncrep.OnNotice marks the connection): a place
	// promised from the primary alone would be lost by a failover.
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return line.Ticket{}, false, false, dbError("join", err)
	}
	defer conn.Release()
	syncrep.Cancelled(conn.Conn().PgConn()) // only this commit's warning counts
	var j joined
	err = inTx(ctx, conn, "join", func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, shareLineSQL, product).Scan(&j.drawn)
		if errors.Is(err, pgx.ErrNoRows) {
			if _, err := tx.Exec(ctx, makeLineSQL, product); err != nil {
				if constraintViolated(err, "23503") {
					return line.ErrNoLine // no such product
				}
				return dbError("join: make the line", err)
			}
			err = tx.QueryRow(ctx, shareLineSQL, product).Scan(&j.drawn)
		}
		if err != nil {
			return dbError("join: lock the line", err)
		}
		if s.joinLocked != nil {
			s.joinLocked(ctx)
		}
		rows, _ := tx.Query(ctx, joinTicketSQL, product, customer)
		j.ticket, err = collectTicket(rows)
		j.created = err == nil
		if errors.Is(err, pgx.ErrNoRows) {
			// Another join of the customer's committed first: that is the ticket.
			rows, _ := tx.Query(ctx, joinedTicketSQL, product, customer)
			j.ticket, err = collectTicket(rows)
		}
		if err != nil {
			return dbError("join", err)
		}
		return nil
	})
	if err != nil {
		return line.Ticket{}, false, false, err
	}
	if j.created && syncrep.Cancelled(conn.Conn().PgConn()) {
		return line.Ticket{}, false, false, fmt.Errorf("%w: join: %s", line.ErrUnavailable, errNotReplicated)
	}
	return j.ticket, j.created, j.drawn, nil
}

// errNotReplicated says a join's commit was answered without its synchronous standby.
const errNotReplicated = "postgres ended the commit's wait for a synchronous standby early: the ticket may be on the primary alone; join again"

type joined struct {
	ticket         line.Ticket
	created, drawn bool
}

// The leave: the line's version moves and the ticket is stamped with it, announced with the
// commit. A ticket that is not open is left as it is, and nothing moves.
const (
	bumpLineSQL = `UPDATE lines SET version = version + 1 WHERE product_id = $1 RETURNING version`
	leaveSQL    = `
WITH left_line AS (
    UPDATE line_tickets SET status = 'left', ended_at = now(), changed = $3
     WHERE id = $2 AND product_id = $1 AND status IN ('waiting', 'admitted')
    RETURNING ` + ticketColumns + `)
SELECT ` + ticketColumns + ` FROM left_line, pg_notify('` + Channel + `', $1::bigint || ':' || $3::bigint)`
	ticketSQL = `SELECT ` + ticketColumns + ` FROM line_tickets WHERE id = $2 AND product_id = $1`
	// passOnSQL admits the first waiting placed ticket in the room of the leaver $2, if its
	// admission was running, for as long as the leaver's was, stamped with the leave's version
	// $3: one admission ends and one begins, so the admissions running stay as the rule left
	// them, and the next in line does not wait for an advance.
	passOnSQL = `
WITH leaver AS (
    SELECT admitted_until - admitted_at AS span FROM line_tickets
     WHERE id = $2 AND product_id = $1 AND admitted_at IS NOT NULL AND admitted_until > now()),
next AS (
    SELECT id FROM line_tickets
     WHERE product_id = $1 AND status = 'waiting' AND place IS NOT NULL AND EXISTS (SELECT 1 FROM leaver)
     ORDER BY place LIMIT 1),
passed AS (
    UPDATE line_tickets t SET status = 'admitted', admitted_at = now(), admitted_until = now() + (SELECT span FROM leaver), changed = $3
      FROM next WHERE t.id = next.id
    RETURNING t.id)
UPDATE lines SET admitted = admitted + 1 FROM passed WHERE product_id = $1`
)

// Leave implements line.Store.
func (s *Store) Leave(ctx context.Context, product, id int64) (line.Ticket, error) {
	var t line.Ticket
	err := s.inTx(ctx, "leave", func(tx pgx.Tx) error {
		var version int64
		err := tx.QueryRow(ctx, bumpLineSQL, product).Scan(&version)
		if errors.Is(err, pgx.ErrNoRows) {
			return line.ErrTicketNotFound
		}
		if err != nil {
			return dbError("leave", err)
		}
		rows, _ := tx.Query(ctx, leaveSQL, product, id, version)
		t, err = collectTicket(rows)
		if errors.Is(err, pgx.ErrNoRows) {
			return errNotOpen
		}
		if err != nil {
			return dbError("leave", err)
		}
		if !t.AdmittedUntil.IsZero() { // it was admitted: its room passes on, if it ran
			if _, err := tx.Exec(ctx, passOnSQL, product, id, version); err != nil {
				return dbError("leave: pass the admission on", err)
			}
		}
		return nil
	})
	if errors.Is(err, errNotOpen) {
		// Nothing to leave: answered as it stands, and the line's version did not move.
		return s.Ticket(ctx, product, id)
	}
	return t, err
}

// errNotOpen rolls back a leave of a ticket that is not open.
var errNotOpen = errors.New("linepg: ticket not open")

// Ticket implements line.Store.
func (s *Store) Ticket(ctx context.Context, product, id int64) (line.Ticket, error) {
	rows, _ := s.pool.Query(ctx, ticketSQL, product, id)
	t, err := collectTicket(rows)
	if errors.Is(err, pgx.ErrNoRows) {
		return line.Ticket{}, line.ErrTicketNotFound
	}
	if err != nil {
		return line.Ticket{}, dbError("read ticket", err)
	}
	return t, nil
}

// Versions implements line.Store.
func (s *Store) Versions(ctx context.Context, products []int64) (map[int64]int64, error) {
	rows, _ := s.pool.Query(ctx, `SELECT product_id, version FROM lines WHERE product_id = ANY($1)`, products)
	out := map[int64]int64{}
	var id, version int64
	_, err := pgx.ForEachRow(rows, []any{&id, &version}, func() error {
		out[id] = version
		return nil
	})
	if err != nil {
		return nil, dbError("line versions", err)
	}
	return out, nil
}

// The read of a line: its row, the tickets changed after a version, and, when asked, how many
// wait without a place — one snapshot (REPEATABLE READ), so that no ticket stamped with a
// version the row does not show yet is missed by the next read.
const (
	lineSQL = `
SELECT version, drawn_at, drawn, placed, admitted, stock, holding FROM lines WHERE product_id = $1`
	changedSQL = `
SELECT ` + ticketColumns + ` FROM line_tickets WHERE product_id = $1 AND changed > 0 AND changed > $2`
	unplacedSQL = `
SELECT count(*) FROM line_tickets WHERE product_id = $1 AND status = 'waiting' AND place IS NULL`
)

// Line implements line.Store.
func (s *Store) Line(ctx context.Context, product, since int64, countWaiting bool) (line.Snapshot, error) {
	snap := line.Snapshot{Unplaced: -1}
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(lineSQL, product)
		b.Queue(changedSQL, product, since)
		if countWaiting {
			b.Queue(unplacedSQL, product)
		}
		br := tx.SendBatch(ctx, b)
		defer br.Close()
		var drawnAt *time.Time
		var stock *int64
		err := br.QueryRow().Scan(&snap.Version, &drawnAt, &snap.Drawn, &snap.Placed, &snap.Admissions, &stock, &snap.Holding)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		snap.Exists = true
		if drawnAt != nil {
			snap.DrawnAt = *drawnAt
		}
		if stock != nil {
			snap.Stock, snap.StockKnown = *stock, true
		}
		rows, _ := br.Query()
		changed, err := pgx.CollectRows(rows, pgx.RowToStructByName[ticketRow])
		if err != nil {
			return err
		}
		snap.Tickets = make([]line.Ticket, len(changed))
		for i, r := range changed {
			snap.Tickets[i] = r.ticket()
		}
		if countWaiting {
			return br.QueryRow().Scan(&snap.Unplaced)
		}
		return nil
	})
	if err != nil {
		return line.Snapshot{}, dbError("read line", err)
	}
	return snap, nil
}

// Drawn implements line.Store.
func (s *Store) Drawn(ctx context.Context, product int64) (line.Draw, error) {
	d := line.Draw{ProductID: product}
	var drawnAt *time.Time
	var drawn int64
	err := s.pool.QueryRow(ctx, `SELECT seed, drawn_at, drawn FROM lines WHERE product_id = $1`, product).Scan(&d.Seed, &drawnAt, &drawn)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && drawnAt == nil {
		return line.Draw{}, line.ErrNotDrawn
	}
	if err != nil {
		return line.Draw{}, dbError("read draw", err)
	}
	d.DrawnAt = *drawnAt
	rows, _ := s.pool.Query(ctx, `
		SELECT id, customer_id, place FROM line_tickets
		 WHERE product_id = $1 AND place BETWEEN 1 AND $2 ORDER BY place`, product, drawn)
	d.Tickets, err = pgx.CollectRows(rows, pgx.RowToStructByPos[line.Drawn])
	if err != nil {
		return line.Draw{}, dbError("read draw", err)
	}
	return d, nil
}

// The keys: the first replica to ask makes key 1 (replicas that start together race for it,
// and ON CONFLICT keeps the first); a table whose keys an operator rotated is left as it is.
const (
	firstKeySQL = `
INSERT INTO line_keys (id, secret) SELECT 1, $1 WHERE NOT EXISTS (SELECT 1 FROM line_keys)
    ON CONFLICT DO NOTHING`
	keysSQL = `SELECT id, secret FROM line_keys ORDER BY id`
)

// Keys implements line.Store.
func (s *Store) Keys(ctx context.Context) ([]line.Key, error) {
	if _, err := s.pool.Exec(ctx, firstKeySQL, newSecret()); err != nil {
		return nil, dbError("make the first key", err)
	}
	rows, _ := s.pool.Query(ctx, keysSQL)
	var (
		id     int16
		secret []byte
		keys   []line.Key
	)
	_, err := pgx.ForEachRow(rows, []any{&id, &secret}, func() error {
		keys = append(keys, line.Key{ID: uint8(id), Secret: append([]byte(nil), secret...)})
		return nil
	})
	if err != nil {
		return nil, dbError("read keys", err)
	}
	return keys, nil
}

// Listen implements line.Store, on a connection of its own (not the pool's: it is held for as
// long as the replica runs).
func (s *Store) Listen(ctx context.Context, listening func(), changed func(product, version int64)) error {
	conn, err := pgx.ConnectConfig(ctx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return dbError("listen: connect", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+Channel); err != nil {
		return dbError("listen", err)
	}
	listening()
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return dbError("listen", err)
		}
		product, version, ok := parsePayload(n.Payload)
		if ok {
			changed(product, version)
		}
	}
}

// parsePayload reads "<product id>:<version>".
func parsePayload(p string) (product, version int64, ok bool) {
	a, b, found := strings.Cut(p, ":")
	if !found {
		return 0, 0, false
	}
	product, err1 := strconv.ParseInt(a, 10, 64)
	version, err2 := strconv.ParseInt(b, 10, 64)
	return product, version, err1 == nil && err2 == nil
}

// inTx runs fn in a transaction on a connection of the pool; fn returns the package's errors,
// and beginning and committing are mapped here.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	return inTx(ctx, s.pool, op, fn)
}

// inTx runs fn in a transaction of db.
func inTx(ctx context.Context, db interface {
	Begin(context.Context) (pgx.Tx, error)
}, op string, fn func(tx pgx.Tx) error) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return dbError(op+": begin", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return dbError(op+": commit", err)
	}
	return nil
}

func constraintViolated(err error, code string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code
}

// dbError translates a driver error into the line's errors, keeping the chain: Postgres out of
// reach (or shedding load, or timing out) is line.ErrUnavailable; the line's own errors and the
// context's pass as they are; anything else is wrapped with op.
func dbError(op string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, line.ErrNoLine), errors.Is(err, line.ErrTicketNotFound), errors.Is(err, line.ErrNotDrawn):
		return err
	case errors.As(err, &pgErr):
		if c := pgErr.Code; strings.HasPrefix(c, "08") || strings.HasPrefix(c, "57") || strings.HasPrefix(c, "53") ||
			c == "55P03" || c == "40001" || c == "40P01" {
			return fmt.Errorf("%w: %s: %w", line.ErrUnavailable, op, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	case stockpg.Unreachable(err):
		return fmt.Errorf("%w: %s: %w", line.ErrUnavailable, op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}
