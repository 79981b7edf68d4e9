package stockpg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// The statements of orders accepted for later (package async): async_orders, and the
// idempotency records those orders claim and are decided under. They are here, beside the
// purchase path's, because both write idempotency_keys: one package owns each table. Package
// async keeps what is not SQL — the River jobs, the lines' rounds, the decisions — and runs these
// statements through Accepted, in its own transactions where a River insert must commit with
// them.

// insertCartSQL accepts a cart (in no product's line: product_id stays NULL).
const insertCartSQL = `
INSERT INTO async_orders (id, customer_id, product_ids, quantities)
VALUES ($1, $2, $3, $4)
RETURNING accepted_at`

// claimKeySQL records a client's Idempotency-Key ($2, of customer $1) as belonging to the
// accepted order, unless the key already has an outcome (then nothing is written and no row
// returned).
const claimKeySQL = `
INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, async_order_id, product_id)
VALUES ($1, $2, $3, 'accepted', $4, $5)
ON CONFLICT (customer_id, key) DO NOTHING
RETURNING key`

// keyRecordSQL reads what a customer's key holds.
const keyRecordSQL = `
SELECT fingerprint, outcome, order_id, async_order_id, product_id, requested, available
  FROM idempotency_keys WHERE customer_id = $1 AND key = $2`

// lineSQL reads the front of a product's line.
const lineSQL = `
SELECT id, customer_id, product_ids, quantities
  FROM async_orders
 WHERE product_id = $1 AND status = 'pending'
 ORDER BY seq
 LIMIT $2`

// orderSQL reads an accepted order and, while it is pending, the decision the purchase path
// may already have stored for it (a replica can stop between the commit and the copy) under
// its key ($2), its customer's.
const orderSQL = `
SELECT a.id, a.customer_id, a.product_ids, a.quantities, a.status, a.reason, a.rejected_product,
       a.requested, a.available, a.accepted_at, a.decided_at,
       k.outcome, k.product_id, k.requested, k.available, k.created_at
  FROM async_orders a
  LEFT JOIN idempotency_keys k ON a.status = 'pending' AND k.customer_id = a.customer_id AND k.key = $2
 WHERE a.id = $1`

// storeRefusalsSQL stores the refusals the purchase path answered without storing (it stores
// those of a batch that also sells; a batch refused whole from a read stores them at best), so
// that every decision is a record before it is copied. A key that has a record keeps it.
const storeRefusalsSQL = `
INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available)
SELECT * FROM unnest($1::text[], $2::text[], $3::bytea[], $4::text[], $5::bigint[], $6::bigint[], $7::bigint[])
ON CONFLICT (customer_id, key) DO NOTHING`

// copyDecisionsSQL copies each order's decision — its key's record — into the order, once, and
// returns the orders it decided with how long each waited (on Postgres's clock, the same one
// that stamped its acceptance). A refusal's reason is $3 (Reasons.SoldOut), a given-up order's
// $4 (Reasons.Internal).
const copyDecisionsSQL = `
UPDATE async_orders a
   SET status = CASE k.outcome WHEN 'confirmed' THEN 'confirmed' ELSE 'rejected' END,
       reason = CASE k.outcome WHEN 'confirmed' THEN NULL WHEN 'failed' THEN $4::text ELSE $3::text END,
       rejected_product = k.product_id, requested = k.requested, available = k.available,
       decided_at = greatest(k.created_at, a.accepted_at)
  FROM idempotency_keys k
 WHERE a.id = ANY($1) AND a.status = 'pending' AND k.customer_id = a.customer_id AND k.key = $2 || a.id::text
RETURNING a.status, extract(epoch FROM a.decided_at - a.accepted_at)::float8`

// rejectSQL rejects orders whose refusal is not an idempotency record (a product that went
// missing, a rule that changed): there is nothing to replay, so the order row is the decision.
const rejectSQL = `
UPDATE async_orders
   SET status = 'rejected', reason = $2, decided_at = greatest(now(), accepted_at)
 WHERE id = $1 AND status = 'pending'
RETURNING extract(epoch FROM decided_at - accepted_at)::float8`

