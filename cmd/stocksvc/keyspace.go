package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/keyspace"
)

// How the Redis key space is kept this database's, and the lock space one (package keyspace,
// docs/operations.md "Redis key spaces"): every client's key space under STOCKSVC_REDIS_PREFIX
// is bound to the database — checked as the replica starts, on every new connection (but a
// Cluster's), and at every beat of the watch — and the watch records in Postgres which lock
// space the replica takes its locks in.

// redisClients opens the service's Redis clients — the one for the views and the locks, and in
// redlock mode a client of each node for the product locks — each with its key space bound to
// owner, and the watch over them, which records the replica in register. Nothing is dialled.
func redisClients(cfg config, owner keyspace.Owner, register keyspace.Register, log *slog.Logger) (rdb redis.UniversalClient, nodes []*redis.Client, watch *keyspace.Watch, err error) {
	opts, err := parseRedisURL(cfg.RedisURL, cfg.RedisMode)
	if err != nil {
		return nil, nil, nil, err
	}
	var watched []keyspace.Node
	// A Cluster's connections reach one node each, and the binding lives on one of them: its
	// client waits for the watch's check instead (keyspace.Options).
	b := keyspace.New(cfg.RedisPrefix, owner, keyspace.Options{PerConnection: opts.cluster == nil})
	switch {
	case opts.failover != nil:
		opts.failover.OnConnect = b.OnConnect
	case opts.single != nil:
		opts.single.OnConnect = b.OnConnect
	}
	rdb = opts.client()
	rdb.AddHook(b)
	watched = append(watched, keyspace.Node{Client: rdb, Binding: b, Locks: opts.nodes == nil})
	for _, o := range opts.nodes {
		nb := keyspace.New(cfg.RedisPrefix, owner, keyspace.Options{PerConnection: true})
		no := *o
		no.OnConnect = nb.OnConnect
		n := redis.NewClient(&no)
		n.AddHook(nb)
		nodes = append(nodes, n)
		watched = append(watched, keyspace.Node{Client: n, Binding: nb, Locks: true})
	}
	host, _ := os.Hostname() // for people reading the replicas table; "" if unknown
	watch = keyspace.NewWatch(keyspace.Config{
		Self:     keyspace.Replica{ID: rand.Text(), Host: host, Prefix: cfg.RedisPrefix, Redis: maskDSN(cfg.RedisURL)},
		Nodes:    watched,
		Register: register,
		Every:    lockSpaceBeat,
		Logger:   log,
	})
	return rdb, nodes, watch, nil
}

// lockSpaceBeat is how often a replica checks its key spaces and records its lock space: a
// key space lost without a reconnect (FLUSHALL, a deleted key) is bound again within it, and a
// replica that died is taken for stopped after three.
const lockSpaceBeat = 5 * time.Second

// checkRedis checks the binding of every Redis key space of the replica, which is also its
// question whether Redis answers: nil when Redis — in redlock mode, a quorum of the nodes —
// answered with key spaces of this database. A key space bound to another database is an error
// that says what to do (keyspace.ErrForeign).
func (d dependencies) checkRedis(ctx context.Context) error {
	errs := d.watch.Check(ctx)
	for _, err := range errs {
		if errors.Is(err, keyspace.ErrForeign) {
			return foreign(err)
		}
	}
	if d.nodes == nil {
		return errs[0]
	}
	// The views' client (errs[0]) is the first node's: the lock nodes decide, as a quorum.
	return quorum(errs[1:])
}

// foreign says what to do about err, a key space bound to another database.
func foreign(err error) error {
	return fmt.Errorf("%w. Two deployments must not share a Redis key prefix: give this one a prefix of its own (STOCKSVC_REDIS_PREFIX). "+
		"If that database was this deployment's before it moved (pg_upgrade, a restore: its identity changed), stop every replica and delete the keys under the prefix, or use a new one",
		err)
}

// settleLockSpace waits, as the replica starts, until no running replica of its database takes
// its locks in another lock space (see keyspace.Watch.Settle), and says what to do if ctx ends
// first.
func (d dependencies) settleLockSpace(ctx context.Context) error {
	err := d.watch.Settle(ctx)
	switch {
	case errors.Is(err, keyspace.ErrSplit):
		return fmt.Errorf("%w. Every replica of a database must use the same Redis (REDIS_URL, STOCKSVC_REDIS_MODE) and the same STOCKSVC_REDIS_PREFIX", err)
	case errors.Is(err, keyspace.ErrForeign):
		return foreign(err)
	}
	return err
}
