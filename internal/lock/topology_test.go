package lock_test

import (
	"context"
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// eventually polls cond until it holds, failing the test after limit.
func eventually(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	testenv.Poll(t, limit, what, cond)
}

// cluster is a Redis Cluster of three masters started by the test.
type cluster struct {
	nodes []*testenv.RedisServer
	rdb   *redis.ClusterClient
}

// startCluster starts a cluster of three masters (testenv.StartCluster) with a client of it.
func startCluster(t *testing.T) *cluster {
	t.Helper()
	cl := &cluster{nodes: testenv.StartCluster(t, 3).Nodes}
	cl.rdb = cl.newClient(t)
	return cl
}

// newClient returns a new cluster client (another replica's), closed when the test ends.
func (cl *cluster) newClient(t *testing.T) *redis.ClusterClient {
	t.Helper()
	var seeds []string
	for _, n := range cl.nodes {
		seeds = append(seeds, n.Addr())
	}
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// node returns the server that owns key.
func (cl *cluster) node(t *testing.T, key string) *testenv.RedisServer {
	t.Helper()
	master, err := cl.rdb.MasterForKey(context.Background(), key)
	if err != nil {
		t.Fatalf("master for %s: %v", key, err)
	}
	for _, n := range cl.nodes {
		if n.Addr() == master.Options().Addr {
			return n
		}
	}
	t.Fatalf("key %s is on %s, which is none of the cluster's nodes", key, master.Options().Addr)
	return nil
}

// keysMatching returns the keys matching pattern, by the address of the node that has them.
func (cl *cluster) keysMatching(t *testing.T, pattern string) map[string][]string {
	t.Helper()
	var mu sync.Mutex // ForEachMaster asks the nodes concurrently
	where := map[string][]string{}
	err := cl.rdb.ForEachMaster(context.Background(), func(ctx context.Context, node *redis.Client) error {
		keys, err := node.Keys(ctx, pattern).Result()
		if len(keys) > 0 {
			slices.Sort(keys)
			mu.Lock()
			where[node.Options().Addr] = keys
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		t.Fatalf("KEYS %s: %v", pattern, err)
	}
	return where
}

// namesOnEveryNode returns one lock name per node of the cluster, in node order, each made of
// prefix, a number and suffix. Without a hash tag in them, a name's keys hash as the name.
func (cl *cluster) namesOnEveryNode(t *testing.T, prefix, suffix string) []string {
	t.Helper()
	names := make([]string, len(cl.nodes))
	found := 0
	for i := 0; found < len(names); i++ {
		if i > 1000 {
			t.Fatalf("no lock name found for every node: %q", names)
		}
		name := prefix + strconv.Itoa(i) + suffix
		at := slices.Index(cl.nodes, cl.node(t, name))
		if names[at] == "" {
			names[at] = name
			found++
		}
	}
	return names
}

// TestCluster runs the lock on a Redis Cluster of three masters: its keys of one name share a
// slot while different names live on different nodes, and every operation, the fence, Wait
// mode's grant messages and mutual exclusion work across nodes.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := startCluster(t)
	names := cl.namesOnEveryNode(t, "cluster:{product-", "}")
	ctx := t.Context()

	t.Run("keys of a name share a slot", func(t *testing.T) {
		t.Parallel()
		// Names with a hash tag of their own, and names the lock tags itself.
		checked := append(cl.namesOnEveryNode(t, "slots:{product-", "}"), cl.namesOnEveryNode(t, "slots-plain-", "")...)
		a := lock.New(cl.rdb)
		b := waitingClients(t, cl.rdb, 1)[0]
		for _, name := range checked {
			// A holder and a waiter in line: the lock, its counter and the line exist.
			held := obtain(t, a, name, time.Minute, nil)
			var wg sync.WaitGroup
			var l *lock.Lock
			var err error
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, err = b.Obtain(wctx, name, time.Minute, &lock.Options{Wait: true})
			})
			var where map[string][]string
			eventually(t, 10*time.Second, "the keys of "+name, func() bool {
				where = cl.keysMatching(t, "*"+name+"*")
				n := 0
				for _, keys := range where {
					n += len(keys)
				}
				return n == 3
			})
			release(t, held)
			wg.Wait()
			if err != nil {
				t.Fatalf("%s: waiter: %v", name, err)
			}
			release(t, l)

			owner := cl.node(t, name).Addr()
			if len(where) != 1 || len(where[owner]) != 3 {
				t.Errorf("keys of %s are on %v, want all three on %s, the node of its slot", name, where, owner)
			}
			var slots []int64
			for _, k := range where[owner] {
				slot, err := cl.rdb.ClusterKeySlot(ctx, k).Result()
				if err != nil {
					t.Fatalf("CLUSTER KEYSLOT %s: %v", k, err)
				}
				slots = append(slots, slot)
			}
			if len(slices.Compact(slices.Clone(slots))) != 1 {
				t.Errorf("keys %q are in slots %v, want one slot", where[owner], slots)
			}
		}
		var owners []string
		for _, name := range names {
			owners = append(owners, cl.node(t, name).Addr())
		}
		if len(slices.Compact(slices.Sorted(slices.Values(owners)))) != 3 {
			t.Errorf("names %q live on nodes %v, want three different nodes", names, owners)
		}
	})

	t.Run("obtain refresh release fence", func(t *testing.T) {
		t.Parallel()
		c := lock.New(cl.rdb)
		for _, name := range names {
			node := cl.node(t, name).Client()
			var last int64
			for round := range 3 {
				l := obtain(t, c, name, time.Second, nil)
				if l.Fence() <= last {
					t.Errorf("%s round %d: fence %d, not above the previous %d", name, round, l.Fence(), last)
				}
				last = l.Fence()
				if got := value(t, node, name); got != l.Token() {
					t.Errorf("%s: GET on its node = %q, want the holder's token", name, got)
				}
				if err := l.Refresh(ctx, time.Minute); err != nil {
					t.Fatalf("%s: Refresh: %v", name, err)
				}
				if ttl := lease(t, node, name); ttl <= time.Second {
					t.Errorf("%s: PTTL on its node after a refresh to a minute = %v", name, ttl)
				}
				if err := l.Release(ctx); err != nil {
					t.Fatalf("%s: Release: %v", name, err)
				}
				if exists(t, node, name) {
					t.Errorf("%s: key still on its node after Release", name)
				}
			}
		}
	})

	t.Run("wait across clients", func(t *testing.T) {
		t.Parallel()
		// Two replicas: their own cluster clients, their own lock clients.
		a := lock.New(cl.newClient(t))
		b := waitingClients(t, cl.newClient(t), 1)[0]
		for _, name := range names {
			name := name + ":wait"
			node := cl.node(t, name).Client()
			held := obtain(t, a, name, time.Minute, nil)
			var wg sync.WaitGroup
			var l *lock.Lock
			var waitErr error
			wg.Go(func() {
				// Far below the holder's lease: only the grant message, published on the
				// name's node and relayed by the cluster bus, or the grant found on a
				// recheck, can give this waiter the lock.
				wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				l, waitErr = b.Obtain(wctx, name, time.Minute, &lock.Options{Wait: true})
			})
			eventually(t, 10*time.Second, "waiter recorded", func() bool { return exists(t, node, name+":waiters") })
			for _, k := range []string{name, fenceKey(name), name + ":waiters"} {
				if !exists(t, node, k) {
					t.Errorf("key %s is not on %s, the node of %s", k, cl.node(t, name).Addr(), name)
				}
			}
			if err := held.Release(ctx); err != nil {
				t.Fatalf("%s: Release: %v", name, err)
			}
			wg.Wait()
			if waitErr != nil {
				t.Fatalf("%s: waiter: %v", name, waitErr)
			}
			if l.Fence() <= held.Fence() {
				t.Errorf("%s: waiter's fence %d is not above the holder's %d", name, l.Fence(), held.Fence())
			}
			if err := l.Release(ctx); err != nil {
				t.Errorf("%s: waiter's Release: %v", name, err)
			}
		}
	})

	t.Run("mutual exclusion", func(t *testing.T) {
		t.Parallel()
		hot := names[0] + ":hot"
		hammer(t, hot, contention{workers: 12, rounds: 4}, withLocksRun(waitingClients(t, cl.rdb, 3), &lock.Options{Wait: true}))
	})

	t.Run("mutual exclusion, carts across nodes", func(t *testing.T) {
		t.Parallel()
		// Overlapping carts, each taken in one agreed order: names[0], names[1], names[2].
		carts := [][]string{
			{names[0] + ":cart", names[1] + ":cart"},
			{names[0] + ":cart", names[2] + ":cart"},
			{names[0] + ":cart", names[1] + ":cart", names[2] + ":cart"},
		}
		hammer(t, "", contention{workers: 9, rounds: 4, names: func(w, r int) []string { return carts[(w+r)%len(carts)] }},
			withLocksRun(waitingClients(t, cl.rdb, 3), &lock.Options{Wait: true}))
	})
}

// sentinel is one master, one replica and three sentinels, started by the test.
type sentinel struct {
	master, replica *testenv.RedisServer
	sentinels       []*testenv.RedisServer
}

const masterName = "mymaster"

func startSentinel(t *testing.T) *sentinel {
	t.Helper()
	g := testenv.StartSentinelGroup(t)
	return &sentinel{master: g.Master, replica: g.Replica, sentinels: g.Sentinels}
}

// newClient returns a failover client that finds the master through the sentinels, closed when
// the test ends.
func (s *sentinel) newClient(t *testing.T) *redis.Client {
	t.Helper()
	var addrs []string
	for _, sn := range s.sentinels {
		addrs = append(addrs, sn.Addr())
	}
	rdb := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: masterName, SentinelAddrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

// TestSentinel runs the lock through Sentinel: a failover client finds the master, and every
// operation, the fence, Wait mode and mutual exclusion work through it.
func TestSentinel(t *testing.T) {
	t.Parallel()
	s := startSentinel(t)
	rdb := s.newClient(t)
	master := s.master.Client()
	ctx := t.Context()

	t.Run("obtain refresh release fence", func(t *testing.T) {
		t.Parallel()
		c := lock.New(rdb)
		name := lockName("", "basic")
		var last int64
		for round := range 3 {
			l := obtain(t, c, name, time.Second, nil)
			if l.Fence() <= last {
				t.Errorf("round %d: fence %d, not above the previous %d", round, l.Fence(), last)
			}
			last = l.Fence()
			if got := value(t, master, name); got != l.Token() {
				t.Errorf("GET on the master = %q, want the holder's token", got)
			}
			if err := l.Refresh(ctx, time.Minute); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if ttl := lease(t, master, name); ttl <= time.Second {
				t.Errorf("PTTL on the master after a refresh to a minute = %v", ttl)
			}
			if err := l.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			if exists(t, master, name) {
				t.Error("key still on the master after Release")
			}
		}
	})

	t.Run("wait across clients", func(t *testing.T) {
		t.Parallel()
		a := lock.New(s.newClient(t))
		b := waitingClients(t, s.newClient(t), 1)[0]
		name := lockName("", "wait")
		held := obtain(t, a, name, time.Minute, nil)
		var wg sync.WaitGroup
		var got *lock.Lock
		var waitErr error
		wg.Go(func() {
			// Far below the holder's lease: only the holder's grant can give it the lock.
			wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, waitErr = b.Obtain(wctx, name, time.Minute, &lock.Options{Wait: true})
		})
		eventually(t, 10*time.Second, "waiter recorded", func() bool { return exists(t, master, name+":waiters") })
		if err := held.Release(ctx); err != nil {
			t.Fatalf("Release: %v", err)
		}
		wg.Wait()
		if waitErr != nil {
			t.Fatalf("waiter: %v", waitErr)
		}
		if got.Fence() <= held.Fence() {
			t.Errorf("waiter's fence %d is not above the holder's %d", got.Fence(), held.Fence())
		}
		if err := got.Release(ctx); err != nil {
			t.Errorf("waiter's Release: %v", err)
		}
	})

	t.Run("mutual exclusion", func(t *testing.T) {
		t.Parallel()
		hammer(t, lockName("", "hot"), contention{workers: 12, rounds: 4},
			withLocksRun(waitingClients(t, rdb, 3), &lock.Options{Wait: true}))
	})

	t.Run("mutual exclusion, polling", func(t *testing.T) {
		t.Parallel()
		hammer(t, lockName("", "hot-polling"), contention{workers: 12, rounds: 4},
			withLocksRun([]*lock.Client{lock.New(rdb)}, &lock.Options{Retry: lock.Exponential(time.Millisecond, 20*time.Millisecond)}))
	})
}

// TestSentinelFailover kills the master while A holds a lock that has reached the replica:
// after Sentinel promotes the replica, the lock is still A's (B cannot take it, A can refresh
// and release it), and B's fence afterwards is larger than A's. A lock that had not reached
// the replica would be lost in the failover: replication is asynchronous, and the lock does
// not wait for it.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	s := startSentinel(t)
	ctx := t.Context()
	for _, sn := range s.sentinels {
		sc := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr()})
		eventually(t, 20*time.Second, "sentinel "+sn.Addr()+" knows the other sentinels", func() bool {
			m, err := sc.Master(ctx, masterName).Result()
			return err == nil && m["num-other-sentinels"] == "2"
		})
		_ = sc.Close()
	}
	a, b := lock.New(s.newClient(t)), lock.New(s.newClient(t))
	name := lockName("", "failover")
	held := obtain(t, a, name, time.Minute, nil)
	master := s.master.Client()
	if n, err := master.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica = %d, %v", n, err)
	}

	s.master.Kill()
	deadline := time.Now().Add(30 * time.Second)
	for {
		actx, cancel := context.WithTimeout(ctx, time.Second)
		l, err := b.Obtain(actx, name, time.Minute, nil)
		cancel()
		if err == nil {
			_ = l.Release(ctx)
			t.Fatal("B obtained the lock A held before the failover")
		}
		if errors.Is(err, lock.ErrNotObtained) {
			break // the new master answers, with A's lock
		}
		if time.Now().After(deadline) {
			t.Fatalf("no master after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // polling for the failover, not synchronising
	}
	if got := value(t, s.replica.Client(), name); got != held.Token() {
		t.Errorf("promoted replica holds %q, want A's token", got)
	}
	if err := held.Refresh(ctx, time.Minute); err != nil {
		t.Errorf("A: Refresh after the failover: %v", err)
	}
	if err := held.Release(ctx); err != nil {
		t.Errorf("A: Release after the failover: %v", err)
	}
	l := obtain(t, b, name, time.Minute, nil)
	defer release(t, l)
	if l.Fence() <= held.Fence() {
		t.Errorf("B's fence %d after the failover is not above A's %d", l.Fence(), held.Fence())
	}
}