// failSQL counts a failed attempt to decide order $1, and at the attempt that reaches the cap
// ($2) rejects it (reason $5, Reasons.Internal) as every decision is made: a record under the
// order's key ($4; fingerprint $6), outcome 'failed', copied into the order in the same
// statement. The record is what keeps the rejection from racing a drain that decides the order
// meanwhile (one paused after reading its line, which has since passed on): the purchase path
// stores its decision under the same key, and the primary key lets one of the two in. The
// other replays it — the drain's purchase answers stock.ErrGivenUp and sells nothing — or, when
// the purchase stored first (found by NOT EXISTS, or by the insert, which waits for a purchase
// still committing), nothing here is written: the order is left to be copied, the record being
// the truth. The error is kept for operators.
const failSQL = `
WITH o AS (
  SELECT a.id, a.customer_id, a.attempts + 1 AS attempts
    FROM async_orders a
   WHERE a.id = $1 AND a.status = 'pending'
     AND NOT EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.customer_id = a.customer_id AND k.key = $4)
     FOR UPDATE
), r AS (
  INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome)
  SELECT o.customer_id, $4, $6, 'failed' FROM o WHERE o.attempts >= $2
  ON CONFLICT (customer_id, key) DO NOTHING
  RETURNING created_at
)
UPDATE async_orders a
   SET attempts = o.attempts,
       last_error = left($3, 2000),
       status = CASE WHEN r.created_at IS NULL THEN 'pending' ELSE 'rejected' END,
       reason = CASE WHEN r.created_at IS NULL THEN NULL ELSE $5::text END,
       decided_at = CASE WHEN r.created_at IS NULL THEN NULL ELSE greatest(r.created_at, a.accepted_at) END
  FROM o LEFT JOIN r ON true
 WHERE a.id = o.id AND (o.attempts < $2 OR r.created_at IS NOT NULL)
RETURNING a.status, a.attempts, extract(epoch FROM coalesce(a.decided_at, a.accepted_at) - a.accepted_at)::float8`

// staleSQL finds what waits without being drained: the lines whose front is older than $1, and
// the carts older than $2 (a cart's own job retries it long before that).
const staleSQL = `
SELECT DISTINCT product_id, NULL::uuid FROM async_orders
 WHERE status = 'pending' AND product_id IS NOT NULL AND accepted_at < now() - $1::interval
UNION ALL
SELECT NULL, id FROM async_orders
 WHERE status = 'pending' AND product_id IS NULL AND accepted_at < now() - $2::interval
 LIMIT 1000`

const pendingCountSQL = `SELECT count(*) FROM async_orders WHERE status = 'pending'`

// oldestPendingSQL returns how long the front of each line has waited, longest first, the
// carts counting as one line: one pass over the pending orders, as the count above.
const oldestPendingSQL = `
SELECT coalesce(product_id::text, 'cart'), greatest(extract(epoch FROM now() - min(accepted_at)), 0)::float8
  FROM async_orders
 WHERE status = 'pending'
 GROUP BY product_id
 ORDER BY 2 DESC
 LIMIT $1`

// acceptSQL accepts a group of orders of one product each, in the group's order, and says what
// became of each: 'accepted' (in line, with its acceptance time), 'taken' (its key already had
// an outcome, or an order earlier in the group claimed it: nothing was written for it) or
// 'missing' (no such product: nothing was written).
//
// The key is claimed first (ON CONFLICT DO NOTHING), and only an order whose key was claimed,
// or that has none, goes in line: one order per key, whoever else sends it at the same time. An
// order's identity column follows the input's order (WITH ORDINALITY, ORDER BY), so the line's
// seq is the group's arrival order. The foreign keys are checked at the end of the statement,
// when both inserts are done. accepted_at is the statement's clock, not the transaction's
// start: a group's transaction begins with its drain jobs, before its turn at the lock.
const acceptSQL = `
WITH input AS (
  SELECT u.*, EXISTS (SELECT 1 FROM products p WHERE p.id = u.product_id) AS found
    FROM unnest($1::uuid[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bytea[])
         WITH ORDINALITY AS u(id, customer_id, product_id, quantity, key, fingerprint, n)
), claimed AS (
  INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, async_order_id, product_id)
  SELECT customer_id, key, fingerprint, 'accepted', id, product_id FROM input
   WHERE found AND key IS NOT NULL
   ORDER BY n
  ON CONFLICT (customer_id, key) DO NOTHING
  RETURNING async_order_id
), placed AS (
  INSERT INTO async_orders (id, customer_id, product_ids, quantities, product_id, accepted_at)
  SELECT id, customer_id, ARRAY[product_id], ARRAY[quantity], product_id, clock_timestamp() FROM input
   WHERE found AND (key IS NULL OR id IN (SELECT async_order_id FROM claimed))
   ORDER BY n
  RETURNING id, accepted_at
)
SELECT i.id, CASE WHEN p.id IS NOT NULL THEN 'accepted' WHEN NOT i.found THEN 'missing' ELSE 'taken' END, p.accepted_at
  FROM input i LEFT JOIN placed p ON p.id = i.id
 ORDER BY i.n`

