package stockpg

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/puddle/v2"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/syncrep"
)

// Store is the stock.Store on Postgres: the only package that knows the schema of products,
// orders, order items, restocks and idempotency records (but the records of orders accepted for
// later, package asyncpg's).
type Store struct {
	pool *pgxpool.Pool
	// commit and commitSkipping are the purchase path's two write statements: commitSQL and
	// commitSkippingSQL, except in a demonstration store (NewDemo).
	commit, commitSkipping string
	// conditions are those the purchase writes carry, named in their refusals.
	conditions stock.Defense
	// barrier is syncrep.Barrier; a test puts in its place a statement that draws the warning
	// of a commit whose wait for a synchronous standby was ended early.
	barrier string
	// skipping counts down the writes that may leave orders out which are still sent straight
	// as commitSkipping since one found a key stored (Commit).
	skipping atomic.Int64
}

var _ stock.Store = (*Store)(nil)

// RowQuerier is a pool, a connection or a transaction.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// New returns the production Store over pool, whose every purchase write carries every
// condition of the defense. The schema comes from package migrations.
func New(pool *pgxpool.Pool) *Store {
	return &Store{pool: pool, commit: commitSQL, commitSkipping: commitSkippingSQL, conditions: stock.DefaultDefense(), barrier: syncrep.Barrier}
}

const productColumns = `id, sku, name, stock, version, created_at, updated_at, sale_starts_at, sale_ends_at,
	coalesce(max_per_customer, 0) AS max_per_customer, coalesce(hold_for_seconds, 0)::bigint * 1000000000 AS hold_for,
	max_held_per_customer, coalesce(line_admit, 0)::bigint AS line_admit,
	coalesce(line_admission_seconds, 0)::bigint * 1000000000 AS line_admission_for`

// CreateProduct implements Store.
func (s *Store) CreateProduct(ctx context.Context, p stock.NewProduct) (stock.Product, error) {
	rows, _ := s.pool.Query(ctx, `
		INSERT INTO products (sku, name, stock, initial_stock, sale_starts_at, sale_ends_at, max_per_customer, hold_for_seconds,
		                      max_held_per_customer, line_admit, line_admission_seconds)
		VALUES ($1, $2, $3, $3, $4, $5, nullif($6, 0), nullif($7, 0), $8, nullif($9, 0), nullif($10, 0))
		RETURNING `+productColumns, p.SKU, p.Name, p.Stock, p.Sale.StartsAt, p.Sale.EndsAt, p.Sale.MaxPerCustomer,
		int64(p.Sale.HoldFor/time.Second), cmp.Or(p.Sale.MaxHeldPerCustomer, stock.DefaultMaxQuantity),
		p.Sale.Line.Admit, int64(p.Sale.Line.AdmissionFor/time.Second))
	prod, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[stock.Product])
	if err != nil {
		if constraintViolated(err, "23505", "products_sku_key") {
			return stock.Product{}, stock.ErrDuplicateSKU
		}
		if invalid := refusedRule(err); invalid != nil {
			return stock.Product{}, invalid
		}
		return stock.Product{}, dbError("create product", err)
	}
	return prod, nil
}

// refusedRule reads a sale rule that a CHECK of products refused — the service checks them
// first, so only a caller that did not gets here — as the *stock.ValidationError the service
// would have answered; nil for any other error.
func refusedRule(err error) error {
	switch {
	case constraintViolated(err, "23514", "products_sale_window"):
		return &stock.ValidationError{Field: "sale_ends_at", Reason: "must be after sale_starts_at"}
	case constraintViolated(err, "23514", "products_hold_for_range"):
		return &stock.ValidationError{Field: "hold_for", Reason: fmt.Sprintf("must be whole seconds between 1 and %d", int(stock.MaxHoldFor/time.Second))}
	case constraintViolated(err, "23514", "products_max_held_positive"):
		return &stock.ValidationError{Field: "max_held_per_customer", Reason: "must be at least 1"}
	}
	return nil
}

