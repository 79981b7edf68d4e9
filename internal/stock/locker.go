package stock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
)

// Locker gives a holder exclusive access to products across every replica.
type Locker interface {
	// WithProducts runs fn while holding the lock of every product in ids, taken in ascending
	// id order (see Grant). fn's context is cancelled if a lock is lost. It returns ErrBusy
	// when the locks could not be had within the wait budget, ErrUnavailable (wrapped) when
	// the lock service is unreachable, the context's error when ctx ends, and otherwise fn's
	// error.
	WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *Grant) error) error
}

// Grant is what holding products' locks gives, and what the holder leaves for the next one.
type Grant struct {
	// Fences holds the fencing token of each product's lock.
	Fences map[int64]int64
	// Notes holds, for each product, what the last holder of its lock left when it let go:
	// the product's row as that holder's batch left it (a level), or "" for nothing. It is a
	// hint, never a fact: a batch decided from it is still refused by the version check if it
	// is stale.
	Notes map[int64]string
	// Leave is what the work leaves for the next holder of each product's lock; a product
	// without an entry leaves nothing, which takes away the note the work was given.
	Leave map[int64]string
}

// levelNote writes a product's level as a lock note; parseLevelNote reads one back.
func levelNote(l Level) string {
	return strconv.FormatInt(l.Stock, 10) + " " + strconv.FormatInt(l.Version, 10)
}

func parseLevelNote(note string) (Level, bool) {
	stock, version, ok := strings.Cut(note, " ")
	if !ok {
		return Level{}, false
	}
	s, err1 := strconv.ParseInt(stock, 10, 64)
	v, err2 := strconv.ParseInt(version, 10, 64)
	if err1 != nil || err2 != nil || s < 0 {
		return Level{}, false
	}
	return Level{Stock: s, Version: v}, true
}

// productLockName is the name of a product's lock: the one place it is built. The prefix is the
// lock client's namespace (STOCKSVC_REDIS_PREFIX), so that the client hears releases of exactly
// these locks; the braces make the id the Redis Cluster hash tag.
func productLockName(prefix string, id int64) string {
	return prefix + "lock:product:{" + strconv.FormatInt(id, 10) + "}"
}

// RedisLocker is the Locker over package lock.
type RedisLocker struct {
	client *lock.Client
	cfg    LockConfig
}

// LockConfig tunes RedisLocker.
type LockConfig struct {
	// TTL is the lease of each lock; it is refreshed while the work runs. Default 10s.
	TTL time.Duration
	// Wait bounds how long a batch waits for its locks. Default 2s.
	Wait time.Duration
	// Retry, when set, makes waiters poll Redis as it says, the way most lock libraries do.
	// Nil (the default) waits without polling: clients take turns in the order they asked,
	// each given the lock by the last holder and told by a message (lock.Options.Wait).
	Retry lock.RetryStrategy
}

func (c LockConfig) withDefaults() LockConfig {
	if c.TTL <= 0 {
		c.TTL = 10 * time.Second
	}
	if c.Wait <= 0 {
		c.Wait = 2 * time.Second
	}
	return c
}

var _ Locker = (*RedisLocker)(nil)

// NewRedisLocker returns a Locker that takes its locks through client; the lock names start
// with the client's namespace.
func NewRedisLocker(client *lock.Client, cfg LockConfig) *RedisLocker {
	return &RedisLocker{client: client, cfg: cfg.withDefaults()}
}

// WithProducts implements Locker. The wait budget bounds only the acquisition: once the locks
// are held the work is detached from it and from the caller's cancellation (a batch that has
// started is allowed to finish so that its outcome is known), and only a lost lock cancels it.
func (r *RedisLocker) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *Grant) error) error {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = productLockName(r.client.Namespace(), id)
	}
	waitCtx, cancel := context.WithTimeout(ctx, r.cfg.Wait)
	defer cancel()
	ran := false
	err := r.client.WithLocks(waitCtx, names, r.cfg.TTL, func(ctx context.Context, locks []*lock.Lock) error {
		ran = true
		g := &Grant{Fences: make(map[int64]int64, len(locks)), Notes: make(map[int64]string, len(locks)), Leave: map[int64]string{}}
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
		return &BusyError{RetryAfter: r.cfg.Wait, Reason: fmt.Sprintf("locks not obtained within %v", r.cfg.Wait)}
	case ctx.Err() != nil:
		return fmt.Errorf("obtain locks: %w", context.Cause(ctx))
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}

// workError is what the work under the locks returned, with a lock lost meanwhile reported as
// ErrLockLost.
func workError(err error) error {
	if errors.Is(err, lock.ErrNotHeld) && !errors.Is(err, ErrLockLost) {
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	}
	return err
}

// RedlockLocker is the Locker over a Redlock: each product's lock is held on a majority of
// independent Redis nodes, so that the loss of a minority of them neither stops the sale nor
// lets two holders in (see package lock for what a node restarted empty does). A Redlock
// cannot wait in line, so a batch polls for its locks, and it carries no notes: Grant.Notes is
// always empty, and every batch reads its rows from Postgres.
type RedlockLocker struct {
	locks  *lock.Redlock
	prefix string
	cfg    LockConfig
}

var _ Locker = (*RedlockLocker)(nil)

// NewRedlockLocker returns a Locker that takes its locks through locks, named under prefix (the
// Redis key prefix). cfg.Retry paces the polling; nil polls with full-jitter exponential
// backoff from 2ms up to 50ms, so that contenders spread out instead of asking all nodes at
// once again.
func NewRedlockLocker(locks *lock.Redlock, prefix string, cfg LockConfig) *RedlockLocker {
	cfg = cfg.withDefaults()
	if cfg.Retry == nil {
		cfg.Retry = lock.Exponential(2*time.Millisecond, 50*time.Millisecond)
	}
	return &RedlockLocker{locks: locks, prefix: prefix, cfg: cfg}
}

// WithProducts implements Locker as RedisLocker does: the wait budget bounds only the
// acquisition, the work is detached from the caller's cancellation once the locks are held,
// and only a lost lock cancels it. The locks are refreshed every third of their lease and
// always released. A failure to obtain them is ErrBusy when a quorum of nodes answered that
// the lock was held, and ErrUnavailable when no quorum of nodes could be asked.
func (r *RedlockLocker) WithProducts(ctx context.Context, ids []int64, fn func(ctx context.Context, g *Grant) error) error {
	ids = slices.Clone(ids)
	slices.Sort(ids)
	names := make([]string, len(ids))
	for i, id := range ids {
		names[i] = productLockName(r.prefix, id)
	}
	waitCtx, cancel := context.WithTimeout(ctx, r.cfg.Wait)
	defer cancel()
	ran := false
	err := r.locks.WithLocks(waitCtx, names, r.cfg.TTL, func(ctx context.Context, locks []*lock.QuorumLock) error {
		ran = true
		g := &Grant{Fences: make(map[int64]int64, len(locks)), Notes: map[int64]string{}, Leave: map[int64]string{}}
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
		return &BusyError{RetryAfter: r.cfg.Wait, Reason: fmt.Sprintf("locks not obtained on a quorum of nodes within %v", r.cfg.Wait)}
	case ctx.Err() != nil:
		return fmt.Errorf("obtain locks: %w", context.Cause(ctx))
	default:
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
}
