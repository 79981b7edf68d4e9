package stock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// errNoRecord means no idempotency record exists under the key.
var errNoRecord = errors.New("stock: no idempotency record")

// PGStore is the Store on Postgres.
type PGStore struct {
	pool *pgxpool.Pool
	// afterRead, when set, runs inside the purchase transaction right after a product's stock
	// was read and before it is written. Tests use it to open the race window at will.
	afterRead func(ctx context.Context, productID int64)
}

var _ Store = (*PGStore)(nil)

// NewPGStore returns a Store over pool. The schema comes from package migrations.
func NewPGStore(pool *pgxpool.Pool) *PGStore {
	return &PGStore{pool: pool}
}

const productColumns = `id, sku, name, stock, version, created_at, updated_at`

// CreateProduct implements Store.
func (s *PGStore) CreateProduct(ctx context.Context, p NewProduct) (Product, error) {
	rows, _ := s.pool.Query(ctx, `
		INSERT INTO products (sku, name, stock, initial_stock) VALUES ($1, $2, $3, $3)
		RETURNING `+productColumns, p.SKU, p.Name, p.Stock)
	prod, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Product])
	if err != nil {
		if constraintViolated(err, "23505", "products_sku_key") {
			return Product{}, ErrDuplicateSKU
		}
		return Product{}, dbError("create product", err)
	}
	return prod, nil
}

// Product implements Store.
func (s *PGStore) Product(ctx context.Context, id int64) (Product, error) {
	rows, _ := s.pool.Query(ctx, `SELECT `+productColumns+` FROM products WHERE id = $1`, id)
	prod, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Product])
	if errors.Is(err, pgx.ErrNoRows) {
		return Product{}, &ProductNotFoundError{ProductID: id}
	}
	if err != nil {
		return Product{}, dbError("get product", err)
	}
	return prod, nil
}

// Restock implements Store.
func (s *PGStore) Restock(ctx context.Context, id, quantity, fence int64) (Product, error) {
	var prod Product
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Without a lock (fence 0) the fence is neither checked nor moved.
		fenceCheck := ""
		if fence > 0 {
			fenceCheck = ` AND fence <= $3`
		}
		rows, _ := tx.Query(ctx, `
			UPDATE products
			   SET stock = stock + $2, version = version + 1, fence = GREATEST(fence, $3), updated_at = now()
			 WHERE id = $1`+fenceCheck+`
			RETURNING `+productColumns, id, quantity, fence)
		var err error
		prod, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[Product])
		if errors.Is(err, pgx.ErrNoRows) {
			return s.restockRefusal(ctx, tx, id, fence)
		}
		if err != nil {
			return dbError("restock", err)
		}
		if _, err := tx.Exec(ctx, `INSERT INTO restocks (product_id, quantity) VALUES ($1, $2)`, id, quantity); err != nil {
			return dbError("record restock", err)
		}
		return nil
	})
	if err != nil {
		return Product{}, commitError("restock", err)
	}
	return prod, nil
}

// restockRefusal explains why a restock updated no row: the product is missing, or a holder
// with a newer fencing token has written it.
func (s *PGStore) restockRefusal(ctx context.Context, tx pgx.Tx, id, fence int64) error {
	var current int64
	err := tx.QueryRow(ctx, `SELECT fence FROM products WHERE id = $1`, id).Scan(&current)
	if errors.Is(err, pgx.ErrNoRows) {
		return &ProductNotFoundError{ProductID: id}
	}
	if err != nil {
		return dbError("restock", err)
	}
	return &CaughtError{Layer: LayerFence, ProductID: id, Err: fmt.Errorf("%w: fence %d is older than %d", ErrLockLost, fence, current)}
}

// StockLevels implements Store.
func (s *PGStore) StockLevels(ctx context.Context, ids []int64) (map[int64]int64, error) {
	rows, _ := s.pool.Query(ctx, `SELECT id, stock FROM products WHERE id = ANY($1)`, ids)
	levels := make(map[int64]int64, len(ids))
	var id, stock int64
	_, err := pgx.ForEachRow(rows, []any{&id, &stock}, func() error {
		levels[id] = stock
		return nil
	})
	if err != nil {
		return nil, dbError("read stock levels", err)
	}
	return levels, nil
}