// Product implements Store.
func (s *Store) Product(ctx context.Context, id int64) (stock.Product, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+productColumns+` FROM products WHERE id = $1`, id)
	prod, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[stock.Product])
	if errors.Is(err, pgx.ErrNoRows) {
		return stock.Product{}, &stock.ProductNotFoundError{ProductID: id}
	}
	if err != nil {
		return stock.Product{}, dbError("get product", err)
	}
	return prod, nil
}

// HighestProductID implements Store: one backward step on the primary key's index. Ids are an
// identity column, taken when an insert begins and never reused, so an id below the answer may
// still belong to an insert that has not committed: the answer says which ids did not exist
// when the statement read, not which never will.
func (s *Store) HighestProductID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM products`).Scan(&id); err != nil {
		return 0, dbError("highest product id", err)
	}
	return id, nil
}

// StoredKeys implements Store. Refusals name their product in idempotency_keys (a partial
// index, migration 3); confirmed orders are found through their items.
func (s *Store) StoredKeys(ctx context.Context, id int64, limit int) ([]stock.RecordKey, error) {
	rows, _ := s.pool.Query(ctx, `
		(SELECT k.customer_id, k.key FROM order_items i JOIN idempotency_keys k ON k.order_id = i.order_id WHERE i.product_id = $1)
		UNION ALL
		(SELECT customer_id, key FROM idempotency_keys WHERE product_id = $1)
		LIMIT $2`, id, limit)
	keys, err := pgx.CollectRows(rows, pgx.RowToStructByPos[stock.RecordKey])
	if err != nil {
		return nil, dbError("stored keys", err)
	}
	return keys, nil
}

// Restock implements Store.
func (s *Store) Restock(ctx context.Context, r stock.Restocking) (stock.RestockResult, error) {
	var res stock.RestockResult
	err := s.inTx(ctx, "restock", func(tx pgx.Tx) error {
		if r.Key != "" {
			stored, found, err := storedRestock(ctx, tx, r)
			if err != nil || found {
				res = stored
				return err
			}
		}
		// Without a lock (fence 0) the fence is neither checked nor moved.
		fenceCheck := ""
		if r.Fence > 0 {
			fenceCheck = ` AND fence <= $3`
		}
		rows, _ := tx.Query(ctx, `
			UPDATE products
			   SET stock = stock + $2, version = version + 1, fence = GREATEST(fence, $3), updated_at = now()
			 WHERE id = $1`+fenceCheck+`
			RETURNING `+productColumns, r.ProductID, r.Quantity, r.Fence)
		var err error
		res.Product, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[stock.Product])
		if errors.Is(err, pgx.ErrNoRows) {
			return s.restockRefusal(ctx, tx, r.ProductID, r.Fence)
		}
		if err != nil {
			return dbError("restock", err)
		}
		var key *string
		var fingerprint []byte
		var after, version *int64
		if r.Key != "" {
			key, fingerprint, after, version = &r.Key, r.Fingerprint, &res.Product.Stock, &res.Product.Version
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO restocks (product_id, quantity, idempotency_key, fingerprint, stock_after, version_after)
			VALUES ($1, $2, $3, $4, $5, $6)`, r.ProductID, r.Quantity, key, fingerprint, after, version)
		if constraintViolated(err, "23505", "restocks_idempotency_key") {
			return fmt.Errorf("%w: restock key stored meanwhile: %w", stock.ErrConflict, err)
		}
		if err != nil {
			return dbError("record restock", err)
		}
		return nil
	})
	if err != nil {
		return stock.RestockResult{}, err
	}
	if res.Replayed {
		// The restock under the key is acknowledged again: only once a standby has it (its
		// own commit's wait may have been ended early, and its admin told 503).
		if err := s.replicated(ctx); err != nil {
			return stock.RestockResult{}, notReplicated("replay restock", err)
		}
	}
	return res, nil
}

