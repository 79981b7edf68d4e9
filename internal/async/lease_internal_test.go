package async

import (
	"context"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// A line's holder that stops reading its line — a paused process, whose connection stays up —
// loses the line after the lease, and another drain takes it; a holder that lets go leaves its
// connection in the pool without the lease.
func TestLineLockLease(t *testing.T) {
	pool := testenv.Pool(t)
	q, err := New(pool, nil, Config{JobTimeout: 2 * time.Second}) // a lease of 1 s
	if err != nil {
		t.Fatalf("new queue: %v", err)
	}
	ctx := context.Background()
	stalled, err := q.lockLine(ctx, 7)
	if err != nil || stalled == nil {
		t.Fatalf("first lock: %v, %v", stalled, err)
	}
	t.Cleanup(stalled.Unlock) // before the pool closes, which waits for its connections
	if other, err := q.lockLine(ctx, 7); err != nil || other != nil {
		t.Fatalf("second lock while held: %v, %v; want the line taken", other, err)
	}
	// Nobody reads on the holder's session: Postgres ends it after the lease.
	var next *stockpg.LineLock
	testenv.Poll(t, 10*time.Second, "the line to pass on after the lease", func() bool {
		next, err = q.lockLine(ctx, 7)
		if err != nil {
			t.Fatalf("lock: %v", err)
		}
		return next != nil
	})
	t.Cleanup(next.Unlock)
	stalled.Unlock() // the session is gone: the connection is closed, not pooled
	next.Unlock()

	// After unlock, no pooled connection carries the lease.
	for range 3 {
		conn, err := pool.Acquire(ctx)
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
