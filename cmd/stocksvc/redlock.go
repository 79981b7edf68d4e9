package main

import (
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
)

// STOCKSVC_REDIS_MODE=redlock puts the product locks on a Redlock over every node REDIS_URL
// names (each node's client made by redisClients). Everything else that uses Redis — the views
// cache and its rebuild lock — stays on the first node: a view is a hint that is rebuilt from
// Postgres whenever it is missing or stale, so its correctness never depended on Redis keeping
// anything, and spreading it over a quorum would buy nothing but round trips.

// minRedlockNodes is the fewest nodes a Redlock deployment takes: fewer survive the loss of
// none, which is the one thing Redlock adds over a single node.
const minRedlockNodes = 3

// redlockOptions reads a redlock REDIS_URL: redis://[[user]:password@]host:port[/db]?addr=
// host:port&addr=..., every node with the same credentials, database and options. Redlock's
// rounds are its retries, so go-redis does not retry a node's commands (MaxRetries -1): a
// retried command on a node that is down would make every round wait the whole node timeout.
func redlockOptions(redisURL string, ownDialRetries bool) (redisOptions, error) {
	u, err := url.Parse(redisURL)
	if err != nil {
		return redisOptions{}, fmt.Errorf("parse REDIS_URL for redlock: %w", err)
	}
	q := u.Query()
	addrs := q["addr"]
	q.Del("addr")
	u.RawQuery = q.Encode()
	first, err := redis.ParseURL(u.String())
	if err != nil {
		return redisOptions{}, fmt.Errorf("parse REDIS_URL for redlock: %w", err)
	}
	tune(&first.ContextTimeoutEnabled, &first.DialerRetries, ownDialRetries)
	nodes := []*redis.Options{first}
	for _, addr := range addrs {
		n := *first
		n.Addr = addr
		nodes = append(nodes, &n)
	}
	if len(nodes) < minRedlockNodes {
		return redisOptions{}, fmt.Errorf("parse REDIS_URL for redlock: %d nodes, want at least %d (add them as ?addr=host:port&addr=...)", len(nodes), minRedlockNodes)
	}
	seen := map[string]bool{}
	for i, n := range nodes {
		if seen[n.Addr] {
			return redisOptions{}, fmt.Errorf("parse REDIS_URL for redlock: node %s given twice", n.Addr)
		}
		seen[n.Addr] = true
		lockNode := *n
		lockNode.MaxRetries = -1
		nodes[i] = &lockNode
	}
	return redisOptions{single: first, nodes: nodes}, nil
}

// quorum is the outcome of asking every Redlock node, from each node's: nil when a majority
// answered. A Redlock works with a minority of its nodes down, so start-up does not wait for
// them.
func quorum(errs []error) error {
	answered := 0
	for _, err := range errs {
		if err == nil {
			answered++
		}
	}
	if need := len(errs)/2 + 1; answered < need {
		return fmt.Errorf("%d of %d redlock nodes answered, %d needed: %w", answered, len(errs), need, errors.Join(errs...))
	}
	return nil
}

// redlockLocker returns the product locker over nodes. A node's requests are bounded by a
// twentieth of the lease, between 50ms and 500ms: far below the lease, so that a node that
// does not answer costs little of it, and above what a live node on a busy machine needs.
func redlockLocker(cfg config, nodes []*redis.Client, obs lock.Observer) (*stocklock.Locker, error) {
	r, err := lock.NewRedlock(nodes, lock.RedlockOptions{
		NodeTimeout: min(max(cfg.LockTTL/20, 50*time.Millisecond), 500*time.Millisecond),
		Observer:    obs,
	})
	if err != nil {
		return nil, fmt.Errorf("redlock: %w", err)
	}
	return stocklock.NewRedlock(r, cfg.RedisPrefix, stocklock.Config{TTL: cfg.LockTTL, Wait: cfg.LockWait, Retry: cfg.retry}), nil
}
