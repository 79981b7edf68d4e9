package lock

import "time"

// WithRecheck sets how long a waiter sleeps at most between looks at the lock (200 ms unless
// set), so that tests can tell a waiter woken by its grant message from one that looked again.
func WithRecheck(d time.Duration) Option { return func(c *Client) { c.recheck = d } }

// SetAfterGrant makes every round of r run f between its grants and its raising of the fencing
// counters, so that tests can take the lock away from nodes exactly there.
func SetAfterGrant(r *Redlock, f func()) { r.afterGrant = f }
