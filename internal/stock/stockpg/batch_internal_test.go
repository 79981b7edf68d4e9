package stockpg

import (
	"context"
	"errors"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/syncrep"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestFindCommit: when a commit's reply is lost, the store looks the batch up instead of
// guessing. Found, the batch is confirmed with its time; not found, the answer is "unavailable"
// (retry with the same key), never "not sold"; a batch of refusals alone is true either way.
func TestFindCommit(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), testenv.DatabaseURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	s := New(pool)
	p, err := s.CreateProduct(context.Background(), stock.NewProduct{SKU: "lost", Name: "lost", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	snap, err := s.Snapshot(context.Background(), []int64{p.ID}, nil, nil)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	order := stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c", Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}}
	w := stock.Write{Orders: []stock.Order{order},
		Decrements: []stock.Decrement{{ProductID: p.ID, Quantity: 1, Read: snap.Levels[p.ID], Fence: 1}}}
	lost := io.ErrUnexpectedEOF

	if _, err := s.findCommit(context.Background(), w, lost); !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, stock.ErrOutcomeUnknown) || !errors.Is(err, lost) {
		t.Errorf("lookup of a batch that never committed = %v, want stock.ErrUnavailable and stock.ErrOutcomeUnknown wrapping the cause", err)
	}
	c, err := s.Commit(context.Background(), w)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	got, err := s.findCommit(context.Background(), w, lost)
	if err != nil || !got.At.Equal(c.At) || len(got.Skipped) != 0 {
		t.Errorf("lookup of a committed batch = %+v, %v; want %v, nothing skipped", got, err, c.At)
	}
	refusals := stock.Write{Records: []stock.IdempotencyRecord{{RecordKey: stock.RecordKey{CustomerID: "c", Key: "k"}, Fingerprint: []byte("f"), SoldOut: &stock.SoldOutError{ProductID: p.ID}}}}
	if _, err := s.findCommit(context.Background(), refusals, lost); err != nil {
		t.Errorf("lookup of a batch of refusals = %v, want nil: they are true whether stored or not", err)
	}
}

// TestDemoDefaultIsProduction: a demonstration store with every layer on writes exactly what the
// production store writes, so the demonstrations differ from production only by the layers they
// take away.
func TestDemoDefaultIsProduction(t *testing.T) {
	if got := demoDecrement(stock.DefaultDefense()); got != productionDecrement {
		t.Errorf("demo decrement with every layer:\n%s\nwant the production one:\n%s", got, productionDecrement)
	}
	demo, prod := NewDemo(nil, stock.DefaultDefense()), New(nil)
	if demo.commit != prod.commit || demo.commitSkipping != prod.commitSkipping || demo.conditions != prod.conditions {
		t.Error("a demonstration store with every layer differs from the production store")
	}
	if naive := demoDecrement(stock.Defense{}); !strings.Contains(naive, "stock = d.read_stock - d.qty") || strings.Contains(naive, "p.version = d.read_version") {
		t.Errorf("naive decrement = %s, want a write-back of the read stock with no condition", naive)
	}
}

// TestOneRecountAcrossReplicas: while a recount holds the audit lock (here, a session of the
// test's own, as another replica's recount would), an audit is refused busy at once, on any
// store over the database; once it is released, the audit runs.
func TestOneRecountAcrossReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, testenv.DatabaseURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	s := New(pool)
	p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "recount", Name: "recount", Stock: 3})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	other, err := pool.Begin(ctx)
	if err != nil {
		t.Fatalf("begin: %v", err)
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, auditLockKey); err != nil {
		t.Fatalf("hold the audit lock: %v", err)
	}
	if a, err := s.Audit(ctx, p.ID); !errors.Is(err, stock.ErrBusy) {
		t.Errorf("audit while another recount runs = %+v, %v; want ErrBusy", a, err)
	}
	if err := other.Rollback(ctx); err != nil {
		t.Fatalf("release: %v", err)
	}
	if a, err := s.Audit(ctx, p.ID); err != nil || a.Received != 3 || a.Stock != 3 || !a.Consistent() {
		t.Errorf("audit after the other recount = %+v, %v; want 3 received, 3 in stock, consistent", a, err)
	}
	if _, err := s.Audit(ctx, p.ID+1000); !errors.Is(err, stock.ErrProductNotFound) {
		t.Errorf("audit of a missing product = %v, want ErrProductNotFound", err)
	}
}

