package linepg

import (
	"context"
	"crypto/rand"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/stocksvc/stocksvc/internal/line"
)

// An advance is one transaction under the line's row lock (FOR NO KEY UPDATE, which joins do
// not wait for; the draw upgrades it to FOR UPDATE, which waits for the joins in flight and
// makes later ones wait). Every ticket it changes is stamped with the next version, which it
// writes, with the NOTIFY, only when something changed.
const (
	lockLineSQL = `
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
	// queuedSQL lists the tickets the draw places: every one waiting without a place.
	queuedSQL = `SELECT id FROM line_tickets WHERE product_id = $1 AND status = 'waiting' AND place IS NULL`
	// drawSQL gives the place of each ticket of $3, its index in the array (Rank's order).
	drawSQL = `
UPDATE line_tickets t SET place = d.place, changed = $2
  FROM unnest($3::bigint[]) WITH ORDINALITY AS d(id, place)
 WHERE t.id = d.id AND t.product_id = $1`
	// placeSQL places the late arrivals after place $3, in ticket id order, and returns the
	// highest place given.
	placeSQL = `
WITH late AS (
    SELECT id, $3 + row_number() OVER (ORDER BY id) AS place
      FROM line_tickets WHERE product_id = $1 AND status = 'waiting' AND place IS NULL),
placed AS (
    UPDATE line_tickets t SET place = late.place, changed = $2 FROM late WHERE t.id = late.id
    RETURNING t.place)
SELECT count(*), coalesce(max(place), $3) FROM placed`
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
			if a.Drawn, err = s.draw(ctx, tx, product, next, seed); err != nil {
				return err
			}
			placed, drawn = a.Drawn, true
		}
		if drawn {
			if err := tx.QueryRow(ctx, placeSQL, product, next, placed).Scan(&a.Placed, &placed); err != nil {
				return dbError("advance: place", err)
			}
			if p.Admit > 0 {
				tag, err := tx.Exec(ctx, admitSQL, product, next, p.Admit, int64(p.AdmissionFor/time.Second))
				if err != nil {
					return dbError("advance: admit", err)
				}
				a.Admitted = tag.RowsAffected()
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

// draw places the tickets made before it in the order Rank gives them from seed, once every
// join in flight has committed (FOR UPDATE waits for their FOR KEY SHARE, and later joins wait
// for this transaction), and returns how many it placed.
func (s *Store) draw(ctx context.Context, tx pgx.Tx, product, version int64, seed []byte) (int64, error) {
	if _, err := tx.Exec(ctx, drawLockSQL, product); err != nil {
		return 0, dbError("draw: lock the line", err)
	}
	if s.drawLocked != nil {
		s.drawLocked(ctx)
	}
	rows, _ := tx.Query(ctx, queuedSQL, product)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, dbError("draw: list the tickets", err)
	}
	if _, err := tx.Exec(ctx, drawSQL, product, version, line.Rank(seed, ids)); err != nil {
		return 0, dbError("draw", err)
	}
	return int64(len(ids)), nil
}

// newSecret returns a new key's secret.
func newSecret() []byte {
	b := make([]byte, line.KeySize)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return b
}