// acceptLockSQL takes the accept locks of a group's products, in ascending order of their keys
// (the id's high and low halves: see lineLockKey on how the service's locks are kept apart).
const acceptLockSQL = `SELECT pg_advisory_xact_lock(hi, lo) FROM unnest($1::int[], $2::int[]) AS k(hi, lo) ORDER BY hi, lo`

// lockLineSQL takes a line's lock if it is free and then gives the session a lease: Postgres
// ends a session idle for longer than idle_session_timeout, and its advisory locks with it. A
// drain reads each round's orders on this session, so a working drain renews the lease every
// round; a holder that stops working without dying — a paused process keeps its TCP
// connection, and the kernel answers keepalives for it — loses the line after the lease, and
// the next job takes it over. A dead holder loses it at once, with its connection.
const lockLineSQL = `
SELECT CASE WHEN pg_try_advisory_lock($1::bigint) THEN set_config('idle_session_timeout', $2, false) IS NOT NULL ELSE false END`

// unlockLineSQL lets go of the line and takes the lease off the session, which goes back to
// the pool.
const unlockLineSQL = `SELECT pg_advisory_unlock($1::bigint), set_config('idle_session_timeout', '0', false)`

// Accepted is the store of orders accepted for later.
type Accepted struct {
	pool    *pgxpool.Pool
	reasons Reasons
	// barrier is replicatedSQL (syncrep.go); a test puts in its place a statement that draws
	// the warning of a commit whose wait for a synchronous standby was ended early.
	barrier string
}

// Reasons are the values async_orders.reason takes for the two rejections this store decides
// itself: the caller's vocabulary (package async's Reason), which the store writes and reads
// back without knowing what they mean.
type Reasons struct {
	SoldOut  string // not enough stock when the order's turn came (its record is a refusal)
	Internal string // deciding the order failed too many times (Fail)
}

// NewAccepted returns the store of orders accepted for later over pool, rejecting with reasons.
func NewAccepted(pool *pgxpool.Pool, reasons Reasons) *Accepted {
	return &Accepted{pool: pool, reasons: reasons, barrier: replicatedSQL}
}

// Tx runs fn in a transaction, committed when fn returns nil, on a connection of its own: an
// acceptance is acknowledged (202) only once a synchronous standby has it, so a commit Postgres
// answered without one is stock.ErrUnavailable with stock.ErrOutcomeUnknown (writeReplicated),
// and a retry under the same key finds the order once a standby has it (KeyRecord). fn's own
// errors are returned as they are.
func (s *Accepted) Tx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	return writeReplicated(ctx, s.pool, "accept orders", func(conn *pgxpool.Conn) error {
		return pgx.BeginFunc(ctx, conn, fn)
	})
}

// queueError classifies a failure of the queue's statements: any but the caller's own
// cancellation leaves the orders pending, to be tried again, so it is ErrUnavailable.
func queueError(op string, err error) error {
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	return fmt.Errorf("%w: %s: %w", stock.ErrUnavailable, op, err)
}

// KeyRecord is what an Idempotency-Key held when an order tried to claim it.
type KeyRecord struct {
	Fingerprint []byte
	Outcome     string
	OrderID     *uuid.UUID // a confirmed order's
	AcceptedID  *uuid.UUID // an order accepted for later's
	// ProductID, Requested and Available describe a refusal.
	ProductID, Requested, Available *int64
}

