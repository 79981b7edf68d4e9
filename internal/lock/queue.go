package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
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
	// listed says the client is in the lock's list of waiting clients: the lock went to
	// another client, and this one waits for its reservation rather than trying at once.
	listed bool
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
	listed := false
	if q.busy {
		w := &waiter{ttl: ttl, fenced: opt.fenced(), turn: make(chan grant, 1)}
		q.waiters = append(q.waiters, w)
		c.mu.Unlock()
		select {
		case g := <-w.turn:
			if g.lock != nil {
				return g.lock, handedOff, nil
			}
			listed = g.listed
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

	l, how, listed, err := c.contend(ctx, name, k, q, ttl, opt, listed)
	if err != nil {
		c.advance(k, q, listed)
		return nil, how, err
	}
	return l, how, nil
}

// contend is the head of the queue trying for the lock in Redis until it has it or ctx ends.
// When it finds the lock held, it joins the lock's list of waiting clients and sleeps until the
// lock is reserved for it (a message naming this client), looking again at least every recheck.
// listed says the client is (or may be) in that list; with it set, contend first waits for its
// reservation instead of trying at once.
func (c *Client) contend(ctx context.Context, name string, k keys, q *queue, ttl time.Duration, opt *Options, listed bool) (l *Lock, how outcome, stillListed bool, err error) {
	how = firstTry
	if listed {
		how = contended
	}
	token := rand.Text()
	subscribed := false
	tryNow := !listed
	wait := recheck
	for {
		attempted := tryNow
		// Take the notification channel before anything else, so that a reservation
		// announced meanwhile still wakes us.
		c.mu.Lock()
		notify := q.notify
		c.mu.Unlock()
		if tryNow {
			start := time.Now()
			a, err := c.try(ctx, k, token, ttl, opt, true, listed)
			if err != nil {
				return nil, how, listed, attemptError(ctx, name, err, how == contended)
			}
			if a.obtained {
				c.mu.Lock()
				q.holder = token
				c.mu.Unlock()
				return c.newLock(name, k, token, a.fence, ttl, opt.fenced(), start), how, false, nil
			}
			how, listed, wait = contended, true, a.pttl
		}
		tryNow = true
		if !subscribed {
			subscribed = true
			if err := c.subscribe(ctx); err == nil && attempted {
				continue // a reservation made before the subscription went unheard: look now
			} else if err != nil && ctx.Err() != nil {
				return nil, how, listed, waitError(name, ctx.Err())
			}
			// Without a subscription the recheck timer below still wakes us.
		}
		if wait <= 0 || wait > recheck {
			wait = recheck
		}
		timer := time.NewTimer(wait)
		select {
		case <-notify:
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return nil, how, listed, waitError(name, ctx.Err())
		}
		timer.Stop()
		wait = recheck
	}
}

// advance gives the turn to the next waiter, or marks the queue idle. listed says the client is
// in the lock's list of waiting clients: the next waiter inherits the place; if nobody follows,
// the client leaves the list (passing on a reservation made for it meanwhile).
func (c *Client) advance(k keys, q *queue, listed bool) {
	c.mu.Lock()
	if len(q.waiters) > 0 {
		w := q.waiters[0]
		q.waiters = q.waiters[1:]
		w.granted = true
		w.turn <- grant{listed: listed}
		c.mu.Unlock()
		return
	}
	q.busy = false
	if c.queues[k.lock] == q {
		delete(c.queues, k.lock)
	}
	c.mu.Unlock()
	if listed {
		ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
		defer cancel()
		// Best effort: an entry left behind costs one reservation that expires unclaimed.
		_ = forgetScript.Run(ctx, c.rdb, k.all(), "", "", "", c.id, k.channel, reservation.Milliseconds()).Err()
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

// releaseQueued releases a lock held by the queue q: to the next waiting client if another is
// listed, else straight to this client's next waiter, else back to Redis. l.mu is held.
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
		reply, err := c.release(ctx, l.keys, l.token, "", 0, false)
		// Waiters that queued while the lock was being released get the turn now.
		c.advance(l.keys, q, false)
		if err != nil {
			return fmt.Errorf("lock: release %q: %w", l.name, err)
		}
		if reply[0] < 0 {
			l.reportLost()
			return ErrNotHeld
		}
		return nil
	}

	token := rand.Text()
	start := time.Now()
	reply, err := c.release(ctx, l.keys, l.token, token, next.ttl, next.fenced)
	switch {
	case err != nil:
		next.turn <- grant{}
		return fmt.Errorf("lock: release %q: %w", l.name, err)
	case reply[0] == 1:
		c.mu.Lock()
		q.holder = token
		c.mu.Unlock()
		next.turn <- grant{lock: c.newLock(l.name, l.keys, token, reply[1], next.ttl, next.fenced, start)}
		return nil
	case reply[0] == 0:
		next.turn <- grant{listed: true}
		return nil
	case reply[0] == 2:
		next.turn <- grant{}
		return nil
	default:
		next.turn <- grant{}
		l.reportLost()
		return ErrNotHeld
	}
}

// errClosed means the Client was closed.
var errClosed = errors.New("lock: client closed")
