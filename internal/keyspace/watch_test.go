package keyspace_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stocksvc/stocksvc/internal/keyspace"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// logBuffer is what a replica's log says, safe for its goroutines.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// replica is a Watch of one replica of a database, with its client, metrics and log.
type replica struct {
	w   *keyspace.Watch
	reg *prometheus.Registry
	log *logBuffer
}

// newReplica watches a replica named id whose key space is prefix on the Redis at addr, and
// whose database's replicas record themselves in reg.
func newReplica(t *testing.T, id, addr, prefix string, register keyspace.Register, owner keyspace.Owner) *replica {
	t.Helper()
	rdb, b := guarded(t, addr, prefix, owner)
	r := &replica{reg: prometheus.NewRegistry(), log: &logBuffer{}}
	r.w = keyspace.NewWatch(keyspace.Config{
		Self:     keyspace.Replica{ID: id, Host: "host-" + id, Prefix: prefix, Redis: "redis://" + addr + "/0"},
		Nodes:    []keyspace.Node{{Client: rdb, Binding: b, Locks: true}},
		Register: register,
		// Long: the tests beat with Tick, and a replica is taken for stopped after three
		// beats without one, which no test should come near.
		Every:  10 * time.Second,
		Logger: slog.New(slog.NewTextHandler(r.log, nil)),
	})
	r.reg.MustRegister(r.w)
	return r
}

func (r *replica) spaces(t *testing.T) float64 {
	t.Helper()
	return testenv.Gauge(t, r.reg, "stocksvc_lock_spaces")
}

// database is a test database's register of replicas, and its identity.
func database(t *testing.T) (*stockpg.Replicas, keyspace.Owner) {
	t.Helper()
	reg := stockpg.NewReplicas(testenv.Pool(t))
	owner, err := reg.Owner(t.Context())
	if err != nil {
		t.Fatalf("the database's identity: %v", err)
	}
	return reg, owner
}

// TestDatabasesHaveIdentitiesOfTheirOwn: two databases of one server — one cloned from the
// other's template, as a copy would be — are two owners, and the same database is the same
// owner on every connection.
func TestDatabasesHaveIdentitiesOfTheirOwn(t *testing.T) {
	t.Parallel()
	reg1, one := database(t)
	_, two := database(t)
	if one.ID == two.ID || one.ID == "" {
		t.Errorf("two databases: owners %v and %v, want different ids", one, two)
	}
	if again, err := reg1.Owner(t.Context()); err != nil || again != one {
		t.Errorf("the same database again: %v, %v; want %v", again, err, one)
	}
	if !strings.HasPrefix(one.Name, testenv.NamePrefix(t)) {
		t.Errorf("owner name %q, want the database's name first", one.Name)
	}
}

