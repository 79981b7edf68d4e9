package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"slices"
	"time"
)

// queue holds one Client's waiters for one lock, in arrival order. Only the waiter at the head
// contends in Redis; the others wait for their turn here, so a replica sends one contender per
// lock to Redis however many of its requests want it, and its requests are served fairly.
// All fields are guarded by the Client's mutex.
type queue struct {
	busy    bool      // a waiter of this client holds the lock or contends for it
	holder  string    // the token of the lock a waiter of this client holds, if one does
	waiters []*waiter // after the one that is busy, in arrival order
	notify  chan struct{}
}

// waiter is one Obtain waiting for its turn.
type waiter struct {
	ttl     time.Duration
	fenced  bool
	turn    chan grant // buffered: the grant never blocks the giver
	granted bool       // a grant is promised; it may still be on its way
}

// grant gives a waiter its turn: the lock itself, handed off, or the right to contend for it.
type grant struct {
	lock *Lock
	// yield says the lock was just released because another client's waiter was recorded:
	// pause briefly before contending, so that waiter has a fair chance at it.
	yield bool
}

// obtainQueued is Obtain with Options.Wait.
func (c *Client) obtainQueued(ctx context.Context, name string, ttl time.Duration, opt *Options) (*Lock, outcome, error) {
	k := keysFor(name)
	c.mu.Lock()
	q := c.queues[k.lock]
	if q == nil {
		q = &queue{notify: make(chan struct{})}
		c.queues[k.lock] = q
	}
	yield := false
	if q.busy {
		w := &waiter{ttl: ttl, fenced: opt.fenced(), turn: make(chan grant, 1)}
		q.waiters = append(q.waiters, w)
		c.mu.Unlock()
		select {
		case g := <-w.turn:
			if g.lock != nil {
				return g.lock, handedOff, nil
			}
			yield = g.yield
		case <-ctx.Done():
			c.mu.Lock()
			if !w.granted {
				q.waiters = slices.DeleteFunc(q.waiters, func(x *waiter) bool { return x == w })
				c.mu.Unlock()
				return nil, contended, waitError(name, ctx.Err())
			}
			c.mu.Unlock()
			// The turn was given as we gave up: pass it on.
			if g := <-w.turn; g.lock != nil {
				_ = g.lock.Release(ctx)
			} else {
				c.advance(k, q, false)
			}
			return nil, contended, waitError(name, ctx.Err())
		}
	} else {
		q.busy = true
		c.mu.Unlock()
	}

	l, how, marked, err := c.contend(ctx, name, k, q, ttl, opt, yield)
	if err != nil {
		c.advance(k, q, marked)
		return nil, how, err
	}
	return l, how, nil
}

// contend is the head of the queue trying for the lock in Redis until it has it or ctx ends.
// Between attempts it sleeps until the holder's release is announced, or its lease runs out.
// marked reports whether the client was recorded among the lock's waiters.
func (c *Client) contend(ctx context.Context, name string, k keys, q *queue, ttl time.Duration, opt *Options, yield bool) (l *Lock, how outcome, marked bool, err error) {
	how = firstTry
	if yield {
		how = contended
		// About the time another client's waiter needs to hear the release and answer it.
		if err := sleep(ctx, time.Duration(mrand.Int64N(int64(2*time.Millisecond)))); err != nil {
			return nil, how, false, waitError(name, err)
		}
	}
	token := rand.Text()
	subscribed := false
	for {
		// Take the notification channel before the attempt, so that a release announced
		// while the attempt is in flight still wakes us.
		c.mu.Lock()
		notify := q.notify
		c.mu.Unlock()
		start := time.Now()
		a, err := c.try(ctx, k, token, ttl, opt, true, marked)
		if err != nil {
			return nil, how, marked, attemptError(ctx, name, err, how == contended)
		}
		if a.obtained {
			c.mu.Lock()
			q.holder = token
			c.mu.Unlock()
			return c.newLock(name, k, token, a.fence, ttl, opt.fenced(), start), how, false, nil
		}
		how, marked = contended, true
		if !subscribed {
			subscribed = true
			if err := c.subscribe(ctx); err == nil {
				continue // a release between the attempt and the subscription went unheard
			} else if ctx.Err() != nil {
				return nil, how, marked, waitError(name, ctx.Err())
			}
			// Without a subscription the lease timer below still wakes us.
		}
		wait := a.pttl
		if wait <= 0 {
			wait = 100 * time.Millisecond // held without a lease (not by this package): look again soon
		}
		wait += time.Duration(mrand.Int64N(int64(2 * time.Millisecond)))
		timer := time.NewTimer(wait)
		select {
		case <-notify:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, how, marked, waitError(name, ctx.Err())
		}
		timer.Stop()
	}
}

