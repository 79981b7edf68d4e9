// Package stock sells products without ever selling more than there is.
//
// Every order passes layered defenses, each of which can stop an oversell on its own:
//
//   - lock: a per-product distributed lock (Locker) serialises buyers of a product across all
//     replicas, so the common case never races at all;
//   - version: the decrement only applies if the row's version is still the one read, so a
//     concurrent writer turns into a retry instead of a lost update;
//   - guard: the decrement only applies while stock >= quantity, which Postgres re-checks against
//     the newest row after waiting for a concurrent writer;
//   - fence: with the lock, the decrement only applies if no holder with a newer fencing token has
//     written the row, so a holder whose lease expired while it was paused cannot write;
//   - check: a CHECK (stock >= 0) constraint on the table refuses what all else let through.
//
// Each refusal by a layer is counted (Metrics), so operators see which layer stopped what.
//
// This package is the domain core: it imports no driver. Service holds the rules and runs the
// purchase path over the interfaces it declares: Store (package stockpg is the Postgres one),
// Locker (package stocklock: over one Redis or a Redlock) and Views (package view). The layers
// are in those parts, not in flags: the production Store's write carries version, guard and
// fence, the Locker gives the locks and fencing tokens. The demonstration modes that take
// layers away are parts of their own (package demo and stockpg.NewDemo), which production
// never builds.
package stock
