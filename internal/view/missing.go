package view

import (
	"context"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// What a replica knows of products that do not exist.
//
// An order or a read for an id no product has would otherwise cost a Redis miss, a rebuild
// lock, a read of Postgres and, for an order, a batch queue; a flood of them, each for another
// random id, would take from the sale what it needs. So a replica remembers two kinds of fact,
// each from a read of Postgres, each for at most one lease after that read began:
//
//   - the highest id of a product that exists (Source.HighestProductID): no id above it existed
//     then. Ids come from an identity column, so almost every id a flood picks at random is
//     above it, and one query a lease answers them all;
//   - ids that a read of the product found missing (ids at or below the highest that an insert
//     took and never committed, say), one entry each.
//
// Neither may hide a product whose creation has been answered. No rule about which ids can
// exist is relied on — identity values are taken when an insert begins, so an id below the
// highest can belong to an insert that commits later — only when each fact was read:
//
//  1. A fact read by a statement that began at T is used only by a call that asked within one
//     lease of it, asked ≤ T + lease, on this replica's clock (fresh, and the flight's check in
//     Cache.view).
//  2. Postgres takes a statement's snapshot after the statement began, and a commit that has
//     returned is in every snapshot taken after it. A fact that says product X is missing, or
//     that the highest id is below X, came from a read whose snapshot missed X's insert: that
//     read began before the insert's commit returned, at T < C.
//  3. The creation of X is answered only once Created has waited one lease and a margin after
//     the commit returned: at A ≥ C + lease + margin, on the creating replica's clock.
//  4. A call that asks after that answer, on any replica (asked > A), could only use a fact
//     read at T ≥ asked − lease > A − lease ≥ C + margin. The margin covers the two clocks
//     measuring a lease at slightly different rates, so T > C: the read began after the
//     commit had returned, and found X, against 2.
//
// A fact that a flight brings is checked against when each of its callers asked, not when the
// flight began: a slow read brings a fact that may be stale on arrival, and it is not used then.
type absent struct {
	src     Source
	lease   time.Duration
	metrics *Metrics
	flight  singleflight.Group

	mu sync.Mutex
	// highest is the highest id of an existing product as the read that began at highestRead
	// saw it (zero time: never read).
	highest     int64
	highestRead time.Time
	// ids are ids found missing, each with when the read that found so began.
	ids map[int64]time.Time
}

// maxAbsentIDs bounds the ids a replica remembers one by one; expired ones make room.
const maxAbsentIDs = 4096

// fresh reports whether a fact read at read may answer a call that asked at asked.
func (a *absent) fresh(read, asked time.Time) bool {
	return !read.IsZero() && asked.Sub(read) < a.lease
}

// missing reports whether product id is known not to exist, to a call that asked at asked. It
// reads the highest product id again, once for every caller on this replica, when that is
// stale and could tell: id is above the last one read (the highest only grows). It answers
// false when it cannot tell.
func (a *absent) missing(ctx context.Context, id int64, asked time.Time) bool {
	known, refresh := a.known(id, asked)
	if known || !refresh {
		return known
	}
	ch := a.flight.DoChan("highest", func() (any, error) {
		// The read serves every caller that joins it: it must not end with the first.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), postgresTimeout)
		defer cancel()
		start := time.Now() // before the read: see fresh
		a.metrics.postgresQuery("highest")
		highest, err := a.src.HighestProductID(ctx)
		if err != nil {
			return nil, err
		}
		a.mu.Lock()
		if start.After(a.highestRead) {
			a.highest, a.highestRead = highest, start
		}
		a.mu.Unlock()
		return nil, nil
	})
	select {
	case <-ch:
	case <-ctx.Done():
		return false
	}
	known, _ = a.known(id, asked)
	return known
}

// known reports whether id is known missing to a call that asked at asked, from memory alone,
// and, when it is not, whether reading the highest id again could tell.
func (a *absent) known(id int64, asked time.Time) (known, refresh bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if read, ok := a.ids[id]; ok && a.fresh(read, asked) {
		return true, false
	}
	if id <= a.highest {
		return false, false
	}
	if a.fresh(a.highestRead, asked) {
		return true, false
	}
	return false, true
}

// found records that a read of product id that began at read found no such product.
func (a *absent) found(id int64, read time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.ids[id]; ok && !old.Before(read) {
		return
	}
	if _, ok := a.ids[id]; !ok && len(a.ids) >= maxAbsentIDs {
		now := time.Now()
		for k, r := range a.ids {
			if !a.fresh(r, now) {
				delete(a.ids, k)
			}
		}
		if len(a.ids) >= maxAbsentIDs {
			return // all fresh: this one is read again next time, as without the memory
		}
	}
	a.ids[id] = read
}
