package asyncpg

import (
	"context"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// newStore returns a Store over a fresh database.
func newStore(t *testing.T) *Store {
	t.Helper()
	s, err := New(testenv.Pool(t))
	if err != nil {
		t.Fatalf("new store: %v", err)
	}
	return s
}

// A line's holder that stops reading its line — a paused process, whose connection stays up —
// loses the line after the lease, and another drain takes it; a holder that lets go leaves its
// connection in the pool without the lease.
func TestLineLockLease(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	stalled, err := s.ClaimLine(ctx, 7, time.Second)
	if err != nil || stalled == nil {
		t.Fatalf("first claim: %v, %v", stalled, err)
	}
	t.Cleanup(stalled.Release) // before the pool closes, which waits for its connections
	if other, err := s.ClaimLine(ctx, 7, time.Second); err != nil || other != nil {
		t.Fatalf("second claim while held: %v, %v; want the line taken", other, err)
	}
	// Nobody reads on the holder's session: Postgres ends it after the lease.
	var next async.Line
	testenv.Poll(t, 10*time.Second, "the line to pass on after the lease", func() bool {
		next, err = s.ClaimLine(ctx, 7, time.Second)
		if err != nil {
			t.Fatalf("claim: %v", err)
		}
		return next != nil
	})
	t.Cleanup(next.Release)
	stalled.Release() // the session is gone: the connection is closed, not pooled
	next.Release()

	// After the release, no pooled connection carries the lease.
	for range 3 {
		conn, err := s.pool.Acquire(ctx)
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		var v string
		if err := conn.QueryRow(ctx, `SHOW idle_session_timeout`).Scan(&v); err != nil {
			t.Fatalf("show: %v", err)
		}
		conn.Release()
		if v != "0" {
			t.Errorf("a pooled connection has idle_session_timeout %s, want 0", v)
		}
	}
}
