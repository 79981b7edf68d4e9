package main

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestDepMetrics reads the pools' and the standbys' gauges over this test's Postgres and
// Redis: a connection in use shows as acquired, and a Postgres without standbys has 0 in sync.
func TestDepMetrics(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	rdb, _ := testenv.Redis(t)
	reg := prometheus.NewRegistry()
	reg.MustRegister(newDepMetrics(pool, rdb))
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels []string
		ok     func(float64) bool
	}{
		{"stocksvc_db_pool_connections", []string{"state", "acquired"}, func(v float64) bool { return v == 1 }},
		{"stocksvc_db_pool_max_connections", nil, func(v float64) bool { return v == float64(pool.Config().MaxConns) }},
		{"stocksvc_db_pool_acquires_total", nil, func(v float64) bool { return v >= 1 }},
		{"stocksvc_db_standbys", []string{"sync", "sync"}, func(v float64) bool { return v == 0 }},
		{"stocksvc_redis_pool_connections", []string{"state", "total"}, func(v float64) bool { return v >= 1 }},
	} {
		if v := testenv.Metric(t, reg, c.name, c.labels...); !c.ok(v) {
			t.Errorf("%s%v = %v", c.name, c.labels, v)
		}
	}
}