// storedRestock returns the restock stored under r.Key, as the product was right after it.
func storedRestock(ctx context.Context, tx pgx.Tx, r stock.Restocking) (stock.RestockResult, bool, error) {
	var (
		productID, after, version int64
		fingerprint               []byte
		at                        time.Time
	)
	err := tx.QueryRow(ctx, `SELECT product_id, fingerprint, stock_after, version_after, created_at
	                           FROM restocks WHERE idempotency_key = $1`, r.Key).
		Scan(&productID, &fingerprint, &after, &version, &at)
	if errors.Is(err, pgx.ErrNoRows) {
		return stock.RestockResult{}, false, nil
	}
	if err != nil {
		return stock.RestockResult{}, false, dbError("read stored restock", err)
	}
	if productID != r.ProductID || !bytes.Equal(fingerprint, r.Fingerprint) {
		return stock.RestockResult{}, true, stock.ErrIdempotencyKeyReused
	}
	rows, _ := tx.Query(ctx, `SELECT `+productColumns+` FROM products WHERE id = $1`, productID)
	p, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[stock.Product])
	if err != nil {
		return stock.RestockResult{}, false, dbError("read restocked product", err)
	}
	p.Stock, p.Version, p.UpdatedAt = after, version, at
	return stock.RestockResult{Product: p, Replayed: true}, true, nil
}

// inTx runs fn in a transaction. fn returns the package's errors (it maps its own driver errors
// with dbError); beginning and committing are mapped here. A commit Postgres answered without
// its synchronous standby is ErrUnavailable with ErrOutcomeUnknown (writeReplicated): what fn
// wrote is not acknowledged.
func (s *Store) inTx(ctx context.Context, op string, fn func(tx pgx.Tx) error) error {
	return writeReplicated(ctx, s.pool, op, func(conn *pgxpool.Conn) error {
		tx, err := conn.Begin(ctx)
		if err != nil {
			return dbError(op+": begin", err)
		}
		if err := fn(tx); err != nil {
			// A rollback that fails leaves nothing behind: Postgres ends the transaction when
			// the connection goes, and the pool drops a connection it could not roll back.
			_ = tx.Rollback(context.WithoutCancel(ctx))
			return err
		}
		if err := tx.Commit(ctx); err != nil {
			return dbError(op+": commit", err)
		}
		return nil
	})
}

// restockRefusal explains why a restock updated no row: the product is missing, or a holder
// with a newer fencing token has written it.
func (s *Store) restockRefusal(ctx context.Context, tx pgx.Tx, id, fence int64) error {
	var current int64
	err := tx.QueryRow(ctx, `SELECT fence FROM products WHERE id = $1`, id).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		return &stock.ProductNotFoundError{ProductID: id}
	}
	if err != nil {
		return dbError("restock", err)
	}
	return &stock.CaughtError{Layer: stock.LayerFence, ProductID: id, Err: fmt.Errorf("%w: fence %d is older than %d", stock.ErrLockLost, fence, current)}
}

// auditLockKey is the advisory lock a recount holds for its transaction, so that one recount
// runs at a time across every replica: a recount of a product with a million orders keeps a
// core of Postgres busy for seconds, and one per replica at once would take the sale's. The
// key is a bigint of its own among the service's advisory locks (see internal/async/asyncpg's
// lineLockKey for the others): positive, above every uint32 (golang-migrate's), and not under
// River's prefix (0x5707c5); its bytes spell "StkAudit".
const auditLockKey int64 = 0x53746b4175646974

