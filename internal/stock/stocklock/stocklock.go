// Package stocklock is stock.Locker over package lock: a product's lock is a Redis lock, on one
// Redis (Redis) or on a majority of independent Redis nodes (Redlock). It is the one place that
// names the product locks and turns the lock package's outcomes into the domain's errors: a
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
	// Wait bounds how long a batch waits for its locks. Default 2s.
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

// productLockName is the name of a product's lock: the one place it is built. The prefix is the
// lock client's namespace (STOCKSVC_REDIS_PREFIX), so that the client hears releases of exactly
// these locks; the braces make the id the Redis Cluster hash tag.
func productLockName(prefix string, id int64) string {
	return prefix + "lock:product:{" + strconv.FormatInt(id, 10) + "}"
}

// lockNames returns ids in ascending order, as stock.Locker promises to take them, and the
// name of each one's lock.
func lockNames(prefix string, ids []int64) (sorted []int64, names []string) {
	sorted = slices.Sorted(slices.Values(ids))
	names = make([]string, len(sorted))
	for i, id := range sorted {
		names[i] = productLockName(prefix, id)
	}
	return sorted, names
}

// Redis is the stock.Locker over one Redis (or a Sentinel or Cluster deployment of it).
type Redis struct {
	client *lock.Client
	cfg    Config
}

var _ stock.Locker = (*Redis)(nil)

// NewRedis returns a locker that takes its locks through client; the lock names start with the
// client's namespace.
func NewRedis(client *lock.Client, cfg Config) *Redis {
	return &Redis{client: client, cfg: cfg.withDefaults()}
}

// WithProducts implements stock.Locker. The wait budget bounds only the acquisition: once the
// locks are held the work is detached from it and from the caller's cancellation (a batch that
// has started is allowed to finish so that its outcome is known), and only a lost lock cancels
// it. The grant carries each lock's fencing token and the note its last holder left, and the
// notes the work leaves in it go to the next holders.
func (r *Redis) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *stock.Grant) error) error {
	ids, names := lockNames(r.client.Namespace(), ids)
	waitCtx, cancel := context.WithTimeout(ctx, r.cfg.Wait)
	defer cancel()
	ran := false
	err := r.client.WithLocks(waitCtx, names, r.cfg.TTL, func(ctx context.Context, locks []*lock.Lock) error {
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
	}, &lock.Options{Wait: r.cfg.Retry == nil, Retry: r.cfg.Retry, Detached: true})
	if ran {
		return workError(err)
	}
	// Contention is what package lock says it is: ErrNotObtained, the lock seen held until the
	// wait budget ran out. Anything else that ended the wait — a refused connection however
	// long the client spent retrying it, or a budget that ran out before Redis answered at
	// all — means Redis is unavailable, not the product busy.
	switch {
	case errors.Is(err, lock.ErrNotObtained):
		return &stock.BusyError{RetryAfter: r.cfg.Wait, Reason: fmt.Sprintf("locks not obtained within %v", r.cfg.Wait)}
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

// Redlock is the stock.Locker over a lock.Redlock: each product's lock is held on a majority of
// independent Redis nodes, so that the loss of a minority of them neither stops the sale nor
// lets two holders in (see package lock for what a node restarted empty does). A Redlock
// cannot wait in line, so a batch polls for its locks, and it carries no notes: Grant.Notes is
// always empty, and every batch reads its rows from Postgres.
type Redlock struct {
	locks  *lock.Redlock
	prefix string
	cfg    Config
}

var _ stock.Locker = (*Redlock)(nil)

// NewRedlock returns a locker that takes its locks through locks, named under prefix (the Redis
// key prefix). cfg.Retry paces the polling; nil polls with full-jitter exponential backoff from
// 2ms up to 50ms, so that contenders spread out instead of asking all nodes at once again.
func NewRedlock(locks *lock.Redlock, prefix string, cfg Config) *Redlock {
	cfg = cfg.withDefaults()
	if cfg.Retry == nil {
		cfg.Retry = lock.Exponential(2*time.Millisecond, 50*time.Millisecond)
	}
	return &Redlock{locks: locks, prefix: prefix, cfg: cfg}
}

// WithProducts implements stock.Locker as Redis.WithProducts does: the wait budget bounds only
// the acquisition, the work is detached from the caller's cancellation once the locks are held,
// and only a lost lock cancels it. The locks are refreshed every third of their lease and
// always released. A failure to obtain them is stock.ErrBusy when a quorum of nodes answered
// that the lock was held, and stock.ErrUnavailable when no quorum of nodes could be asked.
func (r *Redlock) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *stock.Grant) error) error {
	ids, names := lockNames(r.prefix, ids)
	waitCtx, cancel := context.WithTimeout(ctx, r.cfg.Wait)
	defer cancel()
	ran := false
	err := r.locks.WithLocks(waitCtx, names, r.cfg.TTL, func(ctx context.Context, locks []*lock.Lock) error {
		ran = true
		g := &stock.Grant{Fences: make(map[int64]int64, len(locks)), Notes: map[int64]string{}, Leave: map[int64]string{}}
		for i, l := range locks {
			g.Fences[ids[i]] = l.Fence()
		}
		return fn(ctx, g)
	}, &lock.Options{Retry: r.cfg.Retry, Detached: true})
	if ran {
		return workError(err)
	}
	var qe *lock.QuorumError
	switch {
	case errors.As(err, &qe) && !qe.Unreachable():
		return &stock.BusyError{RetryAfter: r.cfg.Wait, Reason: fmt.Sprintf("locks not obtained on a quorum of nodes within %v", r.cfg.Wait)}
	case ctx.Err() != nil:
		return fmt.Errorf("obtain locks: %w", context.Cause(ctx))
	default:
		return fmt.Errorf("%w: %w", stock.ErrUnavailable, err)
	}
}
