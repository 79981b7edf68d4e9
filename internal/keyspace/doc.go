// Package keyspace keeps a deployment's Redis keys — everything under its key prefix — bound to
// the one database they describe, and tells when the replicas of one database take their locks
// in more than one place.
//
// Two mistakes it catches, both of which Redis alone cannot see:
//
//   - Two deployments with databases of their own on one Redis and one prefix. Product views,
//     lock notes and rebuild locks are named by product id, so each would read the other's:
//     another product under the same id, a sold-out answer from the other's stock. A Binding is
//     the key <prefix>database: it names the database the keys belong to (an Owner) and is
//     written with SET NX by whoever finds it missing, so the first database to reach an empty
//     key space owns it and every other is refused. The check runs as a replica starts, on every
//     new connection (OnConnect: a restart or a failover that lost the key drops every
//     connection, so none is used before the key space is bound again), and at every beat of a
//     Watch; a client whose key space is another database's refuses every command (the Binding
//     is also a go-redis hook), so the replica works as it does without Redis and never answers
//     from the other's data.
//
//   - Replicas of one database in two lock spaces: given different prefixes, or split between
//     two Redis servers. Each space has fencing counters of its own; Postgres keeps the highest
//     token that wrote each product and refuses lower ones, so the replicas of the space whose
//     counters are lower have every write refused, for ever, and answer every order "busy". A
//     Binding also carries a random token, made when the key space was bound: it names that lock
//     space (a Redis restarted empty is bound again with a new token — and its counters start
//     again from the clock, above every earlier token — so the new space replaces the old). A
//     Watch records, in a Register the replicas share (Postgres), which lock space each replica
//     uses, and counts the lock spaces of the replicas running.
//
// The package knows nothing about stock: an Owner is an identifier and a name, and the Register
// is declared here and implemented by the store.
package keyspace