// auditSQL recounts what product $1 received, sold and holds. The units of cancelled and
// expired holds are back in the stock, so they count in neither.
const auditSQL = `
SELECT p.id, p.stock,
       p.initial_stock + COALESCE((SELECT sum(r.quantity) FROM restocks r WHERE r.product_id = p.id), 0),
       COALESCE(s.sold, 0), COALESCE(s.held, 0)
  FROM products p
  LEFT JOIN LATERAL (
    SELECT sum(i.quantity) FILTER (WHERE o.status = 'confirmed') AS sold,
           sum(i.quantity) FILTER (WHERE o.status = 'held') AS held
      FROM order_items i JOIN orders o ON o.id = i.order_id
     WHERE i.product_id = p.id
  ) s ON true
 WHERE p.id = $1`

// Audit implements Store: the recount runs only if no other recount holds auditLockKey, and
// is refused with ErrBusy otherwise (nothing waits for it: a queue of recounts would outlast
// the callers who asked).
func (s *Store) Audit(ctx context.Context, id int64) (stock.Audit, error) {
	var a stock.Audit
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var got bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, auditLockKey).Scan(&got); err != nil {
			return dbError("audit: lock", err)
		}
		if !got {
			return fmt.Errorf("%w: another recount is running", stock.ErrBusy)
		}
		err := tx.QueryRow(ctx, auditSQL, id).Scan(&a.ProductID, &a.Stock, &a.Received, &a.Sold, &a.Held)
		if errors.Is(err, pgx.ErrNoRows) {
			return &stock.ProductNotFoundError{ProductID: id}
		}
		if err != nil {
			return dbError("audit", err)
		}
		return nil
	})
	if err != nil {
		if errors.Is(err, stock.ErrBusy) || errors.Is(err, stock.ErrProductNotFound) || errors.Is(err, stock.ErrUnavailable) {
			return stock.Audit{}, err
		}
		return stock.Audit{}, dbError("audit", err)
	}
	return a, nil
}

// orderSQL reads an order with its items, in one statement.
const orderSQL = `SELECT o.customer_id, o.status, o.created_at, o.expires_at, o.decided_at, ` + orderItemsSQL + `
  FROM orders o WHERE o.id = $1`

// orderItemsSQL is the items of order o (every statement that answers with an order reads
// them so, by the primary key of order_items): their products and quantities, by product.
const orderItemsSQL = `
       ARRAY(SELECT i.product_id FROM order_items i WHERE i.order_id = o.id ORDER BY i.product_id),
       ARRAY(SELECT i.quantity FROM order_items i WHERE i.order_id = o.id ORDER BY i.product_id)`

// scanOrder scans an order's columns as orderSQL lists them, then dest, into o (whose ID is
// set) and returns the row's error as it is.
func scanOrder(row pgx.Row, o *stock.Order, dest ...any) error {
	var products, quantities []int64
	err := row.Scan(append([]any{&o.CustomerID, &o.Status, &o.CreatedAt, &o.ExpiresAt, &o.DecidedAt, &products, &quantities}, dest...)...)
	if err != nil {
		return err
	}
	o.Items = make([]stock.Item, len(products))
	for i, id := range products {
		o.Items[i] = stock.Item{ProductID: id, Quantity: quantities[i]}
	}
	return nil
}

// Order implements Store.
func (s *Store) Order(ctx context.Context, id uuid.UUID) (stock.Order, error) {
	o := stock.Order{ID: id}
	err := scanOrder(s.pool.QueryRow(ctx, orderSQL, id), &o)
	if errors.Is(err, pgx.ErrNoRows) {
		return stock.Order{}, stock.ErrOrderNotFound
	}
	if err != nil {
		return stock.Order{}, dbError("get order", err)
	}
	return o, nil
}

// purgeBatch is the most idempotency records one purge statement deletes. A batch of a few
// thousand takes tens of milliseconds (an index range of idempotency_keys_created_at_idx, a TID
// scan), far below the pool's statement timeout, and holds its row locks only that long,
// however many records have piled up.
const purgeBatch = 5000

// purgeCutoffSQL is the purge's cutoff on Postgres's clock, the clock created_at was stamped
// with: a replica whose clock is off must neither keep records for ever nor purge fresh ones.
const purgeCutoffSQL = `SELECT now() - $1::interval`

