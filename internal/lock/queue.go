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

	// While the client is listed among the lock's waiters in Redis: ticket is the token its
	// ticket names (the head's), since a moment known to precede any grant to it, and
	// delivered the grant announced for it, if one was.
	ticket    string
	since     time.Time
	delivered *delivery

	// inCall says the head is waiting for the reply to an attempt, failed that its last
	// attempt got no reply, and answered is when Redis last replied to one. A waiter whose
	// time runs out while the head's attempt is unanswered or has failed, with no reply since
	// it began, has learned nothing about the lock: Redis is not answering, which it must not
	// report as the lock being busy.
	inCall   bool
	failed   bool
	answered time.Time
}

// delivery is an announced grant: the lock was set to token, with fencing token fence.
type delivery struct {
	token string
	fence int64
}

// waiter is one Obtain waiting for its turn.
type waiter struct {
	ttl     time.Duration
	fenced  bool
	turn    chan grant // buffered: the grant never blocks the giver
	granted bool       // a grant is promised; it may still be on its way
}

// grant gives a waiter its turn: the lock itself, handed off, or the right to contend for it;
// or, with err, the failure of the attempt ahead of it, which it shares instead of a turn.
type grant struct {
	lock *Lock
	// listed says the client is in the lock's list of waiting clients with the queue's
	// ticket: the new head waits to be given the lock rather than trying at once.
	listed bool
	err    error
}

// obtainQueued is Obtain with Options.Wait.
func (c *Client) obtainQueued(ctx context.Context, name string, ttl time.Duration, opt *Options) (l *Lock, how outcome, err error) {
	k := keysFor(name)
	began := time.Now()
	c.mu.Lock()
	q := c.queues[k.lock]
	if q == nil {
		q = &queue{notify: make(chan struct{})}
		c.queues[k.lock] = q
	}
	defer func() {
		if errors.Is(err, ErrNotObtained) && c.unanswered(q, began) {
			err = fmt.Errorf("lock: obtain %q: Redis did not answer while this waited: %w", name, context.DeadlineExceeded)
		}
	}()
	listed := false
	if q.busy {
		w := &waiter{ttl: ttl, fenced: opt.fenced(), turn: make(chan grant, 1)}
		q.waiters = append(q.waiters, w)
		c.mu.Unlock()
		select {
		case g := <-w.turn:
			if g.err != nil {
				return nil, contended, g.err
			}
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
			// The turn was given as we gave up: pass it on (a shared failure is no turn).
			if g := <-w.turn; g.lock != nil {
				_ = g.lock.Release(ctx)
			} else if g.err == nil {
				c.advance(k, q, g.listed)
			}
			return nil, contended, waitError(name, ctx.Err())
		}
	} else {
		q.busy = true
		c.mu.Unlock()
	}

	l, how, listed, err = c.contend(ctx, name, k, q, ttl, opt, listed)
	if err != nil {
		if ctx.Err() == nil && !errors.Is(err, ErrNotObtained) {
			// Redis failed the head, after the redis client's own retries. The waiters
			// queued behind it would each meet the same Redis in turn, and those still
			// queued when their time ran out would be told the lock was busy: they share
			// the failure now instead. Waiters that arrive later try for themselves.
			c.failWaiters(q, err)
		}
		c.advance(k, q, listed)
		return nil, how, err
	}
	return l, how, nil
}

// unanswered reports whether a wait on q that began at began learned nothing about the lock:
// no waiter of this client holds it, the head's attempt is unanswered or failed, and Redis has
// not replied to an attempt since.
func (c *Client) unanswered(q *queue, began time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return q.holder == "" && (q.inCall || q.failed) && q.answered.Before(began)
}

// failWaiters ends the wait of every waiter queued on q with err.
func (c *Client) failWaiters(q *queue, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, w := range q.waiters {
		w.granted = true
		w.turn <- grant{err: err}
	}
	q.waiters = nil
}