// Audit implements Store.
func (s *PGStore) Audit(ctx context.Context, id int64) (Audit, error) {
	var a Audit
	err := s.pool.QueryRow(ctx, `
		SELECT p.id, p.stock,
		       p.initial_stock + COALESCE((SELECT sum(r.quantity) FROM restocks r WHERE r.product_id = p.id), 0),
		       COALESCE((SELECT sum(i.quantity)
		                   FROM order_items i JOIN orders o ON o.id = i.order_id
		                  WHERE i.product_id = p.id AND o.status = 'confirmed'), 0)
		  FROM products p WHERE p.id = $1`, id).Scan(&a.ProductID, &a.Stock, &a.Received, &a.Sold)
	if errors.Is(err, pgx.ErrNoRows) {
		return Audit{}, &ProductNotFoundError{ProductID: id}
	}
	if err != nil {
		return Audit{}, dbError("audit", err)
	}
	return a, nil
}

// Order implements Store.
func (s *PGStore) Order(ctx context.Context, id uuid.UUID) (Order, error) {
	o := Order{ID: id}
	err := s.pool.QueryRow(ctx, `SELECT customer_id, status, created_at FROM orders WHERE id = $1`, id).
		Scan(&o.CustomerID, &o.Status, &o.CreatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Order{}, ErrOrderNotFound
	}
	if err != nil {
		return Order{}, dbError("get order", err)
	}
	rows, _ := s.pool.Query(ctx, `SELECT product_id, quantity FROM order_items WHERE order_id = $1 ORDER BY product_id`, id)
	o.Items, err = pgx.CollectRows(rows, pgx.RowToStructByName[Item])
	if err != nil {
		return Order{}, dbError("get order items", err)
	}
	return o, nil
}

// PlaceOrder implements Store.
func (s *PGStore) PlaceOrder(ctx context.Context, p Purchase) (Order, error) {
	var order Order
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		for i, item := range p.Items {
			var fence int64
			if p.Fences != nil {
				fence = p.Fences[i]
			}
			if err := s.take(ctx, tx, p.Defense, item, fence); err != nil {
				return err
			}
		}
		var err error
		order, err = insertOrder(ctx, tx, p)
		return err
	})
	if err != nil {
		return Order{}, commitError("place order", err)
	}
	return order, nil
}

// take decrements one product's stock inside the purchase transaction, under the conditions
// the defense selects, and explains any refusal by the layer that made it.
func (s *PGStore) take(ctx context.Context, tx pgx.Tx, d Defense, item Item, fence int64) error {
	var stock, version int64
	err := tx.QueryRow(ctx, `SELECT stock, version FROM products WHERE id = $1`, item.ProductID).Scan(&stock, &version)
	if errors.Is(err, pgx.ErrNoRows) {
		return &ProductNotFoundError{ProductID: item.ProductID}
	}
	if err != nil {
		return dbError("read stock", err)
	}
	if s.afterRead != nil {
		s.afterRead(ctx, item.ProductID)
	}
	// The read is the first check; under the lock it is the one that answers "sold out" in
	// the normal course. The layers below catch what slipped past it.
	if stock < item.Quantity {
		return &SoldOutError{ProductID: item.ProductID, Requested: item.Quantity, Available: stock}
	}

	sql, args := decrementSQL(d, item, stock, version, fence)
	tag, err := tx.Exec(ctx, sql, args...)
	if constraintViolated(err, "23514", "products_stock_nonnegative") {
		return &CaughtError{Layer: LayerCheck, ProductID: item.ProductID,
			Err: &SoldOutError{ProductID: item.ProductID, Requested: item.Quantity, Available: stock}}
	}
	if err != nil {
		return dbError("decrement stock", err)
	}
	if tag.RowsAffected() == 1 {
		return nil
	}
	return refusal(ctx, tx, d, item, version, fence)
}

