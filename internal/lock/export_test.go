package lock

import "time"

// WithRecheck sets how long a waiter sleeps at most between looks at the lock (200 ms unless
// set), so that tests can tell a waiter woken by its grant message from one that looked again.
func WithRecheck(d time.Duration) Option { return func(c *Client) { c.recheck = d } }