// RowQuerier is a pool or a transaction.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// KeyRecord reads what key holds, to be answered to its client: a record of an order (accepted
// or confirmed) is returned only once a synchronous standby has it — the commit that stored it
// may have been answered without one (Tx) — and stock.ErrUnavailable until then.
func (s *Accepted) KeyRecord(ctx context.Context, key stock.RecordKey) (KeyRecord, error) {
	r, err := keyRecord(ctx, s.pool, key)
	if err != nil || r.AcceptedID == nil && r.OrderID == nil {
		return r, err
	}
	if err := replicated(ctx, s.pool, s.barrier); err != nil {
		return KeyRecord{}, notReplicated("read idempotency record", err)
	}
	return r, nil
}

func keyRecord(ctx context.Context, q RowQuerier, key stock.RecordKey) (KeyRecord, error) {
	var r KeyRecord
	err := q.QueryRow(ctx, keyRecordSQL, key.CustomerID, key.Key).Scan(&r.Fingerprint, &r.Outcome, &r.OrderID, &r.AcceptedID, &r.ProductID, &r.Requested, &r.Available)
	if err != nil {
		return KeyRecord{}, queueError("read idempotency record", err)
	}
	return r, nil
}

func splitItems(items []stock.Item) (ids, qtys []int64) {
	ids, qtys = make([]int64, len(items)), make([]int64, len(items))
	for i, it := range items {
		ids[i], qtys[i] = it.ProductID, it.Quantity
	}
	return ids, qtys
}

func joinItems(ids, qtys []int64) []stock.Item {
	items := make([]stock.Item, len(ids))
	for i := range ids {
		items[i] = stock.Item{ProductID: ids[i], Quantity: qtys[i]}
	}
	return items
}

