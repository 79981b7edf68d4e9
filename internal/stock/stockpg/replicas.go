package stockpg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/keyspace"
)

// Replicas is keyspace.Register on Postgres, the table replicas (migration 9), and says which
// database the replicas serve.
type Replicas struct {
	pool *pgxpool.Pool
}

var _ keyspace.Register = (*Replicas)(nil)

// NewReplicas returns the register over pool.
func NewReplicas(pool *pgxpool.Pool) *Replicas { return &Replicas{pool: pool} }

// Owner returns the identity of the database, which the Redis key space is bound to: the
// cluster's system identifier and the database's oid. A physical standby has both of its
// primary's, so a failover or a switchover keeps it; any copy is another database (a dump
// restored, CREATE DATABASE ... TEMPLATE, a logical replica), and so is the same database after
// pg_upgrade, which makes a new cluster. Its name is the database's, and the server's address
// when the connection has one. Errors: the database's.
func (r *Replicas) Owner(ctx context.Context) (keyspace.Owner, error) {
	var o keyspace.Owner
	err := r.pool.QueryRow(ctx, `
		SELECT s.system_identifier::text || '/' || d.oid::text,
		       current_database() || coalesce(' at ' || host(inet_server_addr()) || ':' || inet_server_port(), '')
		FROM pg_control_system() s, pg_database d
		WHERE d.datname = current_database()`).Scan(&o.ID, &o.Name)
	if err != nil {
		return keyspace.Owner{}, dbError("read the database's identity", err)
	}
	return o, nil
}

// Beat implements keyspace.Register: one statement that records the replica and reads the
// others, by Postgres's clock.
func (r *Replicas) Beat(ctx context.Context, self keyspace.Replica, window time.Duration) ([]keyspace.Replica, error) {
	rows, _ := r.pool.Query(ctx, `
		WITH beat AS (
			INSERT INTO replicas (id, host, prefix, redis, lock_space) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO UPDATE SET host = excluded.host, prefix = excluded.prefix, redis = excluded.redis,
				lock_space = excluded.lock_space, seen_at = now()
			RETURNING id, host, prefix, redis, lock_space, seen_at
		)
		SELECT id, host, prefix, redis, lock_space AS space, seen_at AS seen FROM beat
		UNION ALL
		SELECT id, host, prefix, redis, lock_space, seen_at FROM replicas WHERE id <> $1 AND seen_at > now() - $6::interval`,
		self.ID, self.Host, self.Prefix, self.Redis, self.Space, window)
	running, err := pgx.CollectRows(rows, pgx.RowToStructByName[keyspace.Replica])
	if err != nil {
		return nil, dbError("record the replica", err)
	}
	return running, nil
}

// Leave implements keyspace.Register. It also forgets replicas not heard from for a day (those
// that died without leaving), so that the table holds what is running and what stopped
// recently.
func (r *Replicas) Leave(ctx context.Context, id string) error {
	if _, err := r.pool.Exec(ctx, `DELETE FROM replicas WHERE id = $1 OR seen_at < now() - interval '1 day'`, id); err != nil {
		return dbError(fmt.Sprintf("forget replica %s", id), err)
	}
	return nil
}
