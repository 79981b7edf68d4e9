// Package stocklock is stock.Locker over package lock: a product's lock is a Redis lock, on one
// Redis (NewRedis) or on a majority of independent Redis nodes (NewRedlock). It is the one place
// that names the product locks and turns the lock package's outcomes into the domain's errors: a
// lock seen held until the wait budget ran out is stock.ErrBusy, Redis that could not be
// reached is stock.ErrUnavailable, and a lock lost while the work ran is stock.ErrLockLost.
package stocklock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// Config tunes a locker. Zero fields take the defaults documented on each.
type Config struct {
	// TTL is the lease of each lock; it is refreshed while the work runs. Default 10s.
	TTL time.Duration
	// Wait bounds how long a batch waits for its locks, unless its context allows longer
	// (stock.WithLockWait: an order the line admitted). Default 2s.
	Wait time.Duration
	// Retry, when set, makes waiters poll Redis as it says, the way most lock libraries do.
	// Nil waits without polling on one Redis: clients take turns in the order they asked, each
	// given the lock by the last holder and told by a message (lock.Options.Wait). A Redlock
	// cannot wait in line, and polls with its own default (NewRedlock).
	Retry lock.RetryStrategy
}

func (c Config) withDefaults() Config {
	if c.TTL <= 0 {
		c.TTL = 10 * time.Second
	}
	if c.Wait <= 0 {
		c.Wait = 2 * time.Second
	}
	return c
}

// Name returns the name of product id's lock under prefix, the lock client's namespace
// (STOCKSVC_REDIS_PREFIX), so that the client hears releases of exactly these locks. It is the
// one place the name is built: the lockers take their locks by it, and whatever else must find
// a product's lock in Redis (tests, the load harness's drills) asks for it here. The name is
// also the lock's Redis key: the braces make the id its Redis Cluster hash tag, and package lock
// keeps a name that has one as it is.
func Name(prefix string, id int64) string {
	return prefix + "lock:product:{" + strconv.FormatInt(id, 10) + "}"
}

// Locker is the stock.Locker over package lock, on one Redis (NewRedis) or on a Redlock
// (NewRedlock).
type Locker struct {
	locks  locks
	prefix string
	cfg    Config
}

// locks is what a Locker needs of package lock: a *lock.Client or a *lock.Redlock.
type locks interface {
	WithLocks(ctx context.Context, names []string, ttl time.Duration, fn func(ctx context.Context, locks []*lock.Lock) error, opt *lock.Options) error
}

var (
	_ stock.Locker = (*Locker)(nil)
	_ locks        = (*lock.Client)(nil)
	_ locks        = (*lock.Redlock)(nil)
)

// NewRedis returns a locker over one Redis (or a Sentinel or Cluster deployment of it) that
// takes its locks through client; the lock names start with the client's namespace. With
// cfg.Retry nil, batches wait for their locks without polling: clients take turns in the order
// they asked, each given the lock by the last holder and told by a message, and the grant
// carries the note the last holder left.
func NewRedis(client *lock.Client, cfg Config) *Locker {
	return &Locker{locks: client, prefix: client.Namespace(), cfg: cfg.withDefaults()}
}

// NewRedlock returns a locker over a lock.Redlock, whose locks are named under prefix (the
// Redis key prefix): each product's lock is held on a majority of independent Redis nodes, so
// that the loss of a minority of them neither stops the sale nor lets two holders in (see
// package lock for what a node restarted empty does). A Redlock cannot wait in line, so a
// batch polls for its locks: cfg.Retry paces it, and nil polls with full-jitter exponential
// backoff from 2ms up to 50ms, so that contenders spread out instead of asking all nodes at
// once again. A Redlock carries no notes: every note in a Grant is "", and every batch reads its
// rows from Postgres.
func NewRedlock(locks *lock.Redlock, prefix string, cfg Config) *Locker {
	cfg = cfg.withDefaults()
	if cfg.Retry == nil {
		cfg.Retry = lock.Exponential(2*time.Millisecond, 50*time.Millisecond)
	}
	return &Locker{locks: locks, prefix: prefix, cfg: cfg}
}

// WithProducts implements stock.Locker. The wait budget bounds only the acquisition: once the
// locks are held the work is detached from it and from the caller's cancellation (a batch that
// has started is allowed to finish so that its outcome is known), and only a lost lock cancels
// it. The locks are refreshed every third of their lease and always released. The grant
// carries each lock's fencing token and the note its last holder left, and the notes the work
// leaves in it go to the next holders.
func (lk *Locker) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *stock.Grant) error) error {
	ids = slices.Sorted(slices.Values(ids)) // the order stock.Locker promises to take them in
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = Name(lk.prefix, id)
	}
	// An order the line admitted may wait longer (stock.WithLockWait).
	wait := max(lk.cfg.Wait, stock.LockWait(ctx))
	waitCtx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	ran := false
	err := lk.locks.WithLocks(waitCtx, names, lk.cfg.TTL, func(ctx context.Context, locks []*lock.Lock) error {
		ran = true
		g := &stock.Grant{Fences: make(map[int64]int64, len(locks)), Notes: make(map[int64]string, len(locks)), Leave: map[int64]string{}}
		for i, l := range locks {
			g.Fences[ids[i]], g.Notes[ids[i]] = l.Fence(), l.Note()
		}
		err := fn(ctx, g)
		for i, l := range locks {
			l.LeaveNote(g.Leave[ids[i]])
		}
		return err
	}, &lock.Options{Wait: lk.cfg.Retry == nil, Retry: lk.cfg.Retry, Detached: true})
	if ran {
		return workError(err)
	}
	// Contention is what package lock says it is: ErrNotObtained, the lock seen held until the
	// wait budget ran out (on a Redlock, by a quorum of nodes that answered). Anything else
	// that ended the wait — a refused connection however long the client spent retrying it,
	// nodes that could not be asked, or a budget that ran out before Redis answered at all —
	// means Redis is unavailable, not the product busy.
	var qe *lock.QuorumError
	switch {
	case errors.Is(err, lock.ErrNotObtained) && !(errors.As(err, &qe) && qe.Unreachable()):
		return &stock.BusyError{RetryAfter: lk.cfg.Wait, Reason: fmt.Sprintf("locks not obtained within %v", wait)}
	case ctx.Err() != nil:
		return fmt.Errorf("obtain locks: %w", context.Cause(ctx))
	default:
		return fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
}

// workError is what the work under the locks returned, with a lock lost meanwhile reported as
// stock.ErrLockLost.
func workError(err error) error {
	if errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, stock.ErrLockLost) {
		return fmt.Errorf("%w: %w", stock.ErrLockLost, err)
	}
	return err
}
