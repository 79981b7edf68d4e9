package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// lockName returns a lock name under the test's key prefix. The name carries a Redis Cluster
// hash tag, so package lock uses it unchanged as the lock's key and name+":fence" as its
// counter's key: tests can reach both in Redis, and both fall under the prefix that testenv
// cleans up.
func lockName(prefix, id string) string { return prefix + "lock:{" + id + "}" }

// fenceKey returns the Redis key of the fencing counter of a name made by lockName.
func fenceKey(name string) string { return name + ":fence" }

// exists reports whether key is in Redis.
func exists(t testing.TB, rdb *redis.Client, key string) bool {
	t.Helper()
	n, err := rdb.Exists(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("EXISTS %s: %v", key, err)
	}
	return n == 1
}

// value returns the value stored at key, or "" when there is none.
func value(t testing.TB, rdb *redis.Client, key string) string {
	t.Helper()
	v, err := rdb.Get(context.Background(), key).Result()
	if errors.Is(err, redis.Nil) {
		return ""
	}
	if err != nil {
		t.Fatalf("GET %s: %v", key, err)
	}
	return v
}

// lease returns the remaining lease of key as Redis counts it (PTTL): negative when the key is
// gone or has no expiry.
func lease(t testing.TB, rdb *redis.Client, key string) time.Duration {
	t.Helper()
	d, err := rdb.PTTL(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("PTTL %s: %v", key, err)
	}
	return d
}

// del deletes key, as an operator, an eviction or an expiry would, and fails the test when
// there was nothing to delete: a test that means to take a lock away must know it did.
func del(t testing.TB, rdb *redis.Client, key string) {
	t.Helper()
	n, err := rdb.Del(context.Background(), key).Result()
	if err != nil {
		t.Fatalf("DEL %s: %v", key, err)
	}
	if n != 1 {
		t.Fatalf("DEL %s deleted %d keys, want 1", key, n)
	}
}

// waitExpired polls Redis until key has expired, failing the test if that takes more than a
// few seconds. It waits on Redis's clock, not on another goroutine.
func waitExpired(t testing.TB, rdb *redis.Client, key string) {
	t.Helper()
	const limit = 5 * time.Second
	deadline := time.Now().Add(limit)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for exists(t, rdb, key) {
		if time.Now().After(deadline) {
			t.Fatalf("key %s still exists after %v", key, limit)
		}
		<-tick.C
	}
}

// loss is how a holder loses its lock in a test.
type loss string

const (
	lossDeleted loss = "deleted" // someone deletes the key
	lossExpired loss = "expired" // the lease runs out
)

// lossTTL is the lease for a lock that a test will let expire; others use longLease.
const (
	lossTTL   = 50 * time.Millisecond
	longLease = 30 * time.Second
)

// ttlFor returns the lease to obtain a lock with that the test will lose as how says.
func ttlFor(how loss) time.Duration {
	if how == lossExpired {
		return lossTTL
	}
	return longLease
}

// lose makes the lock whose key is key lost, as how says.
func lose(t testing.TB, rdb *redis.Client, key string, how loss) {
	t.Helper()
	switch how {
	case lossDeleted:
		del(t, rdb, key)
	case lossExpired:
		waitExpired(t, rdb, key)
	default:
		t.Fatalf("unknown loss %q", how)
	}
}
