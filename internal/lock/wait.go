package lock

import (
	"context"
	"crypto/rand"
	"strconv"
	"time"
)

// waiter is one Obtain with Options.Wait, from before its first attempt until it returns.
type waiter struct {
	// id is the client's id and a sequence number: it names the waiter in the lock's line and
	// in the grant message, and is never used again once the wait is over.
	id string
	// granted receives the grant announced for the waiter. It is buffered so that the
	// subscription never blocks on a waiter; a waiter is given a lock at most once, so one
	// slot is enough.
	granted chan grant
}

// grant is an announced grant: the fencing token, and the last holder's note.
type grant struct {
	fence int64
	note  string
}

// obtainWaiting is Obtain with Options.Wait. The waiter makes its own attempts: when one finds
// the lock held, the script puts the waiter's entry at the back of the lock's line, and the
// waiter sleeps until the holder ahead of it gives it the lock — a message naming the waiter
// and its fencing token — or until it is time to look again (at most every recheck, sooner if
// the holder's lease ends sooner), in case the message was lost. held reports whether the lock
// was ever found held by someone else.
//
// Errors follow attemptError and waitError: a wait ends with ErrNotObtained only after an
// attempt of this waiter was answered "held"; a deadline that strikes while Redis has not yet
// answered its first attempt is the deadline's error.
func (c *Client) obtainWaiting(ctx context.Context, name string, ttl time.Duration, opt *Options) (l *Lock, held bool, err error) {
	k := keysFor(name)
	w := &waiter{id: c.id + "-" + strconv.FormatUint(c.seq.Add(1), 36), granted: make(chan grant, 1)}
	token := rand.Text()
	// The entry stays the same for the whole wait: the scripts find it, and take it out, by
	// value, and a holder sets the lock to what it says.
	self := orphan{token: token, entry: w.id + " " + token + " " + strconv.FormatInt(ttl.Milliseconds(), 10) + " " + flag(opt.fenced())}
	// Registered before the first attempt: the lock may be given to the waiter, and the
	// message sent, before that attempt's reply is back.
	c.mu.Lock()
	c.waiters[w.id] = w
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.waiters, w.id)
		c.mu.Unlock()
	}()
	c.sweep(ctx, k)

	var since time.Time // the start of the last attempt that found the lock held
	askedToListen := false
	for {
		// A grant made after an attempt that began while the client was listening is heard;
		// one made before the client listened is not, and needs another look.
		listening := c.listening()
		start := time.Now()
		a, err := c.try(ctx, k, token, ttl, opt, self.entry)
		if err != nil {
			// The attempt may have put the waiter in line, or got it the lock.
			c.abandon(k, self)
			return nil, held, attemptError(ctx, name, err, held)
		}
		if a.obtained {
			return c.newLock(name, k, token, a.fence, a.note, ttl, start), held, nil
		}
		// A grant to this waiter can only follow this attempt, so a lease counted from start
		// ends no later than the one the holder will set.
		held, since = true, start
		if !listening && !askedToListen {
			askedToListen = true
			if err := c.subscribe(ctx); err == nil {
				continue
			} else if ctx.Err() != nil {
				c.abandon(k, self)
				return nil, held, waitError(name, ctx.Err())
			}
			// Without a subscription the timer below still wakes the waiter.
		}
		wait := c.recheck
		if a.pttl >= 0 {
			wait = min(wait, max(a.pttl, time.Millisecond))
		}
		timer := time.NewTimer(wait)
		select {
		case g := <-w.granted:
			timer.Stop()
			return c.newLock(name, k, token, g.fence, g.note, ttl, since), held, nil
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			// Leave the line, passing on the lock if it was given to this waiter meanwhile.
			c.abandon(k, self)
			return nil, held, waitError(name, ctx.Err())
		}
	}
}
