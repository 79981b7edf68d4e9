package main

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// depMetrics exports what the dashboard's database and Redis rows show (issue #34, item 3):
// this replica's Postgres pool and Redis client pool, read from the pools' own counters at
// each scrape (no query), and the primary's standbys, read from pg_stat_replication at most
// once a second (one query on the pool the purchases use, which a flood of scrapes must not
// turn into a flood of queries).
type depMetrics struct {
	pool *pgxpool.Pool
	rdb  redis.UniversalClient

	pgConns, pgMax, pgAcquires, pgWaited, pgWaitSeconds, pgCanceled *prometheus.Desc
	redisConns, redisHits, redisMisses, redisTimeouts               *prometheus.Desc
	standbys                                                        *prometheus.Desc

	mu     sync.Mutex
	now    func() time.Time
	at     time.Time
	sync   float64 // standbys in sync (sync or quorum); -1: unknown
	others float64 // the other standbys (async, potential); -1: unknown
}

// standbysEvery is how often, at most, pg_stat_replication is read.
const standbysEvery = time.Second

func newDepMetrics(pool *pgxpool.Pool, rdb redis.UniversalClient) *depMetrics {
	return &depMetrics{
		pool: pool, rdb: rdb, now: time.Now,
		pgConns: prometheus.NewDesc("stocksvc_db_pool_connections",
			"This replica's Postgres connections, by state: acquired (in use), idle, constructing.", []string{"state"}, nil),
		pgMax: prometheus.NewDesc("stocksvc_db_pool_max_connections",
			"The most Postgres connections this replica's pool opens.", nil, nil),
		pgAcquires: prometheus.NewDesc("stocksvc_db_pool_acquires_total",
			"Connections taken from this replica's Postgres pool.", nil, nil),
		pgWaited: prometheus.NewDesc("stocksvc_db_pool_acquires_waited_total",
			"Connections taken from this replica's Postgres pool that had to wait: none was idle, and the pool was full or still connecting.", nil, nil),
		pgWaitSeconds: prometheus.NewDesc("stocksvc_db_pool_acquire_seconds_total",
			"Time spent taking connections from this replica's Postgres pool, waits included.", nil, nil),
		pgCanceled: prometheus.NewDesc("stocksvc_db_pool_acquires_cancelled_total",
			"Connection requests to this replica's Postgres pool given up because their context ended first (a request's deadline, a lock's wait).", nil, nil),
		redisConns: prometheus.NewDesc("stocksvc_redis_pool_connections",
			"This replica's Redis connections, by state: idle, or all (total).", []string{"state"}, nil),
		redisHits: prometheus.NewDesc("stocksvc_redis_pool_hits_total",
			"Redis commands that found an idle connection in this replica's pool.", nil, nil),
		redisMisses: prometheus.NewDesc("stocksvc_redis_pool_misses_total",
			"Redis commands that found no idle connection in this replica's pool and opened or waited for one.", nil, nil),
		redisTimeouts: prometheus.NewDesc("stocksvc_redis_pool_timeouts_total",
			"Redis commands that waited for a connection of this replica's pool past its pool timeout.", nil, nil),
		standbys: prometheus.NewDesc("stocksvc_db_standbys",
			"Standbys streaming from the Postgres this replica writes to, by sync: sync (synchronous: sync or quorum) or async (the others), from pg_stat_replication at most once a second; -1 when Postgres did not answer within a second. With synchronous replication required, sync at 0 means commits wait.", []string{"sync"}, nil),
	}
}

func (m *depMetrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.pgConns, m.pgMax, m.pgAcquires, m.pgWaited, m.pgWaitSeconds, m.pgCanceled,
		m.redisConns, m.redisHits, m.redisMisses, m.redisTimeouts, m.standbys} {
		ch <- d
	}
}

func (m *depMetrics) Collect(ch chan<- prometheus.Metric) {
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	counter := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v)
	}
	if m.pool != nil {
		s := m.pool.Stat()
		gauge(m.pgConns, float64(s.AcquiredConns()), "acquired")
		gauge(m.pgConns, float64(s.IdleConns()), "idle")
		gauge(m.pgConns, float64(s.ConstructingConns()), "constructing")
		gauge(m.pgMax, float64(s.MaxConns()))
		counter(m.pgAcquires, float64(s.AcquireCount()))
		counter(m.pgWaited, float64(s.EmptyAcquireCount()))
		counter(m.pgWaitSeconds, s.AcquireDuration().Seconds())
		counter(m.pgCanceled, float64(s.CanceledAcquireCount()))
		inSync, others := m.readStandbys()
		gauge(m.standbys, inSync, "sync")
		gauge(m.standbys, others, "async")
	}
	if m.rdb != nil {
		s := m.rdb.PoolStats()
		gauge(m.redisConns, float64(s.IdleConns), "idle")
		gauge(m.redisConns, float64(s.TotalConns), "total")
		counter(m.redisHits, float64(s.Hits))
		counter(m.redisMisses, float64(s.Misses))
		counter(m.redisTimeouts, float64(s.Timeouts))
	}
}

// readStandbys returns the standbys in sync and the others, from the last second's read.
func (m *depMetrics) readStandbys() (inSync, others float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.at.IsZero() && m.now().Sub(m.at) < standbysEvery {
		return m.sync, m.others
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	// sync_state is readable by a role without pg_read_all_stats only for its own
	// connections; the service's role is the database owner, and a standby's row it cannot
	// read counts as async.
	err := m.pool.QueryRow(ctx, `
		SELECT (count(*) FILTER (WHERE sync_state IN ('sync', 'quorum')))::float8,
		       (count(*) FILTER (WHERE sync_state IS NULL OR sync_state NOT IN ('sync', 'quorum')))::float8
		  FROM pg_stat_replication`).Scan(&m.sync, &m.others)
	if err != nil {
		m.sync, m.others = -1, -1
	}
	m.at = m.now()
	return m.sync, m.others
}
