package lock_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestReentry re-enters a held lock with its token: the lease grows, the fence stays, and one
// Release ends the lock. A token that does not hold the lock re-enters nothing.
func TestReentry(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		first *lock.Options // how the lock is first obtained
		again lock.Options  // how it is re-entered; Token is filled in
		// releaseFirst releases the first handle rather than the re-entered one.
		releaseFirst bool
	}{
		{name: "single attempts"},
		{name: "polling", again: lock.Options{Retry: lock.Limit(lock.Fixed(time.Millisecond), 3)}},
		{name: "release the first handle", releaseFirst: true},
		{name: "wait", first: &lock.Options{Wait: true}, again: lock.Options{Wait: true}},
		{name: "wait, release the first handle", first: &lock.Options{Wait: true}, again: lock.Options{Wait: true}, releaseFirst: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			c := newWaitingClient(t, rdb, prefix, nil)
			name := lockName(prefix, "reentry")
			ctx := t.Context()
			first := obtain(t, c, name, time.Second, tt.first)

			opt := tt.again
			opt.Token = first.Token()
			again, err := c.Obtain(ctx, name, time.Minute, &opt)
			if err != nil {
				t.Fatalf("re-entering Obtain: %v", err)
			}
			if again.Token() != first.Token() || again.Fence() != first.Fence() {
				t.Errorf("re-entered lock has token %q fence %d, want the first's %q and %d", again.Token(), again.Fence(), first.Token(), first.Fence())
			}
			if ttl := rdb.PTTL(ctx, name).Val(); ttl <= time.Second {
				t.Errorf("PTTL after re-entering for a minute = %v, want above the first lease of 1s", ttl)
			}
			if got := value(t, rdb, fenceKey(name)); got != strconv.FormatInt(first.Fence(), 10) {
				t.Errorf("fencing counter %s after re-entry, want it unchanged at %d", got, first.Fence())
			}

			foreign := tt.again
			foreign.Token = "not-the-holder"
			if _, err := c.Obtain(ctx, name, time.Minute, &foreign); !errors.Is(err, lock.ErrNotObtained) {
				t.Errorf("Obtain with a foreign token = %v, want ErrNotObtained", err)
			}

			// Someone else waits for the lock; the one Release must be enough for them.
			var wg sync.WaitGroup
			var next *lock.Lock
			var nextErr error
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				next, nextErr = c.Obtain(wctx, name, time.Minute, &lock.Options{Wait: true})
			})
			waitFor(t, func() bool { return exists(t, rdb, name+":waiters") })

			ended := again
			if tt.releaseFirst {
				ended = first
			}
			if err := ended.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			wg.Wait()
			if nextErr != nil {
				t.Fatalf("next holder after the one Release: %v", nextErr)
			}
			if next.Fence() <= first.Fence() {
				t.Errorf("next holder's fence %d is not above %d", next.Fence(), first.Fence())
			}
			release(t, next)
		})
	}
}
