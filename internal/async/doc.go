// Package async is the delay queue for orders: an order sent with Prefer: respond-async is
// accepted at once (202) and decided later, through the same defended purchase path as any
// other order, by whichever replica's worker gets to it. Queue.Place accepts an order (or
// refuses it at once, as the purchase path would); Queue.Find looks an order up by its id,
// whichever route placed it; a rejected order says why with a Reason.
//
// An accepted order and the job that will decide it are written in one transaction, so an
// accepted order is never lost and never decided twice. Orders that arrive together are
// accepted together, in one transaction (accept.go), as purchases are decided in batches. Each
// product has a line — its pending orders in arrival order — which one replica at a time
// drains (it claims the line), a round of up to a batch at a time, so a product's orders are
// decided in the order they were accepted. The decision is the idempotency record the
// purchase path stores under the order's internal key (stock.AcceptedKey): a replica that dies
// after a commit leaves a record, and whoever drains the line next replays it instead of
// buying again. The jobs are only the signal to drain; a sweep every second restarts any line
// whose orders wait without one, so losing a job (a replica killed while holding it) costs a
// second, not an order.
//
// This package keeps the rounds, the groups and what a decision means; what it needs of
// storage and of the jobs is the Store it declares (store.go). Package asyncpg, beside it, is
// that Store over Postgres and River: the only package that knows the async_orders table,
// River's jobs and the advisory locks that claim a line.
package async
