package ratelimit_test

import (
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/stocksvc/stocksvc/internal/ratelimit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a time the test moves.
type clock struct{ t time.Time }

func (c *clock) now() time.Time          { return c.t }
func (c *clock) advance(d time.Duration) { c.t = c.t.Add(d) }

// TestKeyedTakesABurstThenEarnsBack: a key takes its burst at once, is then refused with the
// time until its next event, and gets one event back per interval; another key is apart.
func TestKeyedTakesABurstThenEarnsBack(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_000_000, 0)}
	k := ratelimit.NewKeyed(ratelimit.Limit{Events: 2, Per: time.Second, Burst: 3}, 10, c.now)
	for i := range 3 {
		if wait := k.Take("a"); wait != 0 {
			t.Fatalf("event %d of the burst refused: wait %v", i+1, wait)
		}
	}
	if wait := k.Take("a"); wait != 500*time.Millisecond {
		t.Fatalf("past the burst: wait %v, want 500ms (one event every 500ms)", wait)
	}
	if wait := k.Blocked("a"); wait != 500*time.Millisecond {
		t.Fatalf("Blocked = %v, want 500ms", wait)
	}
	if wait := k.Take("b"); wait != 0 {
		t.Fatalf("another key: wait %v, want 0", wait)
	}
	c.advance(200 * time.Millisecond)
	if wait := k.Blocked("a"); wait != 300*time.Millisecond {
		t.Fatalf("200ms later: Blocked = %v, want 300ms", wait)
	}
	c.advance(300 * time.Millisecond)
	if wait := k.Take("a"); wait != 0 {
		t.Fatalf("after the interval: wait %v, want 0", wait)
	}
	if wait := k.Take("a"); wait == 0 {
		t.Fatal("a second event after one interval was allowed")
	}
}

// TestKeyedBlockedRemembersNothing: looking at a key that has no bucket makes none.
func TestKeyedBlockedRemembersNothing(t *testing.T) {
	t.Parallel()
	k := ratelimit.NewKeyed(ratelimit.Limit{Events: 1, Per: time.Second, Burst: 1}, 10, nil)
	if wait := k.Blocked("a"); wait != 0 || k.Len() != 0 {
		t.Fatalf("Blocked = %v with %d keys, want 0 and none remembered", wait, k.Len())
	}
}

// TestKeyedIsBounded: past maxKeys, the least recently used key is forgotten, and starts
// again with a full burst.
func TestKeyedIsBounded(t *testing.T) {
	t.Parallel()
	c := &clock{t: time.Unix(1_000_000, 0)}
	k := ratelimit.NewKeyed(ratelimit.Limit{Events: 1, Per: time.Hour, Burst: 1}, 3, c.now)
	k.Take("first")
	for i := range 5 {
		k.Take(strconv.Itoa(i))
	}
	if k.Len() != 3 {
		t.Fatalf("%d keys remembered, want 3", k.Len())
	}
	if wait := k.Take("first"); wait != 0 {
		t.Fatalf("a forgotten key: wait %v, want a full burst again", wait)
	}
}
