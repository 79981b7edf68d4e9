package lock_test

import (
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestNoteGoesWithTheLock: what a holder leaves is what the next holder gets, however it gets
// the lock — from a free lock, given by the holder with a message, or found by a waiter that
// missed the message — and a holder that leaves nothing takes the old note away.
func TestNoteGoesWithTheLock(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := lock.New(rdb, lock.WithNamespace(prefix))
	t.Cleanup(func() { _ = c.Close() })

	t.Run("free lock", func(t *testing.T) {
		name := lockName(prefix, "note-free")
		first := obtain(t, c, name, time.Minute, nil)
		if first.Note() != "" {
			t.Errorf("first holder's note = %q, want none", first.Note())
		}
		first.LeaveNote("stock 41 version 7")
		release(t, first)
		second := obtain(t, c, name, time.Minute, &lock.Options{Wait: true})
		if got := second.Note(); got != "stock 41 version 7" {
			t.Errorf("next holder's note = %q, want the one left", got)
		}
		release(t, second) // leaves nothing: the note goes
		third := obtain(t, c, name, time.Minute, nil)
		defer release(t, third)
		if got := third.Note(); got != "" {
			t.Errorf("note after a holder that left none = %q, want none", got)
		}
	})

	t.Run("given with the message", func(t *testing.T) {
		name := lockName(prefix, "note-given")
		holder := obtain(t, c, name, time.Hour, nil)
		w := startWaiter(t, c, name, time.Minute)
		waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 1 })
		holder.LeaveNote("41 7")
		release(t, holder)
		l, err := w.result()
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		defer release(t, l)
		if got := l.Note(); got != "41 7" {
			t.Errorf("note given with the lock = %q, want %q", got, "41 7")
		}
	})

	t.Run("found on a later look", func(t *testing.T) {
		name := lockName(prefix, "note-found")
		deaf := lock.New(rdb, lock.WithNamespace("elsewhere:")) // hears no grant message
		t.Cleanup(func() { _ = deaf.Close() })
		holder := obtain(t, c, name, time.Hour, nil)
		w := startWaiter(t, deaf, name, time.Minute)
		waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 1 })
		holder.LeaveNote("found")
		release(t, holder)
		l, err := w.result()
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
		defer release(t, l)
		if got := l.Note(); got != "found" {
			t.Errorf("note found by the waiter's own look = %q, want %q", got, "found")
		}
	})
}