// TestUnreplicatedOrderIsNotConfirmed: an order Postgres holds but cannot show is on a
// synchronous standby — its commit's wait for one was ended early, which the server says with
// a warning — is confirmed neither by the lookup of a lost commit nor by a replay of its key:
// both say "unavailable", and the lookup "outcome unknown". The warning is drawn here by a
// statement of the test's own in the place of the store's replication barrier; a server with
// a standby that never answers would draw it from the barrier's commit.
func TestUnreplicatedOrderIsNotConfirmed(t *testing.T) {
	t.Parallel()
	pool := noticePool(t)
	s := New(pool)
	ctx := context.Background()
	p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "unreplicated", Name: "unreplicated", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	snap, err := s.Snapshot(ctx, []int64{p.ID}, nil, nil)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	order := stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c", Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}}
	key := stock.RecordKey{CustomerID: "c", Key: "key-" + order.ID.String()}
	w := stock.Write{Orders: []stock.Order{order},
		Decrements: []stock.Decrement{{ProductID: p.ID, Quantity: 1, Read: snap.Levels[p.ID], Fence: 1}},
		Records:    []stock.IdempotencyRecord{{RecordKey: key, Fingerprint: []byte("f"), Order: &order}}}
	if _, err := s.Commit(ctx, w); err != nil {
		t.Fatalf("commit: %v", err)
	}
	// Replicated (the test's server has no synchronous standby: the barrier returns at once).
	if _, err := s.findCommit(ctx, w, io.ErrUnexpectedEOF); err != nil {
		t.Errorf("lookup with the barrier passing = %v, want the order confirmed", err)
	}
	if recs, err := s.Records(ctx, []stock.RecordKey{key}); err != nil || recs[key].Order == nil {
		t.Errorf("records with the barrier passing = %v, %v; want the key's order", recs, err)
	}

	s.barrier = `DO $$ BEGIN RAISE WARNING 'canceling wait for synchronous replication due to user request'; END $$`
	_, err = s.findCommit(ctx, w, io.ErrUnexpectedEOF)
	if !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, stock.ErrOutcomeUnknown) || !errors.Is(err, syncrep.ErrNotReplicated) {
		t.Errorf("lookup of an order not known to be replicated = %v, want unavailable, outcome unknown, not replicated", err)
	}
	if recs, err := s.Records(ctx, []stock.RecordKey{key}); !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, syncrep.ErrNotReplicated) {
		t.Errorf("records of an order not known to be replicated = %v, %v; want unavailable, not replicated", recs, err)
	}
	// Another warning is not that one.
	s.barrier = `DO $$ BEGIN RAISE WARNING 'something else'; END $$`
	if _, err := s.findCommit(ctx, w, io.ErrUnexpectedEOF); err != nil {
		t.Errorf("lookup with another warning = %v, want the order confirmed", err)
	}
}

