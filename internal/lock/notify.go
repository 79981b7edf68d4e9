package lock

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// subscription is a Client's one pattern subscription to release announcements. Its goroutine
// is owned by the Client: Close stops it and waits for it.
type subscription struct {
	ps    *redis.PubSub
	ready chan struct{} // closed once the subscription is confirmed (err then set)
	err   error
	done  chan struct{} // closed when the goroutine has returned
}

// subscribe makes sure the client listens to release announcements, waiting for the first
// confirmation. A failed subscription is retried by the next caller.
func (c *Client) subscribe(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return errClosed
	}
	if c.sub == nil {
		c.sub = c.startSubscription()
	}
	s := c.sub
	c.mu.Unlock()
	select {
	case <-s.ready:
		return s.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// startSubscription starts the subscription's goroutine, which subscribes. c.mu is held: the
// caller must not wait on Redis here, as every lock of the client shares that mutex, so the
// PubSub is made without a channel (no I/O) and the goroutine does the subscribing.
func (c *Client) startSubscription() *subscription {
	pattern := channelPrefix + escapeGlob(c.namespace) + "*"
	s := &subscription{ps: c.rdb.PSubscribe(context.Background()), ready: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err := s.ps.PSubscribe(ctx, pattern)
		if err == nil {
			_, err = s.ps.Receive(ctx)
		}
		cancel()
		if err != nil {
			s.err = fmt.Errorf("lock: subscribe to %s: %w", pattern, err)
			c.mu.Lock()
			if c.sub == s {
				c.sub = nil
			}
			c.mu.Unlock()
			_ = s.ps.Close()
			close(s.ready)
			return
		}
		close(s.ready)
		// go-redis reconnects and resubscribes by itself; announcements lost meanwhile are
		// covered by the waiters' lease timers.
		for msg := range s.ps.Channel() {
			// "<client id> <fence>": the client the lock was given to, and its fencing
			// token. Only that client's waiter has anything to do.
			id, fence, ok := strings.Cut(msg.Payload, " ")
			if !ok || id != c.id {
				continue
			}
			f, err := strconv.ParseInt(fence, 10, 64)
			if err != nil {
				continue // not ours to read; the waiter finds its token on its next look
			}
			c.deliver(strings.TrimPrefix(msg.Channel, channelPrefix), f)
		}
	}()
	return s
}

func (s *subscription) close() error {
	err := s.ps.Close()
	<-s.done
	return err
}

// deliver tells the head of name's queue, if this client has one, that the lock was given to
// its ticket with fencing token fence.
func (c *Client) deliver(name string, fence int64) {
	k := keysFor(name)
	c.mu.Lock()
	if q := c.queues[k.lock]; q != nil {
		q.answered = time.Now()
		q.delivered = &delivery{token: q.ticket, fence: fence}
		close(q.notify)
		q.notify = make(chan struct{})
	}
	c.mu.Unlock()
}

// escapeGlob quotes the characters PSUBSCRIBE patterns treat specially.
func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
