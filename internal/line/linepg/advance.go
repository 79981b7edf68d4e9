package linepg

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/stocksvc/stocksvc/internal/line"
)

// An advance is one transaction under the line's row lock (FOR NO KEY UPDATE, which joins do
// not wait for; the draw upgrades it to FOR UPDATE, which waits for the joins in flight and
// makes later ones wait). Every ticket it changes is stamped with the next version, which it
// writes, with the NOTIFY, only when something changed.
//
// Before the row, an advance takes the line's advance lock (advanceLockKey) if it is free, and
// is line.ErrBusy if it is not: replicas that all advance at once — every keeper at the
// opening, every replica with used marks to write — do not queue on the row one behind the
// other, each to find nothing left to do, ahead of the leaves that wait for it too. Leaves do
// not take the advance lock, so an advance and the leaves still take the row in turn.
const (
	tryAdvanceSQL = `SELECT pg_try_advisory_xact_lock($1)`
	lockLineSQL   = `
SELECT version, drawn_at IS NOT NULL, placed, stock, holding, now() FROM lines WHERE product_id = $1 FOR NO KEY UPDATE`
	// useSQL marks used the admitted tickets among $3, with their orders' keys ($4).
	useSQL = `
UPDATE line_tickets t SET status = 'used', ended_at = now(), used_key = nullif(u.key, ''), changed = $2
  FROM unnest($3::bigint[], $4::text[]) AS u(id, key)
 WHERE t.id = u.id AND t.product_id = $1 AND t.status = 'admitted'`
	// expireSQL ends the admissions that ran out by now(), and counts those still running
	// (the count's snapshot is the statement's own: the rows it expires are not in it).
	expireSQL = `
WITH expired AS (
    UPDATE line_tickets SET status = 'expired', ended_at = now(), changed = $2
     WHERE product_id = $1 AND status = 'admitted' AND admitted_until <= now()
    RETURNING 1)
SELECT (SELECT count(*) FROM expired),
       (SELECT count(*) FROM line_tickets WHERE product_id = $1 AND status = 'admitted' AND admitted_until > now())`
	drawLockSQL = `SELECT 1 FROM lines WHERE product_id = $1 FOR UPDATE`
	// drawSQL places every ticket waiting without a place — those made before the draw — in
	// the order line.Rank gives from the seed $3 (line.DrawFormula, computed by Postgres:
	// bytea compares as bytes.Compare does), stamped with version $2.
	drawSQL = `
UPDATE line_tickets t SET place = d.place, changed = $2
  FROM (SELECT id, row_number() OVER (ORDER BY sha256($3::bytea || int8send(id)), id) AS place
          FROM line_tickets WHERE product_id = $1 AND status = 'waiting' AND place IS NULL) d
 WHERE t.id = d.id`
	// placeSQL places the late arrivals after the highest place given, in ticket id order, and
	// returns how many it placed and the highest place given now.
	placeSQL = `
WITH top AS (SELECT coalesce(max(place), 0) AS place FROM line_tickets WHERE product_id = $1),
late AS (
    SELECT id, top.place + row_number() OVER (ORDER BY id) AS place
      FROM line_tickets, top WHERE product_id = $1 AND status = 'waiting' AND line_tickets.place IS NULL),
placed AS (
    UPDATE line_tickets t SET place = late.place, changed = $2 FROM late WHERE t.id = late.id
    RETURNING t.place)
SELECT count(*), coalesce(max(place), (SELECT place FROM top)) FROM placed`
	// admitSQL admits the first $3 waiting placed tickets, in place order, for $4 seconds.
	admitSQL = `
UPDATE line_tickets SET status = 'admitted', admitted_at = now(), admitted_until = now() + make_interval(secs => $4::bigint), changed = $2
 WHERE id IN (SELECT id FROM line_tickets
               WHERE product_id = $1 AND status = 'waiting' AND place IS NOT NULL
               ORDER BY place LIMIT $3)`
	// advancedSQL records the advance on the line, and announces it.
	advancedSQL = `
UPDATE lines SET version = $2::bigint, placed = $3, admitted = admitted + $4, stock = $5, holding = $6, advanced_at = now(),
       seed = coalesce(seed, $7), drawn_at = CASE WHEN $7::bytea IS NULL THEN drawn_at ELSE now() END,
       drawn = CASE WHEN $7::bytea IS NULL THEN drawn ELSE $8 END
 WHERE product_id = $1
RETURNING pg_notify('` + Channel + `', $1::bigint || ':' || $2::bigint)`
)

