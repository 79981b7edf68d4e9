package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
	"testing"

	"github.com/golang-migrate/migrate/v4"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stockpg"
	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/migrations"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// migrationVersion is the version of the migration whose files end in name (its number may
// change when migrations are merged; its name does not).
func migrationVersion(t *testing.T, name string) uint {
	t.Helper()
	files, err := fs.Glob(migrations.Files, "*_"+name+".up.sql")
	if err != nil || len(files) != 1 {
		t.Fatalf("migration %s: %v (%d files)", name, err, len(files))
	}
	v, err := strconv.ParseUint(files[0][:strings.IndexByte(files[0], '_')], 10, 64)
	if err != nil {
		t.Fatalf("migration %s: %v", files[0], err)
	}
	return uint(v)
}

// TestKeysByCustomerKeepEveryRecord: the migration that scopes idempotency keys to their
// customer, run on a database holding records from before it, keeps every record and gives
// each its customer — the confirmed order's, the accepted order's (through the client's key or
// the order's own decision key), none for a client's refusal — after which a replay finds its
// record and another customer's key is its own. Rolling it back is refused while a key has
// records of two customers (and changes nothing), and keeps every record once none has.
func TestKeysByCustomerKeepEveryRecord(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := testenv.DatabaseURL(t)
	version := migrationVersion(t, "idempotency_keys_by_customer")
	m, err := migrations.New(url)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Migrate(version - 1); err != nil {
		t.Fatalf("migrate down to %d: %v", version-1, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	exec := func(sql string, args ...any) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql, args...); err != nil {
			t.Fatalf("%v\n%s", err, sql)
		}
	}

	// Records as the schema before kept them: one key namespace, no customer.
	var product int64
	if err := conn.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('old', 'old', 10, 10) RETURNING id`).Scan(&product); err != nil {
		t.Fatal(err)
	}
	aliceOrder, bobAccepted, carolAccepted := uuid.New(), uuid.New(), uuid.New()
	exec(`INSERT INTO orders (id, customer_id, status) VALUES ($1, 'alice', 'confirmed'), ($2, 'carol', 'confirmed')`, aliceOrder, carolAccepted)
	exec(`INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $3, 1), ($2, $3, 2)`, aliceOrder, carolAccepted, product)
	exec(`INSERT INTO async_orders (id, customer_id, product_ids, quantities, product_id) VALUES
	        ($1, 'bob', ARRAY[$3::bigint], ARRAY[1::bigint], $3), ($2, 'carol', ARRAY[$3::bigint], ARRAY[2::bigint], $3)`,
		bobAccepted, carolAccepted, product)
	exec(`INSERT INTO idempotency_keys (key, fingerprint, outcome, order_id, async_order_id, product_id, requested, available) VALUES
	        ('k-alice', '\x01', 'confirmed', $1::uuid, NULL, NULL, NULL, NULL),
	        ('k-bob', '\x02', 'accepted', NULL, $2::uuid, $4::bigint, NULL, NULL),
	        ($5::text || $2::uuid::text, '\x03', 'sold_out', NULL, NULL, $4::bigint, 1, 0),
	        ($5::text || $3::uuid::text, '\x04', 'confirmed', $3::uuid, NULL, NULL, NULL, NULL),
	        ('k-refused', '\x05', 'sold_out', NULL, NULL, $4::bigint, 3, 2)`,
		aliceOrder, bobAccepted, carolAccepted, product, stock.AcceptedKeyPrefix)

	if err := m.Migrate(version); err != nil {
		t.Fatalf("migrate up to %d: %v", version, err)
	}
	got := map[string]string{}
	rows, _ := conn.Query(ctx, `SELECT key, customer_id FROM idempotency_keys`)
	var key, customer string
	if _, err := pgx.ForEachRow(rows, []any{&key, &customer}, func() error { got[key] = customer; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"k-alice": "alice",
		"k-bob":   "bob",
		stock.AcceptedKeyPrefix + bobAccepted.String():   "bob",
		stock.AcceptedKeyPrefix + carolAccepted.String(): "carol",
		"k-refused": "",
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("records after the migration (key: customer) = %v, want %v", got, want)
	}

	// The service reads them by customer: a replay finds alice's order; bob's client key and
	// his order's decision are his.
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	store := stockpg.New(pool)
	alice, bob := stock.RecordKey{CustomerID: "alice", Key: "k-alice"}, stock.RecordKey{CustomerID: "bob", Key: "k-bob"}
	recs, err := store.Records(ctx, []stock.RecordKey{alice, bob, {CustomerID: "mallory", Key: "k-alice"}})
	if err != nil || len(recs) != 2 || recs[alice].Order == nil || recs[alice].Order.ID != aliceOrder ||
		recs[bob].Accepted == nil || *recs[bob].Accepted != bobAccepted {
		t.Errorf("records = %+v, %v; want alice's order under her key, bob's accepted order under his, nothing for mallory", recs, err)
	}
	// Another customer's order under alice's key is a record of its own.
	malloryOrder := uuid.New()
	exec(`INSERT INTO orders (id, customer_id, status) VALUES ($1, 'mallory', 'confirmed')`, malloryOrder)
	exec(`INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, order_id) VALUES ('mallory', 'k-alice', '\x06', 'confirmed', $1)`, malloryOrder)
	_, err = conn.Exec(ctx, `INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available) VALUES ('alice', 'k-alice', '\x06', 'sold_out', $1, 1, 0)`, product)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "23505" || pgErr.ConstraintName != "idempotency_keys_pkey" {
		t.Errorf("a second record under alice's key = %v, want the primary key's unique violation", err)
	}

	// Down, with k-alice held by two customers: refused, with the reason; nothing changed.
	err = m.Migrate(version - 1)
	if err == nil || !strings.Contains(err.Error(), "1 keys have records of more than one customer") {
		t.Fatalf("rollback with a key of two customers = %v, want it refused naming one key", err)
	}
	if err := m.Force(int(version)); err != nil { // golang-migrate marks a refused migration dirty
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys WHERE customer_id <> ''`).Scan(&n); err != nil || n != 5 {
		t.Errorf("records with a customer after the refused rollback = %d, %v; want 5", n, err)
	}
	exec(`DELETE FROM idempotency_keys WHERE customer_id = 'mallory'`)
	if err := m.Migrate(version - 1); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		t.Fatalf("rollback with no key shared: %v", err)
	}
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM idempotency_keys`).Scan(&n); err != nil || n != 5 {
		t.Errorf("records after the rollback = %d, %v; want all 5", n, err)
	}
	_, err = conn.Exec(ctx, `INSERT INTO idempotency_keys (key, fingerprint, outcome, product_id, requested, available) VALUES ('k-refused', '\x07', 'sold_out', $1, 1, 0)`, product)
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); !ok || pgErr.Code != "23505" {
		t.Errorf("a second record under one key after the rollback = %v, want the one-namespace primary key's unique violation", err)
	}
}