// TestReplicasOnTwoPrefixesAreASplit: a replica of a database whose running replica takes its
// locks under another prefix does not settle at start (it names both prefixes), and once both
// run, each reports two lock spaces and says so, until one leaves.
func TestReplicasOnTwoPrefixesAreASplit(t *testing.T) {
	t.Parallel()
	rdb, p1 := testenv.Redis(t)
	_, p2 := testenv.Redis(t)
	register, owner := database(t)
	a := newReplica(t, "a", rdb.Options().Addr, p1, register, owner)
	b := newReplica(t, "b", rdb.Options().Addr, p2, register, owner)
	if err := a.w.Settle(t.Context()); err != nil {
		t.Fatalf("the first replica's start: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	err := b.w.Settle(ctx)
	cancel()
	var split *keyspace.SplitError
	if !errors.As(err, &split) || !errors.Is(err, keyspace.ErrSplit) {
		t.Fatalf("the second replica's start = %v, want *SplitError", err)
	}
	if len(split.Others) != 1 || split.Others[0].ID != "a" || !strings.Contains(err.Error(), `"`+p1+`"`) || !strings.Contains(err.Error(), `"`+p2+`"`) {
		t.Errorf("SplitError %q (others %v): want replica a, and both prefixes named", err, split.Others)
	}

	for range 2 {
		a.w.Tick(t.Context())
		b.w.Tick(t.Context())
	}
	for name, r := range map[string]*replica{"a": a, "b": b} {
		if got := r.spaces(t); got != 2 {
			t.Errorf("replica %s: stocksvc_lock_spaces = %v, want 2", name, got)
		}
		if !strings.Contains(r.log.String(), "replicas of this database take their locks in more than one lock space") {
			t.Errorf("replica %s does not say so; log:\n%s", name, r.log)
		}
	}

	// b stops, and leaves: a counts one lock space again.
	bctx, stop := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.w.Run(bctx)
	}()
	stop()
	<-done
	a.w.Tick(t.Context())
	a.w.Tick(t.Context())
	if got := a.spaces(t); got != 1 {
		t.Errorf("after b left: stocksvc_lock_spaces = %v, want 1", got)
	}
	if !strings.Contains(a.log.String(), "replicas of this database take their locks in one lock space again") {
		t.Errorf("a does not say the split ended; log:\n%s", a.log)
	}
}

// TestRedisRestartIsNoSplit: after a Redis restarted empty, the first replica to reach it binds
// it with a new lock space while the others are still recorded in the old one until their next
// beat; that is not reported as a split.
func TestRedisRestartIsNoSplit(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	prefix := testenv.KeyPrefix(t)
	register, owner := database(t)
	a := newReplica(t, "a", srv.Addr(), prefix, register, owner)
	b := newReplica(t, "b", srv.Addr(), prefix, register, owner)
	a.w.Tick(t.Context())
	b.w.Tick(t.Context())
	srv.Restart()
	a.w.Tick(t.Context()) // a new lock space; b still recorded in the old one
	b.w.Tick(t.Context())
	a.w.Tick(t.Context())
	for name, r := range map[string]*replica{"a": a, "b": b} {
		if got := r.spaces(t); got != 1 {
			t.Errorf("replica %s: stocksvc_lock_spaces = %v, want 1", name, got)
		}
		if strings.Contains(r.log.String(), "more than one lock space") {
			t.Errorf("replica %s reported a split; log:\n%s", name, r.log)
		}
	}
}

// TestForeignKeySpaceIsReported: a running replica whose key space another database bound
// (the key was lost without a restart: FLUSHALL, say, and the other reached it first) finds it
// at its next beat, stops using Redis, says so and sets the metric; once the key space is
// given back, it binds it again.
func TestForeignKeySpaceIsReported(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	register, owner := database(t)
	r := newReplica(t, "a", rdb.Options().Addr, prefix, register, owner)
	r.w.Tick(t.Context())
	conflict := func() float64 { return testenv.Gauge(t, r.reg, "stocksvc_redis_key_space_conflict") }
	if got := conflict(); got != 0 {
		t.Fatalf("stocksvc_redis_key_space_conflict = %v before, want 0", got)
	}

	if err := rdb.Del(t.Context(), prefix+"database").Err(); err != nil {
		t.Fatal(err)
	}
	other, ob := guarded(t, rdb.Options().Addr, prefix, staging)
	if _, err := ob.Check(t.Context(), other); err != nil {
		t.Fatalf("the other database binds the key space: %v", err)
	}
	r.w.Tick(t.Context())
	if got := conflict(); got != 1 {
		t.Errorf("stocksvc_redis_key_space_conflict = %v, want 1", got)
	}
	if f := r.w.Foreign(); f == nil || f.Bound != staging {
		t.Errorf("Foreign() = %v, want bound to %v", f, staging)
	}
	if !strings.Contains(r.log.String(), "redis key space holds another database's data; this replica does not use it") {
		t.Errorf("no error line; log:\n%s", r.log)
	}

	if err := rdb.Del(t.Context(), prefix+"database").Err(); err != nil {
		t.Fatal(err)
	}
	r.w.Tick(t.Context())
	if got := conflict(); got != 0 {
		t.Errorf("stocksvc_redis_key_space_conflict = %v once the key space is given back, want 0", got)
	}
	if !strings.Contains(r.log.String(), "redis key space is this database's again") {
		t.Errorf("no line saying it is over; log:\n%s", r.log)
	}
}

// TestSettleWithoutRedis: a replica whose Redis does not answer at start is not held up: the
// running Watch records it once it does.
func TestSettleWithoutRedis(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	srv.Kill()
	register, owner := database(t)
	r := newReplica(t, "a", srv.Addr(), testenv.KeyPrefix(t), register, owner)
	if err := r.w.Settle(t.Context()); err != nil {
		t.Errorf("settle without redis = %v, want nil", err)
	}
}
