// Package lock is a distributed lock over Redis for hot keys: fencing tokens, waiting without
// polling in first-come-first-served order, several names at once with their leases kept alive
// (WithLocks), Redlock, and metrics hooks. README.md in this directory says what it guarantees
// and what it does not.
//
// A lock is a Redis key set with SET NX PX to a random token; only the holder of the token may
// refresh or release it, and both are single Lua scripts so no check-then-act race exists.
// Every successful Obtain also increments a per-name counter in the same script and hands the
// new value to the holder as a fencing token. Tokens strictly increase per name, so storage that
// remembers the highest token it has accepted can refuse writes from a holder whose lease ran
// out while it was paused — the one failure no lease-based lock can prevent on its own.
//
// When the counter key is missing (a Redis restarted without persistence, an eviction, an
// operator's DEL) the script seeds it from the Redis server clock in microseconds. Tokens issued
// afterwards are therefore larger than every earlier one as long as the server clock did not step
// backwards and fewer than one lock per microsecond was ever granted on the name — every grant
// costs at least one network round trip, so the second condition always holds in practice.
//
// With Options.Wait, every waiting Obtain that finds the lock held joins the lock's line in
// Redis with the token it will hold the lock with; a holder that lets go gives the lock to the
// waiter at the front and publishes that waiter's id and fencing token (one pattern
// subscription per Client routes it), so waiters take turns in the order they asked, whichever
// Client they belong to, with no round trip of the waiter's own. The package does not queue
// a Client's waiters locally: a service that wants one contender per process and name (to
// batch work under one lock, as stocksvc does) queues its requests itself.
//
// Redlock takes a lock on a majority of independent Redis nodes. Its fencing tokens strictly
// increase too: the holder takes the largest token its quorum issued and raises every node's
// counter that still holds its lock to it, and the lock counts as obtained only when a quorum
// did; any two quorums share a node, on which the later grant came after the earlier raise.
//
// The lock is an efficiency device: it keeps contenders from doing the same work at once. It is
// not, by itself, a correctness guarantee — a lease can expire under a paused holder. Correctness
// comes from the storage checking the fencing token (and, in stocksvc, from Postgres conditions).
//
// The package knows nothing about its callers; it needs a go-redis UniversalClient, so a single
// node, Sentinel or Cluster client all work. The keys of one name share a Redis Cluster hash tag,
// so its scripts never fail with CROSSSLOT.
package lock