// TestUnreplicatedConfirmIsNotAcknowledged: a hold's confirm whose commit Postgres answered
// with the warning of a cut-short wait for its synchronous standby is not acknowledged
// (unavailable, outcome unknown), and a confirm that finds the hold confirmed already answers
// only once the barrier shows a standby has it. A trigger draws the warning inside the
// confirm's own statement, as a standby that never answers would at its commit.
func TestUnreplicatedConfirmIsNotAcknowledged(t *testing.T) {
	t.Parallel()
	pool := noticePool(t)
	s := New(pool)
	ctx := context.Background()
	p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "held", Name: "held", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	hold := func() uuid.UUID {
		t.Helper()
		id := uuid.Must(uuid.NewV7())
		if _, err := pool.Exec(ctx, `INSERT INTO orders (id, customer_id, status, expires_at) VALUES ($1, 'c', 'held', now() + interval '1 minute')`, id); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO order_items (order_id, product_id, quantity) VALUES ($1, $2, 1)`, id, p.ID); err != nil {
			t.Fatal(err)
		}
		return id
	}
	const warning = `canceling wait for synchronous replication due to user request`
	if _, err := pool.Exec(ctx, `CREATE FUNCTION cut_short() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE WARNING '`+warning+`'; RETURN NEW; END $$;
		CREATE TRIGGER cut_short BEFORE UPDATE ON orders FOR EACH ROW EXECUTE FUNCTION cut_short()`); err != nil {
		t.Fatal(err)
	}
	first := hold()
	if _, _, err := s.ConfirmHold(ctx, first, ""); !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, stock.ErrOutcomeUnknown) || !errors.Is(err, syncrep.ErrNotReplicated) {
		t.Fatalf("confirm answered with the warning = %v, want unavailable, outcome unknown, not replicated", err)
	}
	if _, err := pool.Exec(ctx, `DROP TRIGGER cut_short ON orders`); err != nil {
		t.Fatal(err)
	}
	// Confirmed on the primary by the call above; the barrier passes (no standby here).
	if o, _, err := s.ConfirmHold(ctx, first, ""); err != nil || o.Status != stock.OrderStatusConfirmed {
		t.Errorf("confirm again with the barrier passing = %+v, %v; want confirmed", o, err)
	}
	s.barrier = `DO $$ BEGIN RAISE WARNING '` + warning + `'; END $$`
	if _, _, err := s.ConfirmHold(ctx, first, ""); !errors.Is(err, stock.ErrUnavailable) || !errors.Is(err, syncrep.ErrNotReplicated) {
		t.Errorf("confirm again, the barrier cut short = %v, want unavailable, not replicated", err)
	}
	// A confirm that commits itself, answered without the warning, needs no barrier.
	if o, _, err := s.ConfirmHold(ctx, hold(), ""); err != nil || o.Status != stock.OrderStatusConfirmed {
		t.Errorf("a confirm of its own = %+v, %v; want confirmed without the barrier", o, err)
	}
}

// noticePool is a pool on a fresh database with the service's notice handler, as cmd sets it.
func noticePool(t *testing.T) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.OnNotice = syncrep.OnNotice
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// TestCommitSkipsOnlyAfterAKeyFoundStored: a write that may leave orders out runs as the
// cheaper all-or-nothing statement while no key turns up stored; the first that finds one
// stored is sent again as the statement that leaves it out, and so are the next
// skipAfterStored writes, straight away. Which statement ran is seen by a tracer on the pool,
// not inferred from the outcome, which is the same either way.
func TestCommitSkipsOnlyAfterAKeyFoundStored(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testenv.DatabaseURL(t))
	if err != nil {
		t.Fatal(err)
	}
	sent := &statementLog{}
	cfg.ConnConfig.Tracer = sent
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	s := New(pool)
	p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "skip", Name: "skip", Stock: 100})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	runs := func() (whole, skipping int64) { return sent.count(commitSQL), sent.count(commitSkippingSQL) }
	write := func(keys ...string) (stock.Write, []stock.Order) {
		snap, err := s.Snapshot(ctx, []int64{p.ID}, nil, nil)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		w := stock.Write{SkipStored: true, Decrements: []stock.Decrement{{ProductID: p.ID, Quantity: int64(len(keys)), Read: snap.Levels[p.ID], Fence: 1}}}
		orders := make([]stock.Order, len(keys))
		for i, k := range keys {
			orders[i] = stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c", Status: stock.OrderStatusConfirmed, Items: []stock.Item{{ProductID: p.ID, Quantity: 1}}}
			w.Records = append(w.Records, stock.IdempotencyRecord{RecordKey: stock.RecordKey{CustomerID: "c", Key: k}, Fingerprint: []byte(k), Order: &orders[i]})
		}
		w.Orders = orders
		return w, orders
	}
	stored := "stored-" + uuid.NewString()
	first, _ := write(stored, uuid.NewString())
	if c, err := s.Commit(ctx, first); err != nil || len(c.Skipped) != 0 {
		t.Fatalf("first write = %+v, %v; want both orders written", c, err)
	}
	if whole, skipping := runs(); whole != 1 || skipping != 0 || s.skipping.Load() != 0 {
		t.Fatalf("after a write with no key stored: %d all-or-nothing, %d skipping statements, %d to skip; want 1, 0, 0", whole, skipping, s.skipping.Load())
	}
	retry, orders := write(stored, uuid.NewString())
	c, err := s.Commit(ctx, retry)
	if err != nil || len(c.Skipped) != 1 || c.Skipped[0] != orders[0].ID || c.Stored[stock.RecordKey{CustomerID: "c", Key: stored}].Order == nil {
		t.Fatalf("write with a stored key = %+v, %v; want its order left out, with the record found", c, err)
	}
	if whole, skipping := runs(); whole != 2 || skipping != 1 || s.skipping.Load() != skipAfterStored {
		t.Fatalf("after a write that found a key stored: %d all-or-nothing, %d skipping statements, %d to skip; want 2, 1, %d", whole, skipping, s.skipping.Load(), skipAfterStored)
	}
	next, _ := write(uuid.NewString())
	if c, err := s.Commit(ctx, next); err != nil || len(c.Skipped) != 0 {
		t.Fatalf("next write = %+v, %v; want it written", c, err)
	}
	if whole, skipping := runs(); whole != 2 || skipping != 2 || s.skipping.Load() != skipAfterStored-1 {
		t.Fatalf("the write after: %d all-or-nothing, %d skipping statements, %d to skip; want 2, 2, %d", whole, skipping, s.skipping.Load(), skipAfterStored-1)
	}
	if got, err := s.Snapshot(ctx, []int64{p.ID}, nil, nil); err != nil || got.Levels[p.ID].Stock != 100-2-1-1 {
		t.Errorf("stock = %+v, %v; want 96: the order left out took nothing", got.Levels[p.ID], err)
	}
}

// statementLog is a pgx.QueryTracer that counts the statements sent, by their text.
type statementLog struct {
	mu   sync.Mutex
	sent map[string]int64
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, q pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sent == nil {
		l.sent = map[string]int64{}
	}
	l.sent[q.SQL]++
	return ctx
}

func (*statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (l *statementLog) count(sql string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent[sql]
}