// Advance implements line.Store.
func (s *Store) Advance(ctx context.Context, product int64, used []line.Use, plan func(context.Context, line.Standing) (line.Plan, error)) (line.Advanced, error) {
	var a line.Advanced
	err := s.inTx(ctx, "advance", func(tx pgx.Tx) error {
		var (
			version, placed int64
			drawn, holding  bool
			stock           *int64
			now             time.Time
		)
		var free bool
		if err := tx.QueryRow(ctx, tryAdvanceSQL, advanceLockKey(product)).Scan(&free); err != nil {
			return dbError("advance: take the advance lock", err)
		}
		if !free {
			return line.ErrBusy
		}
		err := tx.QueryRow(ctx, lockLineSQL, product).Scan(&version, &drawn, &placed, &stock, &holding, &now)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return dbError("advance: lock the line", err)
		}
		if s.advanceLocked != nil {
			s.advanceLocked(ctx)
		}
		a = line.Advanced{Exists: true, Version: version}
		next := version + 1
		if len(used) > 0 {
			ids, keys := make([]int64, len(used)), make([]string, len(used))
			for i, u := range used {
				ids[i], keys[i] = u.Ticket, u.Key
			}
			tag, err := tx.Exec(ctx, useSQL, product, next, ids, keys)
			if err != nil {
				return dbError("advance: use", err)
			}
			a.Used = tag.RowsAffected()
		}
		var active int64
		if err := tx.QueryRow(ctx, expireSQL, product, next).Scan(&a.Expired, &active); err != nil {
			return dbError("advance: expire", err)
		}
		p, err := plan(ctx, line.Standing{Now: now, Version: version, Drawn: drawn, Active: active})
		if err != nil {
			return err
		}
		var seed []byte
		if p.Seed != nil && !drawn {
			seed = p.Seed
			if err := s.drawLock(ctx, tx, product); err != nil {
				return err
			}
		}
		if seed != nil || drawn {
			if err := s.placeAndAdmit(ctx, tx, product, next, seed, p, &a, &placed); err != nil {
				return err
			}
		}
		a.Changed = seed != nil || a.Used+a.Expired+a.Placed+a.Admitted > 0 ||
			stock == nil || *stock != p.Stock || holding != p.Holding
		if !a.Changed {
			return nil
		}
		if _, err := tx.Exec(ctx, advancedSQL, product, next, placed, a.Admitted, p.Stock, p.Holding, seed, a.Drawn); err != nil {
			return dbError("advance: record", err)
		}
		a.Version = next
		return nil
	})
	if err != nil {
		return line.Advanced{}, err
	}
	return a, nil
}

// advanceLockPrefix is the high 32 bits of every line's advance lock key: the bytes of "Line".
// The service's other bigint advisory keys are negative (the asynchronous lines'), below 2^32
// (golang-migrate's), under River's prefix (0x5707c5) or the audit's key ("StkAudit"), so
// this prefix is a space of its own (internal/async/asyncpg's line.go lists them all).
const advanceLockPrefix = 0x4C696E65

// advanceLockKey returns the bigint key of product's advance lock: the prefix, then the id's
// low 32 bits. Two products that agree in those share the lock; one's advance is then busy
// while the other's runs, and is tried again — the lock orders and spares advances, it does
// not make them safe (the row lock does).
func advanceLockKey(product int64) int64 { return advanceLockPrefix<<32 | int64(uint32(product)) }

// drawLock takes the line's row FOR UPDATE for the draw, once every join in flight has
// committed (FOR UPDATE waits for their FOR KEY SHARE, and later joins wait for this
// transaction): every ticket made before it is in the draw.
func (s *Store) drawLock(ctx context.Context, tx pgx.Tx, product int64) error {
	if _, err := tx.Exec(ctx, drawLockSQL, product); err != nil {
		return dbError("draw: lock the line", err)
	}
	if s.drawLocked != nil {
		s.drawLocked(ctx)
	}
	return nil
}

// placeAndAdmit draws the line with seed (when not nil), places the late arrivals and admits
// up to p.Admit, in one round trip to Postgres (a batch: the statements run in order, and the
// first to fail fails the rest), recording in a what each did and in placed the highest place.
func (s *Store) placeAndAdmit(ctx context.Context, tx pgx.Tx, product, version int64, seed []byte, p line.Plan, a *line.Advanced, placed *int64) error {
	b := &pgx.Batch{}
	if seed != nil {
		b.Queue(drawSQL, product, version, seed).Exec(func(tag pgconn.CommandTag) error {
			a.Drawn = tag.RowsAffected()
			return nil
		})
	}
	b.Queue(placeSQL, product, version).QueryRow(func(row pgx.Row) error {
		return row.Scan(&a.Placed, placed)
	})
	if p.Admit > 0 {
		b.Queue(admitSQL, product, version, p.Admit, int64(p.AdmissionFor/time.Second)).Exec(func(tag pgconn.CommandTag) error {
			a.Admitted = tag.RowsAffected()
			return nil
		})
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return dbError("advance: draw, place and admit", err)
	}
	return nil
}

// newSecret returns a new key's secret.
func newSecret() []byte {
	b := make([]byte, line.KeySize)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}