// decrementSQL builds the conditional UPDATE for the selected layers. The naive variant writes
// back the stock computed from the read, which is precisely what loses concurrent updates.
func decrementSQL(d Defense, item Item, readStock, readVersion, fence int64) (string, []any) {
	if d.Naive() {
		return `UPDATE products SET stock = $2, version = version + 1, updated_at = now() WHERE id = $1`,
			[]any{item.ProductID, readStock - item.Quantity}
	}
	args := []any{item.ProductID, item.Quantity}
	set := `stock = stock - $2, version = version + 1, updated_at = now()`
	var where strings.Builder
	where.WriteString(`id = $1`)
	if d.Version {
		args = append(args, readVersion)
		fmt.Fprintf(&where, ` AND version = $%d`, len(args))
	}
	if d.Guard {
		where.WriteString(` AND stock >= $2`)
	}
	if d.Lock {
		args = append(args, fence)
		set += fmt.Sprintf(`, fence = $%d`, len(args))
		fmt.Fprintf(&where, ` AND fence <= $%d`, len(args))
	}
	return `UPDATE products SET ` + set + ` WHERE ` + where.String(), args
}

// refusal re-reads a row whose conditional UPDATE matched nothing and names the layer that
// refused it. Under READ COMMITTED the re-read sees the newest committed row, the one the UPDATE
// was evaluated against after waiting for any concurrent writer.
func refusal(ctx context.Context, tx pgx.Tx, d Defense, item Item, readVersion, fence int64) error {
	var stock, version, current int64
	err := tx.QueryRow(ctx, `SELECT stock, version, fence FROM products WHERE id = $1`, item.ProductID).Scan(&stock, &version, &current)
	if errors.Is(err, pgx.ErrNoRows) {
		return &ProductNotFoundError{ProductID: item.ProductID}
	}
	if err != nil {
		return dbError("re-read stock", err)
	}
	switch {
	case d.Lock && current > fence:
		return &CaughtError{Layer: LayerFence, ProductID: item.ProductID,
			Err: fmt.Errorf("%w: fence %d is older than %d", ErrLockLost, fence, current)}
	case d.Version && version != readVersion:
		return &CaughtError{Layer: LayerVersion, ProductID: item.ProductID,
			Err: fmt.Errorf("%w: read version %d, now %d", errVersionConflict, readVersion, version)}
	case d.Guard && stock < item.Quantity:
		return &CaughtError{Layer: LayerGuard, ProductID: item.ProductID,
			Err: &SoldOutError{ProductID: item.ProductID, Requested: item.Quantity, Available: stock}}
	default:
		// The row moved on again between the UPDATE and the re-read; try afresh.
		return fmt.Errorf("%w: row changed during the check", errVersionConflict)
	}
}

// insertOrder writes the order, its items and its idempotency record in one round trip.
func insertOrder(ctx context.Context, tx pgx.Tx, p Purchase) (Order, error) {
	ids := make([]int64, len(p.Items))
	qtys := make([]int64, len(p.Items))
	for i, it := range p.Items {
		ids[i], qtys[i] = it.ProductID, it.Quantity
	}
	batch := &pgx.Batch{}
	order := Order{ID: p.OrderID, CustomerID: p.CustomerID, Status: OrderStatusConfirmed, Items: p.Items}
	batch.Queue(`INSERT INTO orders (id, customer_id, status) VALUES ($1, $2, $3) RETURNING created_at`,
		p.OrderID, p.CustomerID, OrderStatusConfirmed).QueryRow(func(row pgx.Row) error {
		return row.Scan(&order.CreatedAt)
	})
	batch.Queue(`INSERT INTO order_items (order_id, product_id, quantity)
	             SELECT $1::uuid, * FROM unnest($2::bigint[], $3::bigint[])`, p.OrderID, ids, qtys)
	if rec := p.Idempotency; rec != nil {
		batch.Queue(`INSERT INTO idempotency_keys (key, fingerprint, outcome, order_id) VALUES ($1, $2, $3, $4)`,
			rec.Key, rec.Fingerprint, outcomeRecordConfirmed, p.OrderID)
	}
	err := tx.SendBatch(ctx, batch).Close()
	if constraintViolated(err, "23505", "idempotency_keys_pkey") {
		return Order{}, errIdempotencyKeyTaken
	}
	if err != nil {
		return Order{}, dbError("insert order", err)
	}
	return order, nil
}