// purgeKeysSQL deletes up to $4 records created before $1 and at or after $2 (the last batch's
// newest, so that each batch starts where the previous one stopped instead of walking over the
// rows it deleted), oldest first, and returns how many and the newest created_at deleted.
//
// It leaves the records of orders accepted for later — a client's key claimed by one
// (async_order_id), an order's decision record (key $3 || the order's id) — to package
// asyncpg's purge, which alone reads whether their order is still pending. Another customer's
// records under the same client keys are theirs, and go with their time. Rows another purge
// (another replica) has locked are skipped: it is deleting them.
const purgeKeysSQL = `
WITH deleted AS (
    DELETE FROM idempotency_keys WHERE ctid = ANY (ARRAY(
        SELECT k.ctid FROM idempotency_keys k
         WHERE k.created_at < $1 AND k.created_at >= $2
           AND k.async_order_id IS NULL AND NOT starts_with(k.key, $3)
         ORDER BY k.created_at
         LIMIT $4
         FOR UPDATE OF k SKIP LOCKED))
    RETURNING created_at)
SELECT count(*), max(created_at) FROM deleted`

// PurgeIdempotencyKeys implements Store: one statement for the cutoff, then batches of at most
// purgeBatch records, each its own transaction, until a batch deletes fewer.
func (s *Store) PurgeIdempotencyKeys(ctx context.Context, retention time.Duration) (int64, error) {
	var cutoff time.Time
	if err := s.pool.QueryRow(ctx, purgeCutoffSQL, retention).Scan(&cutoff); err != nil {
		return 0, dbError("purge idempotency keys: cutoff", err)
	}
	var total int64
	var from time.Time // the zero time is before every record
	for {
		var n int64
		var newest *time.Time
		if err := s.pool.QueryRow(ctx, purgeKeysSQL, cutoff, from, stock.AcceptedKeyPrefix, purgeBatch).Scan(&n, &newest); err != nil {
			return total, dbError("purge idempotency keys", err)
		}
		total += n
		if n < purgeBatch || newest == nil {
			return total, nil
		}
		from = *newest
	}
}

// constraintViolated reports whether err is a Postgres error with code on constraint.
func constraintViolated(err error, code, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code && pgErr.ConstraintName == constraint
}

// dbError translates a driver error into the package's errors, keeping the chain for logs:
// Postgres's own refusals by their SQLSTATE class, and failures to reach Postgres at all as
// ErrUnavailable. Anything else — a bug, such as a value pgx cannot encode — stays what it is
// and becomes a 500, not a misleading 503.
func dbError(op string, err error) error {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr):
		switch {
		case pgErr.Code == "55P03", pgErr.Code == "40001", pgErr.Code == "40P01":
			// lock_timeout, serialization failure, deadlock: contention, worth a retry.
			return fmt.Errorf("%w: %s: %w", stock.ErrBusy, op, err)
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57"), strings.HasPrefix(pgErr.Code, "53"):
			// Connection exceptions, operator intervention (shutdown, statement timeout),
			// insufficient resources (too many connections, disk full).
			return fmt.Errorf("%w: %s: %w", stock.ErrUnavailable, op, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	case errors.Is(err, context.Canceled):
		return fmt.Errorf("%s: %w", op, err)
	case Unreachable(err):
		return fmt.Errorf("%w: %s: %w", stock.ErrUnavailable, op, err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Unreachable reports whether err says Postgres could not be reached or did not answer: a
// failed dial, a broken or closed connection, a deadline, a closed pool. (linepg classes the
// line's driver errors by it too.)
func Unreachable(err error) bool {
	var (
		connectErr *pgconn.ConnectError
		netErr     net.Error
	)
	return errors.As(err, &connectErr) || errors.As(err, &netErr) || pgconn.Timeout(err) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, puddle.ErrClosedPool)
}
