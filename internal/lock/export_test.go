package lock

import (
	"context"
	"slices"
	"time"
)

// This file gives the tests (package lock_test) what the package does not export: knobs that
// make timing-dependent cases deterministic, and views of a lock's state — its token, its lease
// as the client counts it, its refresh — that tests compare with what Redis holds. None of it
// is API: callers keep leases alive with WithLocks.

// WithRecheck sets how long a waiter sleeps at most between looks at the lock (200 ms unless
// set), so that tests can tell a waiter woken by its grant message from one that looked again.
func WithRecheck(d time.Duration) Option { return func(c *Client) { c.recheck = d } }

// SetAfterGrant makes every round of r run f between its grants and its raising of the fencing
// counters, so that tests can take the lock away from nodes exactly there.
func SetAfterGrant(r *Redlock, f func()) { r.afterGrant = f }

// Name returns the name the lock was obtained under.
func (l *Lock) Name() string { return l.name }

// Token returns the random value that identifies the holder in Redis: the lock key's value
// (on every node, for a Redlock's lock).
func (l *Lock) Token() string { return l.token }

// Until returns the local time by which the lease (a Redlock's lock: its validity) ends
// unless refreshed.
func (l *Lock) Until() time.Time { return l.leaseEnd() }

// Refresh extends the lease to ttl from now (on every node, for a Redlock's lock), as WithLocks'
// keeper does.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error { return l.refresh(ctx, ttl) }

// Op returns the operation that failed: "obtain", "refresh" or "release".
func (e *QuorumError) Op() string { return e.op }

// Counts returns how many nodes succeeded, how many were needed and how many there are.
func (e *QuorumError) Counts() (got, needed, total int) { return e.got, e.needed, e.total }

// FailedAddrs returns the sorted addresses of the nodes the error names.
func (e *QuorumError) FailedAddrs() []string {
	var a []string
	for _, n := range e.nodes {
		a = append(a, n.addr)
	}
	slices.Sort(a)
	return a
}