// IdempotencyRecord implements Store.
func (s *PGStore) IdempotencyRecord(ctx context.Context, key string) (IdempotencyRecord, error) {
	rec := IdempotencyRecord{Key: key}
	var orderID *uuid.UUID
	var productID, requested, available *int64
	err := s.pool.QueryRow(ctx, `
		SELECT fingerprint, outcome, order_id, product_id, requested, available
		  FROM idempotency_keys WHERE key = $1`, key).
		Scan(&rec.Fingerprint, &rec.Outcome, &orderID, &productID, &requested, &available)
	if errors.Is(err, pgx.ErrNoRows) {
		return IdempotencyRecord{}, errNoRecord
	}
	if err != nil {
		return IdempotencyRecord{}, dbError("get idempotency record", err)
	}
	if orderID != nil {
		rec.OrderID = *orderID
	}
	rec.ProductID, rec.Requested, rec.Available = deref(productID), deref(requested), deref(available)
	return rec, nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

// SaveRefusal implements Store.
func (s *PGStore) SaveRefusal(ctx context.Context, rec IdempotencyRecord) error {
	_, err := s.pool.Exec(ctx, `
		INSERT INTO idempotency_keys (key, fingerprint, outcome, product_id, requested, available)
		VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (key) DO NOTHING`,
		rec.Key, rec.Fingerprint, outcomeRecordSoldOut, rec.ProductID, rec.Requested, rec.Available)
	if err != nil {
		return dbError("save refusal", err)
	}
	return nil
}

// PurgeIdempotencyKeys implements Store.
func (s *PGStore) PurgeIdempotencyKeys(ctx context.Context, cutoff time.Time) (int64, error) {
	tag, err := s.pool.Exec(ctx, `DELETE FROM idempotency_keys WHERE created_at < $1`, cutoff)
	if err != nil {
		return 0, dbError("purge idempotency keys", err)
	}
	return tag.RowsAffected(), nil
}

// constraintViolated reports whether err is a Postgres error with code on constraint.
func constraintViolated(err error, code, constraint string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == code && pgErr.ConstraintName == constraint
}

// dbError translates a driver error into the package's errors, keeping the chain for logs.
// Errors the store already produced pass through unchanged.
func dbError(op string, err error) error {
	if isDomainError(err) {
		return err
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch {
		case pgErr.Code == "55P03", pgErr.Code == "40001", pgErr.Code == "40P01":
			// lock_timeout, serialization failure, deadlock: contention, worth a retry.
			return fmt.Errorf("%w: %s: %w", ErrBusy, op, err)
		case strings.HasPrefix(pgErr.Code, "08"), strings.HasPrefix(pgErr.Code, "57"), pgErr.Code == "53300":
			// Connection exceptions, operator intervention (shutdown, statement timeout),
			// too many connections.
			return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
		}
		return fmt.Errorf("%s: %w", op, err)
	}
	if errors.Is(err, context.Canceled) {
		return fmt.Errorf("%s: %w", op, err)
	}
	// Dial failures, broken connections, pool exhaustion and deadlines: Postgres did not
	// answer.
	return fmt.Errorf("%w: %s: %w", ErrUnavailable, op, err)
}

// commitError is dbError for the end of a transaction. A failure while committing leaves the
// outcome unknown to us; the message says so, and an idempotency key makes the retry safe.
func commitError(op string, err error) error {
	if isDomainError(err) || errors.Is(err, errVersionConflict) || errors.Is(err, errIdempotencyKeyTaken) {
		return err
	}
	return dbError(op, err)
}

func isDomainError(err error) bool {
	var caught *CaughtError
	return errors.As(err, &caught) ||
		errors.Is(err, ErrProductNotFound) || errors.Is(err, ErrSoldOut) || errors.Is(err, ErrBusy) ||
		errors.Is(err, ErrUnavailable) || errors.Is(err, ErrLockLost) || errors.Is(err, ErrDuplicateSKU)
}
