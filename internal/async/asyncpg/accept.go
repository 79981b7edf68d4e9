package asyncpg

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// The outcome column of idempotency_keys, as the schema names its values (migrations 1, 4 and
// 11), where the statements here read or write them as arguments; those they write as literals
// ('accepted', 'failed') are in the statements.
const (
	outcomeConfirmed = "confirmed"
	outcomeSoldOut   = "sold_out"
	outcomeFailed    = "failed"
)

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

// acceptStates are acceptSQL's answers.
var acceptStates = map[string]async.AcceptState{"accepted": async.Accepted, "taken": async.KeyTaken, "missing": async.NoSuchProduct}

// acceptLockSQL takes the accept locks of a group's products, in ascending order of their keys
// (acceptLockKeys).
const acceptLockSQL = `SELECT pg_advisory_xact_lock(hi, lo) FROM unnest($1::int[], $2::int[]) AS k(hi, lo) ORDER BY hi, lo`

// idleInTxSQL ends a group's transaction should its session sit idle in it: a replica paused
// between the group's statement and its COMMIT (its connection stays up) would otherwise hold
// every other replica's groups of its products.
const idleInTxSQL = `SET LOCAL idle_in_transaction_session_timeout = '5s'`

// distinct returns ids without repeats, in first-seen order.
func distinct(ids []int64) []int64 {
	var out []int64
	for _, id := range ids {
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// Accept implements async.Store: one transaction of a River insert and one round trip.
//
// The drain jobs go first, for every product of the group (a job for a product that turns out
// missing finds an empty line): they need no lock, and the accept locks are held until the
// commit, so what runs under them is kept to one round trip. A line's order is its seq, and a
// drain reads the committed front of the line: so a product's groups must commit in the order
// they draw seq, or a drain could decide a later group before an earlier one became visible.
// Each group therefore holds its products' accept locks (ascending, so groups never deadlock)
// until it commits; the groups of one product follow each other, each as large as what
// gathered meanwhile.
func (s *Store) Accept(ctx context.Context, orders []async.NewOrder) ([]async.AcceptOutcome, error) {
	n := len(orders)
	ids, customers, products, quantities := make([]uuid.UUID, n), make([]string, n), make([]int64, n), make([]int64, n)
	keys, fingerprints := make([]*string, n), make([][]byte, n)
	for i, o := range orders {
		it := o.Request.Items[0]
		ids[i], customers[i], products[i], quantities[i] = o.ID, o.Request.CustomerID, it.ProductID, it.Quantity
		if o.Request.Key != "" {
			keys[i], fingerprints[i] = &orders[i].Request.Key, o.Request.Fingerprint
		}
	}
	out := make([]async.AcceptOutcome, n)
	err := s.tx(ctx, func(tx pgx.Tx) error {
		var jobs []river.InsertManyParams
		for _, id := range distinct(products) {
			jobs = append(jobs, river.InsertManyParams{Args: drainArgs{ProductID: id}})
		}
		if _, err := s.inserts.InsertManyTx(ctx, tx, jobs); err != nil {
			return fmt.Errorf("enqueue drains: %w", err)
		}
		hi, lo := acceptLockKeys(products)
		b := &pgx.Batch{}
		b.Queue(idleInTxSQL)
		b.Queue(acceptLockSQL, hi, lo)
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
				out[i].State = acceptStates[state]
				if at != nil {
					out[i].At = *at
				}
				i++
				return nil
			})
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if i != n {
			return fmt.Errorf("accept: %d rows for %d orders", i, n)
		}
		return nil
	})
	if err != nil {
		return nil, storeError("accept orders", err)
	}
	return out, nil
}

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

// productsSQL returns which of some products exist.
const productsSQL = `SELECT id FROM products WHERE id = ANY($1)`

// AcceptCart implements async.Store: the cart, its key and its job in one transaction.
func (s *Store) AcceptCart(ctx context.Context, o async.NewOrder) (time.Time, error) {
	p := o.Request
	ids, qtys := splitItems(p.Items)
	var at time.Time
	err := s.tx(ctx, func(tx pgx.Tx) error {
		rows, _ := tx.Query(ctx, productsSQL, ids)
		found, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			return err
		}
		for _, id := range ids {
			if !slices.Contains(found, id) {
				return &stock.ProductNotFoundError{ProductID: id}
			}
		}
		if err := tx.QueryRow(ctx, insertCartSQL, o.ID, p.CustomerID, ids, qtys).Scan(&at); err != nil {
			return err
		}
		if p.Key != "" {
			var claimed string
			err := tx.QueryRow(ctx, claimKeySQL, p.CustomerID, p.Key, p.Fingerprint, o.ID, nil).Scan(&claimed)
			if errors.Is(err, pgx.ErrNoRows) {
				return async.ErrKeyTaken // rolled back: nothing is written
			}
			if err != nil {
				return err
			}
		}
		_, err = s.inserts.InsertTx(ctx, tx, cartArgs{OrderID: o.ID}, nil)
		return err
	})
	if _, missing := errors.AsType[*stock.ProductNotFoundError](err); missing || errors.Is(err, async.ErrKeyTaken) {
		return time.Time{}, err
	}
	if err != nil {
		return time.Time{}, storeError("accept order", err)
	}
	return at, nil
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

// Order implements async.Store: the order's row, and while it says pending, its record.
func (s *Store) Order(ctx context.Context, id uuid.UUID) (async.Stored, error) {
	var (
		o                                async.Stored
		ids, qtys                        []int64
		reason, kOutcome                 *string
		rProduct, rRequested, rAvailable *int64
		kProduct, kRequested, kAvailable *int64
		decidedAt, kCreated              *time.Time
	)
	err := s.pool.QueryRow(ctx, orderSQL, id, stock.AcceptedKey(id)).Scan(&o.ID, &o.CustomerID, &ids, &qtys, &o.Status,
		&reason, &rProduct, &rRequested, &rAvailable, &o.AcceptedAt, &decidedAt,
		&kOutcome, &kProduct, &kRequested, &kAvailable, &kCreated)
	if err != nil {
		return async.Stored{}, storeError("read accepted order", err)
	}
	o.Items = joinItems(ids, qtys)
	o.Copied = o.Status != async.StatusPending
	if decidedAt != nil {
		o.DecidedAt = *decidedAt
	}
	if reason != nil {
		o.Rejection = &async.Rejection{Reason: async.Reason(*reason), ProductID: deref(rProduct), Requested: deref(rRequested), Available: deref(rAvailable)}
	}
	// Decided, not yet copied: the record is the decision.
	if o.Status == async.StatusPending && kOutcome != nil {
		o.DecidedAt = *kCreated
		switch *kOutcome {
		case outcomeConfirmed:
			o.Status = async.StatusConfirmed
		case outcomeFailed:
			o.Status, o.Rejection = async.StatusRejected, &async.Rejection{Reason: async.ReasonInternal}
		default:
			o.Status = async.StatusRejected
			o.Rejection = &async.Rejection{Reason: async.ReasonSoldOut, ProductID: deref(kProduct), Requested: deref(kRequested), Available: deref(kAvailable)}
		}
	}
	return o, nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}