// missingProduct returns the first of ids that is not a product.
func missingProduct(ctx context.Context, tx pgx.Tx, ids []int64) (int64, bool, error) {
	rows, err := tx.Query(ctx, `SELECT id FROM products WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, false, queueError("look up products", err)
	}
	found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return 0, false, queueError("look up products", err)
	}
	for _, id := range ids {
		if !slices.Contains(found, id) {
			return id, true, nil
		}
	}
	return 0, false, nil
}

// AcceptCart writes cart id in tx (carts are in no line) and claims its key, when it has one.
// A key that already has an outcome claims nothing: taken is then true, and the caller rolls tx
// back and answers the key's record (KeyRecord). Errors: *stock.ProductNotFoundError,
// stock.ErrUnavailable.
func (s *Accepted) AcceptCart(ctx context.Context, tx pgx.Tx, id uuid.UUID, p stock.Prepared) (at time.Time, taken bool, err error) {
	ids, qtys := splitItems(p.Items)
	missing, ok, err := missingProduct(ctx, tx, ids)
	if err != nil {
		return time.Time{}, false, err
	}
	if ok {
		return time.Time{}, false, &stock.ProductNotFoundError{ProductID: missing}
	}
	if err := tx.QueryRow(ctx, insertCartSQL, id, p.CustomerID, ids, qtys).Scan(&at); err != nil {
		return time.Time{}, false, queueError("accept order", err)
	}
	if p.Key == "" {
		return at, false, nil
	}
	var claimed string
	err = tx.QueryRow(ctx, claimKeySQL, p.CustomerID, p.Key, p.Fingerprint, id, nil).Scan(&claimed)
	if errors.Is(err, pgx.ErrNoRows) {
		return at, true, nil
	}
	if err != nil {
		return time.Time{}, false, queueError("claim idempotency key", err)
	}
	return at, false, nil
}

// NewAcceptance is one order of a group accepted together (AcceptGroup).
type NewAcceptance struct {
	ID          uuid.UUID
	CustomerID  string
	ProductID   int64
	Quantity    int64
	Key         string // "" for none
	Fingerprint []byte
}

// AcceptState is what became of an order of a group.
type AcceptState string

const (
	// AcceptedInLine: in its product's line, with its acceptance time.
	AcceptedInLine AcceptState = "accepted"
	// AcceptTaken: its key already had an outcome, or an order earlier in the group claimed
	// it; nothing was written for it.
	AcceptTaken AcceptState = "taken"
	// AcceptMissing: no such product; nothing was written.
	AcceptMissing AcceptState = "missing"
)

// AcceptOutcome is what became of one order of a group, and when it was accepted.
type AcceptOutcome struct {
	State AcceptState
	At    time.Time
}

// AcceptGroup writes a group of single-product orders in tx, in one round trip: it holds the
// accept locks (lockHi, lockLo: see acceptLockSQL) until tx ends, ends tx should its session
// sit idle in it, and accepts the orders (acceptSQL). It returns an outcome per order, in the
// group's order.
func (s *Accepted) AcceptGroup(ctx context.Context, tx pgx.Tx, group []NewAcceptance, lockHi, lockLo []int32) ([]AcceptOutcome, error) {
	n := len(group)
	ids, customers, products, quantities := make([]uuid.UUID, n), make([]string, n), make([]int64, n), make([]int64, n)
	keys, fingerprints := make([]*string, n), make([][]byte, n)
	for i, o := range group {
		ids[i], customers[i], products[i], quantities[i] = o.ID, o.CustomerID, o.ProductID, o.Quantity
		if o.Key != "" {
			keys[i], fingerprints[i] = &group[i].Key, o.Fingerprint
		}
	}
	out := make([]AcceptOutcome, n)
	b := &pgx.Batch{}
	b.Queue(`SET LOCAL idle_in_transaction_session_timeout = '5s'`)
	b.Queue(acceptLockSQL, lockHi, lockLo)
	i := 0
	b.Queue(acceptSQL, ids, customers, products, quantities, keys, fingerprints).Query(func(rows pgx.Rows) error {
		var (
			id    uuid.UUID
			state string
			at    *time.Time
		)
		_, err := pgx.ForEachRow(rows, []any{&id, &state, &at}, func() error {
			if i >= n || id != ids[i] {
				return fmt.Errorf("accept: row %d is order %s, want %s", i, id, ids[i])
			}
			out[i].State = AcceptState(state)
			if at != nil {
				out[i].At = *at
			}
			i++
			return nil
		})
		return err
	})
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return nil, err
	}
	if i != n {
		return nil, fmt.Errorf("accept: %d rows for %d orders", i, n)
	}
	return out, nil
}

// PendingOrder is an order at the front of its line.
type PendingOrder struct {
	ID         uuid.UUID
	CustomerID string
	Items      []stock.Item
}

// Line reads the front of product's line, at most limit orders, through q (the line lock's own
// session, whose lease each read renews: see lockLineSQL).
func (s *Accepted) Line(ctx context.Context, q Querier, productID int64, limit int) ([]PendingOrder, error) {
	if q == nil {
		q = s.pool
	}
	rows, err := q.Query(ctx, lineSQL, productID, limit)
	if err != nil {
		return nil, queueError("read line", err)
	}
	var out []PendingOrder
	var ids, qtys []int64
	var p PendingOrder
	_, err = pgx.ForEachRow(rows, []any{&p.ID, &p.CustomerID, &ids, &qtys}, func() error {
		out = append(out, PendingOrder{ID: p.ID, CustomerID: p.CustomerID, Items: joinItems(ids, qtys)})
		return nil
	})
	if err != nil {
		return nil, queueError("read line", err)
	}
	return out, nil
}

// Order statuses and reasons as async_orders holds them.
const (
	StatusPending   = "pending"
	StatusConfirmed = stock.OrderStatusConfirmed
	StatusRejected  = "rejected"
)

// AcceptedOrder is an order accepted for later, as its row and, while the row says pending,
// its decision record say it stands.
type AcceptedOrder struct {
	ID         uuid.UUID
	CustomerID string
	Items      []stock.Item
	Status     string // StatusPending, StatusConfirmed or StatusRejected
	AcceptedAt time.Time
	DecidedAt  time.Time // zero while pending
	// Reason, ProductID, Requested and Available describe a rejection (Reason "" for none).
	Reason                          string
	ProductID, Requested, Available int64
	// Copied is false while the row itself still says pending: the decision, if there is one,
	// is only in its record (Status shows it), and still to be copied.
	Copied bool
}

// Order returns the accepted order id. Errors: stock.ErrOrderNotFound, stock.ErrUnavailable.
func (s *Accepted) Order(ctx context.Context, id uuid.UUID) (AcceptedOrder, error) {
	var (
		o                                AcceptedOrder
		ids, qtys                        []int64
		reason, kOutcome                 *string
		rProduct, rRequested, rAvailable *int64
		kProduct, kRequested, kAvailable *int64
		decidedAt, kCreated              *time.Time
	)
	err := s.pool.QueryRow(ctx, orderSQL, id, stock.AcceptedKey(id)).Scan(&o.ID, &o.CustomerID, &ids, &qtys, &o.Status,
		&reason, &rProduct, &rRequested, &rAvailable, &o.AcceptedAt, &decidedAt,
		&kOutcome, &kProduct, &kRequested, &kAvailable, &kCreated)
	if errors.Is(err, pgx.ErrNoRows) {
		return AcceptedOrder{}, stock.ErrOrderNotFound
	}
	if err != nil {
		return AcceptedOrder{}, queueError("read accepted order", err)
	}
	o.Items = joinItems(ids, qtys)
	o.Copied = o.Status != StatusPending
	if decidedAt != nil {
		o.DecidedAt = *decidedAt
	}
	if reason != nil {
		o.Reason, o.ProductID, o.Requested, o.Available = *reason, deref(rProduct), deref(rRequested), deref(rAvailable)
	}
	// Decided, not yet copied: the record is the decision.
	if o.Status == StatusPending && kOutcome != nil {
		o.DecidedAt = *kCreated
		switch *kOutcome {
		case recordConfirmed:
			o.Status = StatusConfirmed
		case recordFailed:
			o.Status, o.Reason = StatusRejected, s.reasons.Internal
		default:
			o.Status = StatusRejected
			o.Reason, o.ProductID, o.Requested, o.Available = s.reasons.SoldOut, deref(kProduct), deref(kRequested), deref(kAvailable)
		}
	}
	return o, nil
}

// Decided is one order's decision as copied into its row, and how long it waited for it (on
// Postgres's clock, the one that stamped its acceptance).
type Decided struct {
	Status string
	Waited time.Duration
}

// Record makes the decisions of orders final: refusals the purchase path did not store are
// stored, and every order with a record gets its decision copied. Orders whose decision is no
// record (rejects, by id, with their reason) are rejected with it. It returns what this call
// decided.
func (s *Accepted) Record(ctx context.Context, orders []PendingOrder, decisions []stock.Decision, rejects map[uuid.UUID]string) ([]Decided, error) {
	var customers, keys, outcomes []string
	var fingerprints [][]byte
	var products, requested, available []int64
	ids := make([]uuid.UUID, 0, len(orders))
	for i, o := range orders {
		d := decisions[i]
		if _, ok := rejects[o.ID]; ok {
			continue
		}
		if soldOut, ok := errors.AsType[*stock.SoldOutError](d.Err); ok {
			customers, keys = append(customers, o.CustomerID), append(keys, stock.AcceptedKey(o.ID))
			fingerprints = append(fingerprints, stock.Fingerprint(o.CustomerID, o.Items))
			outcomes = append(outcomes, recordSoldOut)
			products, requested, available = append(products, soldOut.ProductID), append(requested, soldOut.Requested), append(available, soldOut.Available)
		}
		// Every order's record is copied if it has one, decided by this round or not: an
		// order that failed may have been decided by an earlier round whose copy was lost.
		ids = append(ids, o.ID)
	}
	var out []Decided
	if len(ids) > 0 {
		b := &pgx.Batch{}
		if len(keys) > 0 {
			b.Queue(storeRefusalsSQL, customers, keys, fingerprints, outcomes, products, requested, available)
		}
		b.Queue(copyDecisionsSQL, ids, stock.AcceptedKeyPrefix, s.reasons.SoldOut, s.reasons.Internal).
			Query(func(rows pgx.Rows) error {
				var d Decided
				var secs float64
				_, err := pgx.ForEachRow(rows, []any{&d.Status, &secs}, func() error {
					d.Waited = time.Duration(secs * float64(time.Second))
					out = append(out, d)
					return nil
				})
				return err
			})
		if err := s.pool.SendBatch(ctx, b).Close(); err != nil {
			return nil, queueError("record decisions", err)
		}
	}
	for id, reason := range rejects {
		var secs float64
		err := s.pool.QueryRow(ctx, rejectSQL, id, reason).Scan(&secs)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return out, queueError("reject order", err)
		}
		out = append(out, Decided{Status: StatusRejected, Waited: time.Duration(secs * float64(time.Second))})
	}
	return out, nil
}

// Failure is what counting a failed attempt did: the order's status ("" when the order was no
// longer pending, or had a record), its attempts, and, when rejected, how long it waited.
type Failure struct {
	Status   string
	Attempts int
	Waited   time.Duration
}

// Fail counts a failed attempt to decide order o, rejecting it (reason internal) at the attempt
// that reaches maxAttempts, by a record under its key (see failSQL); cause is kept for
// operators.
func (s *Accepted) Fail(ctx context.Context, o PendingOrder, maxAttempts int, cause string) (Failure, error) {
	var f Failure
	var secs float64
	err := s.pool.QueryRow(ctx, failSQL, o.ID, maxAttempts, cause, stock.AcceptedKey(o.ID), s.reasons.Internal,
		stock.Fingerprint(o.CustomerID, o.Items)).Scan(&f.Status, &f.Attempts, &secs)
	if errors.Is(err, pgx.ErrNoRows) {
		return Failure{}, nil
	}
	if err != nil {
		return Failure{}, queueError("count a failed attempt", err)
	}
	f.Waited = time.Duration(secs * float64(time.Second))
	return f, nil
}

// Stale returns the products whose line has waited undrained longer than line, and the carts
// that have waited undecided longer than cart.
func (s *Accepted) Stale(ctx context.Context, line, cart time.Duration) ([]int64, []uuid.UUID, error) {
	rows, err := s.pool.Query(ctx, staleSQL, line, cart)
	if err != nil {
		return nil, nil, queueError("find stale lines", err)
	}
	var products []int64
	var carts []uuid.UUID
	var product *int64
	var cartID *uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&product, &cartID}, func() error {
		if product != nil {
			products = append(products, *product)
		} else if cartID != nil {
			carts = append(carts, *cartID)
		}
		return nil
	})
	if err != nil {
		return nil, nil, queueError("find stale lines", err)
	}
	return products, carts, nil
}

// PendingCount counts the orders still pending.
func (s *Accepted) PendingCount(ctx context.Context) (int64, error) {
	var n int64
	if err := s.pool.QueryRow(ctx, pendingCountSQL).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}

// LineAge is how long the front of a line (a product's, or "cart" for the carts) has waited.
type LineAge struct {
	Line    string
	Seconds float64
}

// OldestPending returns the limit lines whose front has waited longest, longest first.
func (s *Accepted) OldestPending(ctx context.Context, limit int) ([]LineAge, error) {
	rows, err := s.pool.Query(ctx, oldestPendingSQL, limit)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[LineAge])
}

// LineLock is a held advisory lock on a product's line, on the pool connection that took it.
type LineLock struct {
	// Conn is the session that holds the lock; read the line on it (Line) to renew its lease.
	Conn *pgxpool.Conn
	key  int64
}

// LockLine takes the line lock key if it is free, with a lease of lease on its session (see
// lockLineSQL); nil, nil when another session holds it.
func (s *Accepted) LockLine(ctx context.Context, key int64, lease time.Duration) (*LineLock, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, queueError("acquire connection for the line lock", err)
	}
	var got bool
	if err := conn.QueryRow(ctx, lockLineSQL, key, fmt.Sprint(lease.Milliseconds())).Scan(&got); err != nil {
		conn.Release()
		return nil, queueError("lock line", err)
	}
	if !got {
		conn.Release()
		return nil, nil
	}
	return &LineLock{Conn: conn, key: key}, nil
}

// Unlock lets go of the line; safe to call twice. A connection whose unlock failed is closed,
// never returned to the pool still holding the lock (closing it lets go of the lock too).
func (l *LineLock) Unlock() {
	if l == nil || l.Conn == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := l.Conn.Exec(ctx, unlockLineSQL, l.key); err != nil {
		_ = l.Conn.Conn().Close(ctx)
	}
	l.Conn.Release()
	l.Conn = nil
}

// LockAcceptGroup takes products' accept locks in tx, as AcceptGroup does; for tests that hold
// them to see what waits.
func LockAcceptGroup(ctx context.Context, tx pgx.Tx, lockHi, lockLo []int32) error {
	_, err := tx.Exec(ctx, acceptLockSQL, lockHi, lockLo)
	return err
}
