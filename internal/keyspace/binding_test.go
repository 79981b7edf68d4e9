package keyspace_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/keyspace"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

var (
	shop    = keyspace.Owner{ID: "7713273514387912824/16385", Name: "shop at 127.0.0.5:5432"}
	staging = keyspace.Owner{ID: "7713273514387912824/16386", Name: "staging at 127.0.0.5:5432"}
)

// guarded returns a client of the Redis at addr whose key space under prefix is bound to owner,
// as a replica builds one: every connection checks the binding, and commands are refused while
// the key space is another's.
func guarded(t *testing.T, addr, prefix string, owner keyspace.Owner) (*redis.Client, *keyspace.Binding) {
	t.Helper()
	b := keyspace.New(prefix, owner, keyspace.Options{PerConnection: true})
	rdb := redis.NewClient(&redis.Options{Addr: addr, OnConnect: b.OnConnect, ContextTimeoutEnabled: true})
	rdb.AddHook(b)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, b
}

// TestSecondDatabaseIsRefused: the first database to reach an empty key space binds it; another
// database on the same prefix is refused, by an explicit check and by its first connection, and
// its client sends nothing — while a prefix of its own is its own.
func TestSecondDatabaseIsRefused(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	addr := rdb.Options().Addr
	first, b1 := guarded(t, addr, prefix, shop)
	space, err := b1.Check(t.Context(), first)
	if err != nil || space == "" {
		t.Fatalf("first check = %q, %v; want the space's token", space, err)
	}
	if err := first.Set(t.Context(), prefix+"view:product:{1}", "shop's", 0).Err(); err != nil {
		t.Fatalf("the owner's command: %v", err)
	}
	if again, err := b1.Check(t.Context(), first); again != space || err != nil {
		t.Errorf("second check = %q, %v; want %q, the same space", again, err, space)
	}

	second, b2 := guarded(t, addr, prefix, staging)
	// No check first: the connection's own refuses it.
	err = second.Get(t.Context(), prefix+"view:product:{1}").Err()
	var foreign *keyspace.ForeignError
	if !errors.As(err, &foreign) || !errors.Is(err, keyspace.ErrForeign) {
		t.Fatalf("another database's read = %v, want *ForeignError", err)
	}
	if foreign.Bound != shop || foreign.Owner != staging || foreign.Prefix != prefix {
		t.Errorf("ForeignError = %+v, want bound to %v, owner %v, prefix %q", foreign, shop, staging, prefix)
	}
	if _, err := b2.Check(t.Context(), second); !errors.Is(err, keyspace.ErrForeign) {
		t.Errorf("another database's check = %v, want ErrForeign", err)
	}
	if b2.Foreign() == nil || b2.Space() != "" {
		t.Errorf("refused binding: Foreign %v, Space %q; want the refusal and no space", b2.Foreign(), b2.Space())
	}

	own := testenv.KeyPrefix(t)
	t.Cleanup(func() { testenv.DeleteKeys(t, rdb, own) })
	apart, b3 := guarded(t, addr, own, staging)
	if _, err := b3.Check(t.Context(), apart); err != nil {
		t.Errorf("another database on a prefix of its own: %v", err)
	}
}

// TestUncheckedClientWaitsForACheck: a client whose connections do not check the key space
// (a Cluster's) sends nothing until a check has found the key space its owner's.
func TestUncheckedClientWaitsForACheck(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	b := keyspace.New(prefix, shop, keyspace.Options{})
	c := redis.NewClient(&redis.Options{Addr: rdb.Options().Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(b)
	if err := c.Ping(t.Context()).Err(); !errors.Is(err, keyspace.ErrUnchecked) {
		t.Fatalf("ping before a check = %v, want ErrUnchecked", err)
	}
	if _, err := b.Check(t.Context(), c); err != nil {
		t.Fatalf("check: %v", err)
	}
	if _, err := c.Pipelined(t.Context(), func(p redis.Pipeliner) error {
		p.Ping(t.Context())
		return nil
	}); err != nil {
		t.Errorf("pipeline after the check: %v", err)
	}
}

// TestKeyThatIsNoBindingIsForeign: a key at the binding's name that this package did not write
// is not taken for an empty key space.
func TestKeyThatIsNoBindingIsForeign(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	if err := rdb.Set(t.Context(), prefix+"database", "something else", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c, b := guarded(t, rdb.Options().Addr, prefix, shop)
	_, err := b.Check(t.Context(), c)
	var foreign *keyspace.ForeignError
	if !errors.As(err, &foreign) || foreign.Bound.ID != "" {
		t.Fatalf("check = %v, want *ForeignError with no owner", err)
	}
}

// TestRestartedRedisIsBoundAgain: a Redis that restarted empty is bound again by the next
// connection, with a new lock space (its fencing counters start again too) — and if another
// database reached it first, no command of the old owner's client reads what that one wrote.
func TestRestartedRedisIsBoundAgain(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	prefix := testenv.KeyPrefix(t)
	c, b := guarded(t, srv.Addr(), prefix, shop)
	if err := c.Set(t.Context(), prefix+"view:product:{1}", "shop's", 0).Err(); err != nil {
		t.Fatal(err)
	}
	before := b.Space()
	if before == "" {
		t.Fatal("no space after the first connection")
	}

	srv.Restart()
	if err := c.Set(t.Context(), prefix+"view:product:{1}", "shop's", 0).Err(); err != nil {
		t.Fatalf("command after the restart: %v", err)
	}
	if after := b.Space(); after == "" || after == before {
		t.Errorf("space after the restart %q, before %q: want a new one", after, before)
	}

	srv.Restart()
	other, _ := guarded(t, srv.Addr(), prefix, staging)
	if err := other.Set(t.Context(), prefix+"view:product:{1}", "staging's", 0).Err(); err != nil {
		t.Fatalf("the other database, first after the restart: %v", err)
	}
	got, err := c.Get(t.Context(), prefix+"view:product:{1}").Result()
	if !errors.Is(err, keyspace.ErrForeign) {
		t.Errorf("the first owner's read after another bound the key space = %q, %v; want ErrForeign", got, err)
	}
}

// BenchmarkHook is what the binding's hook adds to a command of a bound client, beside what a
// command costs: "get" is a GET's round trip to Redis, "hook" the hook alone around a command
// that is not sent.
func BenchmarkHook(b *testing.B) {
	rdb, prefix := testenv.Redis(b)
	bound := keyspace.New(prefix, shop, keyspace.Options{PerConnection: true})
	if _, err := bound.Check(b.Context(), rdb); err != nil {
		b.Fatal(err)
	}
	b.Run("get", func(b *testing.B) {
		for b.Loop() {
			if err := rdb.Get(b.Context(), prefix+"absent").Err(); !errors.Is(err, redis.Nil) {
				b.Fatal(err)
			}
		}
	})
	b.Run("hook", func(b *testing.B) {
		hooked := bound.ProcessHook(func(context.Context, redis.Cmder) error { return nil })
		cmd := redis.NewStringCmd(b.Context(), "get", prefix+"absent")
		for b.Loop() {
			if err := hooked(b.Context(), cmd); err != nil {
				b.Fatal(err)
			}
		}
	})
}
