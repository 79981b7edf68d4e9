package lock

// QueueLen reports how many waiters of c wait behind the busy one for name.
func QueueLen(c *Client, name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[keysFor(name).lock]; q != nil {
		return len(q.waiters)
	}
	return 0
}