// contend is the head of the queue trying for the lock in Redis until it has it or ctx ends.
// When it finds the lock held, it joins the lock's list of waiting clients with a ticket (its
// token) and sleeps until the lock is given to it — a message naming this client — looking
// again at least every recheck. listed says the client is listed already with the queue's
// ticket, which the head then takes over; it waits to be given the lock instead of trying.
func (c *Client) contend(ctx context.Context, name string, k keys, q *queue, ttl time.Duration, opt *Options, listed bool) (l *Lock, how outcome, stillListed bool, err error) {
	how = firstTry
	// A ticket on file is reused whatever the turn says: Redis may give the lock to it at any
	// moment (after a release whose reply was lost, say), and a head with another token would
	// then wait while the lock sat under a token nobody holds.
	c.mu.Lock()
	token := q.ticket
	if token == "" {
		token, listed = rand.Text(), false
	} else if listed {
		how = contended
	} else {
		listed = true // may be on file: leave the list when the lock is had, but try at once
	}
	// A head taking over a listed ticket waits to be given the lock, unless Redis has said
	// nothing about it for a recheck: then nobody may be left to give it (a lease that ran out
	// with no release, a grant lost in a stall), and a turn shorter than a recheck, handed on
	// and on while requests keep coming, would otherwise never look.
	stale := time.Since(q.answered) >= recheck
	c.mu.Unlock()
	subscribed := false
	tryNow := how != contended || stale
	wait := recheck
	for {
		attempted := tryNow
		// Take the notification channel and look for a grant before anything else, so that
		// a grant announced meanwhile is not missed.
		c.mu.Lock()
		notify := q.notify
		if d := q.delivered; d != nil && d.token == token {
			since := q.since
			c.clearTicket(q, token)
			c.mu.Unlock()
			return c.newLock(name, k, token, d.fence, ttl, opt.fenced(), since), contended, false, nil
		}
		c.mu.Unlock()
		if tryNow {
			start := time.Now()
			// The attempt may list the client with this token as its ticket, and the lock
			// may be given to it before the reply is back: record the ticket first.
			c.mu.Lock()
			q.ticket, q.since, q.inCall = token, start, true
			orphans := c.takeOrphans(k)
			c.mu.Unlock()
			c.sweep(ctx, k, orphans) // part of the attempt: waiters behind it wait on Redis here too
			a, err := c.try(ctx, k, token, ttl, opt, true, listed)
			c.mu.Lock()
			q.inCall, q.failed = false, err != nil
			if err == nil {
				q.answered = time.Now()
			}
			c.mu.Unlock()
			if err != nil {
				// The attempt may have listed the client, or granted it the lock: the
				// caller's advance withdraws the ticket and lets such a grant go.
				return nil, how, true, attemptError(ctx, name, err, how == contended)
			}
			if a.obtained {
				c.mu.Lock()
				c.clearTicket(q, token)
				c.mu.Unlock()
				return c.newLock(name, k, token, a.fence, ttl, opt.fenced(), start), how, false, nil
			}
			how, listed, wait = contended, true, a.pttl
		}
		tryNow = true
		if !subscribed {
			subscribed = true
			if err := c.subscribe(ctx); err == nil && attempted {
				continue // a grant announced before the subscription went unheard: look now
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

// clearTicket records that the head holding token holds the lock: the client is off the list.
// c.mu is held.
func (c *Client) clearTicket(q *queue, token string) {
	q.holder, q.ticket, q.delivered = token, "", nil
}

// advance gives the turn to the next waiter, or marks the queue idle. listed says the client is
// in the lock's list of waiting clients: the next waiter takes over the ticket; if nobody
// follows, the client leaves the list, passing the lock on if it was given to the ticket
// meanwhile.
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
	ticket := q.ticket
	q.busy, q.ticket, q.delivered = false, "", nil
	if c.queues[k.lock] == q {
		delete(c.queues, k.lock)
	}
	c.mu.Unlock()
	if listed {
		// The ticket is withdrawn (and a grant to it passed on), like an abandoned attempt.
		c.abandon(k, ticket)
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
	// The next waiter's token is its ticket if the lock goes to another client: it must be
	// known before the reply, since the lock may be given to it any time after the script.
	c.mu.Lock()
	q.ticket, q.since, q.delivered = token, start, nil
	c.mu.Unlock()
	reply, err := c.release(ctx, l.keys, l.token, token, next.ttl, next.fenced)
	switch {
	case err != nil:
		next.turn <- grant{}
		return fmt.Errorf("lock: release %q: %w", l.name, err)
	case reply[0] == 1:
		c.mu.Lock()
		c.clearTicket(q, token)
		c.mu.Unlock()
		next.turn <- grant{lock: c.newLock(l.name, l.keys, token, reply[1], next.ttl, next.fenced, start)}
		return nil
	case reply[0] == 0:
		c.mu.Lock()
		q.answered = time.Now() // Redis listed the next waiter just now: it can wait to be given it
		c.mu.Unlock()
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
