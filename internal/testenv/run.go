package testenv

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// DefaultPrefix starts the name of every database and Redis key prefix the tests create,
// unless EnvPrefix sets another.
const DefaultPrefix = "stocksvc_test_"

// prefixRule keeps a prefix usable as it is in a database name (63 bytes at most, with the 17
// that names add), a Redis client name and a SCAN pattern, and easy to type into psql.
var prefixRule = regexp.MustCompile(`^[a-z][a-z0-9_]{0,39}$`)

// ownerLockClass is the first key of the advisory lock each run holds on the Postgres server
// for as long as it runs; the second is its run id. Another run's sweep reads pg_locks, which
// covers every database of the server (an advisory lock itself only conflicts within one), so
// runs whose entry points are different databases still see each other.
const ownerLockClass = 0x5707c5

// names are what one test binary — one run — calls what it creates on the shared servers:
// the prefix, the run's id, then the thing's own part. Runs that share servers never collide,
// and a run can tell what earlier runs under the same prefix left behind.
type names struct {
	prefix   string
	run      uint32
	database *regexp.Regexp // a database of some run under prefix; the run id is its first group
	key      *regexp.Regexp // a Redis key of some run under prefix; the same
}

// namesFromEnv returns the names of a new run under EnvPrefix, or DefaultPrefix when unset.
func namesFromEnv() (names, error) {
	prefix := os.Getenv(EnvPrefix)
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !prefixRule.MatchString(prefix) {
		return names{}, fmt.Errorf("%s=%q: want a lowercase letter, then up to 39 lowercase letters, digits or underscores", EnvPrefix, prefix)
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return newNames(prefix, binary.BigEndian.Uint32(b[:])), nil
}

func newNames(prefix string, run uint32) names {
	p := regexp.QuoteMeta(prefix)
	return names{
		prefix:   prefix,
		run:      run,
		database: regexp.MustCompile(`^` + p + `([0-9a-f]{8})_(?:tpl|[0-9a-f]{8})$`),
		key:      regexp.MustCompile(`^` + p + `([0-9a-f]{8})_[0-9a-f]{8}:`),
	}
}

// owner is the run's name as a Redis client: a run is alive while a connection of that name
// is open.
func (n names) owner() string { return ownerName(n.prefix, n.run) }

func ownerName(prefix string, run uint32) string { return fmt.Sprintf("%s%08x", prefix, run) }

// runPrefix starts every name of this run.
func (n names) runPrefix() string { return n.owner() + "_" }

func (n names) template() string     { return n.runPrefix() + "tpl" }
func (n names) newDatabase() string  { return n.runPrefix() + randomHex(4) }
func (n names) newKeyPrefix() string { return n.runPrefix() + randomHex(4) + ":" }

// runOf returns the run that made name, by pattern (n.database or n.key), if a run under the
// same prefix made it.
func runOf(pattern *regexp.Regexp, name string) (uint32, bool) {
	m := pattern.FindStringSubmatch(name)
	if m == nil {
		return 0, false
	}
	run, err := strconv.ParseUint(m[1], 16, 32)
	return uint32(run), err == nil
}

// own marks the run alive on both servers, before it creates anything there: an advisory lock
// held on a connection of its own to Postgres, and a Redis connection named after it. Both end
// with the process, however it ends, so that a later run's sweep can tell its leftovers.
func (s *servers) own(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.postgresURL)
	if err != nil {
		return fmt.Errorf("postgres at %s: %w", redact(s.postgresURL), err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1, $2)`, int32(ownerLockClass), int32(s.names.run)); err != nil {
		_ = conn.Close(ctx)
		return fmt.Errorf("take the run's lock: %w", err)
	}
	s.pgOwner = conn

	opts, err := redis.ParseURL(s.redisURL)
	if err != nil {
		return fmt.Errorf("parse %s: %w", EnvRedisURL, err)
	}
	opts.ClientName = s.names.owner()
	s.rdb = redis.NewClient(opts)
	s.redisOwner = s.rdb.Conn()
	if err := s.redisOwner.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", redact(s.redisURL), err)
	}
	return nil
}

// sweep removes what earlier runs under the same prefix left on the servers when they ended
// without cleaning up (killed, interrupted, or stopped by -timeout): the databases of every
// run that no longer holds its lock, and the Redis keys of every run with no connection open.
// What exists is listed before who is alive, so a run that starts meanwhile is not taken for
// dead. It returns how many databases and keys it removed.
func (s *servers) sweep(ctx context.Context) (dropped, deleted int, err error) {
	dropped, pgErr := s.sweepDatabases(ctx)
	deleted, redisErr := s.sweepKeys(ctx)
	return dropped, deleted, errors.Join(pgErr, redisErr)
}

func (s *servers) sweepDatabases(ctx context.Context) (int, error) {
	stale := map[uint32][]string{}
	all, err := databasesUnder(ctx, s.admin, s.names.prefix)
	if err != nil {
		return 0, err
	}
	for _, name := range all {
		if run, ok := runOf(s.names.database, name); ok && run != s.names.run {
			stale[run] = append(stale[run], name)
		}
	}
	if len(stale) == 0 {
		return 0, nil
	}
	rows, _ := s.admin.Query(ctx, `SELECT objid::int8 FROM pg_locks WHERE locktype = 'advisory' AND classid = $1::int8::oid AND objsubid = 2`, int64(ownerLockClass))
	alive, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, fmt.Errorf("list the runs' locks: %w", err)
	}
	for _, run := range alive {
		delete(stale, uint32(run))
	}
	dropped := 0
	for _, dbs := range stale {
		for _, name := range dbs {
			if err := dropDatabase(ctx, s.admin, name); err != nil {
				return dropped, err
			}
			dropped++
		}
	}
	return dropped, nil
}

func (s *servers) sweepKeys(ctx context.Context) (int, error) {
	stale := map[uint32][]string{}
	iter := s.rdb.Scan(ctx, 0, escapeGlob(s.names.prefix)+"*", 1000).Iterator()
	for iter.Next(ctx) {
		if run, ok := runOf(s.names.key, iter.Val()); ok && run != s.names.run {
			stale[run] = append(stale[run], iter.Val())
		}
	}
	if err := iter.Err(); err != nil {
		return 0, fmt.Errorf("scan keys: %w", err)
	}
	if len(stale) == 0 {
		return 0, nil
	}
	clients, err := s.rdb.ClientList(ctx).Result()
	if err != nil {
		return 0, fmt.Errorf("list redis clients: %w", err)
	}
	connected := map[string]bool{}
	for _, field := range strings.Fields(clients) { // one line per client, "name=..." among its fields
		if name, ok := strings.CutPrefix(field, "name="); ok {
			connected[name] = true
		}
	}
	for run := range stale {
		if connected[ownerName(s.names.prefix, run)] {
			delete(stale, run)
		}
	}
	deleted := 0
	for _, keys := range stale {
		n, err := s.rdb.Unlink(ctx, keys...).Result()
		deleted += int(n)
		if err != nil {
			return deleted, fmt.Errorf("delete keys: %w", err)
		}
	}
	return deleted, nil
}

// cleanUp drops every database and deletes every key of this run that is still there (its
// template, and whatever a test created and left), then lets go of the servers.
func (s *servers) cleanUp(ctx context.Context) error {
	var errs []error
	if s.admin != nil && s.pgOwner != nil {
		dbs, err := databasesUnder(ctx, s.admin, s.names.runPrefix())
		errs = append(errs, err)
		for _, name := range dbs {
			errs = append(errs, dropDatabase(ctx, s.admin, name))
		}
	}
	if s.redisOwner != nil {
		_, err := deleteKeys(ctx, s.rdb, s.names.runPrefix())
		errs = append(errs, err, s.redisOwner.Close())
	}
	if s.rdb != nil {
		errs = append(errs, s.rdb.Close())
	}
	if s.pgOwner != nil {
		errs = append(errs, s.pgOwner.Close(ctx))
	}
	return errors.Join(errs...)
}

// databasesUnder lists the databases whose names start with prefix.
func databasesUnder(ctx context.Context, admin *pgxpool.Pool, prefix string) ([]string, error) {
	rows, _ := admin.Query(ctx, `SELECT datname FROM pg_database WHERE starts_with(datname, $1)`, prefix)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list databases under %s: %w", prefix, err)
	}
	return names, nil
}

func dropDatabase(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, `DROP DATABASE IF EXISTS `+pgx.Identifier{name}.Sanitize()+` WITH (FORCE)`); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	return nil
}

// deleteKeys deletes every key that starts with prefix, and nothing else, and returns how
// many it deleted.
func deleteKeys(ctx context.Context, rdb redis.UniversalClient, prefix string) (int, error) {
	iter := rdb.Scan(ctx, 0, escapeGlob(prefix)+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return 0, fmt.Errorf("scan keys under %s: %w", prefix, err)
	}
	deleted := 0
	for _, k := range keys {
		if err := rdb.Unlink(ctx, k).Err(); err != nil {
			return deleted, fmt.Errorf("delete key %s: %w", k, err)
		}
		deleted++
	}
	return deleted, nil
}
