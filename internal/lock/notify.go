package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// errClosed means the Client was closed.
var errClosed = errors.New("lock: client closed")

// subscription is a Client's one pattern subscription to grant messages. Its goroutine is
// owned by the Client: Close stops it and waits for it.
type subscription struct {
	ps    *redis.PubSub
	ready chan struct{} // closed once the subscription is confirmed (err then set)
	err   error
	done  chan struct{} // closed when the goroutine has returned
}

// subscribe makes sure the client listens to grant messages, waiting for the first
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
		// go-redis reconnects and resubscribes by itself; grants announced meanwhile are
		// found by the waiters' next look.
		prefix := c.id + "-"
		for msg := range s.ps.Channel() {
			// "<waiter id> <fence> <note>": the waiter the lock was given to, its fencing
			// token, and the last holder's note (possibly empty, possibly with spaces). Every
			// client hears every grant in its namespace; only the waiter's own client has
			// anything to do.
			parts := strings.SplitN(msg.Payload, " ", 3)
			if len(parts) < 2 || !strings.HasPrefix(parts[0], prefix) {
				continue
			}
			f, err := strconv.ParseInt(parts[1], 10, 64)
			if err != nil {
				continue // not ours to read; the waiter finds its token on its next look
			}
			g := grant{fence: f}
			if len(parts) == 3 {
				g.note = parts[2]
			}
			c.deliver(parts[0], g)
		}
	}()
	return s
}

// listening reports, without waiting, whether the client's subscription is confirmed.
func (c *Client) listening() bool {
	c.mu.Lock()
	s := c.sub
	c.mu.Unlock()
	if s == nil {
		return false
	}
	select {
	case <-s.ready:
		return s.err == nil
	default:
		return false
	}
}

func (s *subscription) close() error {
	err := s.ps.Close()
	<-s.done
	return err
}

// deliver tells the waiter id, if it still waits, that the lock was given to it.
func (c *Client) deliver(id string, g grant) {
	c.mu.Lock()
	w := c.waiters[id]
	c.mu.Unlock()
	if w != nil {
		select {
		case w.granted <- g:
		default: // a duplicate: the first is still there to be read
		}
	}
}

// escapeGlob quotes the characters PSUBSCRIBE patterns treat specially.
func escapeGlob(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`, `]`, `\]`).Replace(s)
}