// advance gives the turn to the next waiter, or marks the queue idle. marked says the giver was
// recorded among the lock's waiters in Redis; if nobody follows, the record is removed so that
// holders elsewhere go back to handing the lock to their own waiters.
func (c *Client) advance(k keys, q *queue, marked bool) {
	c.mu.Lock()
	if len(q.waiters) > 0 {
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		w.granted = true
		w.turn <- grant{}
		c.mu.Unlock()
		return
	}
	q.busy = false
	if c.queues[k.lock] == q {
		delete(c.queues, k.lock)
	}
	c.mu.Unlock()
	if marked {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		_ = forgetScript.Run(ctx, c.rdb, k.all(), c.id).Err() // best effort: the record expires anyway
	}
}

// heldQueue returns the queue of this client that holds l, if one does.
func (c *Client) heldQueue(l *Lock) *queue {
	c.mu.Lock()
	defer c.mu.Unlock()
	if q := c.queues[l.keys.lock]; q != nil && q.holder == l.token {
		return q
	}
	return nil
}

// releaseQueued releases a lock held by the queue q: straight to the next waiter if there is
// one, otherwise back to Redis. l.mu is held.
func (c *Client) releaseQueued(ctx context.Context, l *Lock, q *queue) error {
	c.mu.Lock()
	q.holder = ""
	var next *waiter
	if len(q.waiters) > 0 {
		next = q.waiters[0]
		q.waiters = q.waiters[1:]
		next.granted = true
	}
	c.mu.Unlock()

	if next == nil {
		n, err := releaseScript.Run(ctx, c.rdb, l.keys.all(), l.token, l.keys.channel).Int64()
		// Waiters that queued while the lock was being released get the turn now.
		c.advance(l.keys, q, false)
		if err != nil {
			return fmt.Errorf("lock: release %q: %w", l.name, err)
		}
		if n != 1 {
			l.reportLost()
			return ErrNotHeld
		}
		return nil
	}

	token := rand.Text()
	start := time.Now()
	reply, err := handoffScript.Run(ctx, c.rdb, l.keys.all(), l.token, token, next.ttl.Milliseconds(),
		c.id, l.keys.channel, flag(next.fenced)).Int64Slice()
	switch {
	case err != nil:
		next.turn <- grant{}
		return fmt.Errorf("lock: release %q: %w", l.name, err)
	case len(reply) != 2:
		next.turn <- grant{}
		return fmt.Errorf("lock: release %q: unexpected reply %v", l.name, reply)
	case reply[0] == 1:
		c.mu.Lock()
		q.holder = token
		c.mu.Unlock()
		next.turn <- grant{lock: c.newLock(l.name, l.keys, token, reply[1], next.ttl, next.fenced, start)}
		return nil
	case reply[0] == 0:
		next.turn <- grant{yield: true}
		return nil
	default:
		next.turn <- grant{}
		l.reportLost()
		return ErrNotHeld
	}
}

// errClosed means the Client was closed.
var errClosed = errors.New("lock: client closed")
