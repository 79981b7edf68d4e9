package verdict

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/testenv"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// TestReconcileKeys runs the key rules on made-up histories: what the clients were told, key by
// key, against what was stored.
func TestReconcileKeys(t *testing.T) {
	t.Parallel()
	s := func(n float64) time.Duration { return time.Duration(n * float64(time.Second)) }
	at := func(end float64, status int) model.Attempt {
		return model.Attempt{Start: s(end) - 10*time.Millisecond, End: s(end), Status: status}
	}
	confirmed := func(order string, created float64) storedKey {
		return storedKey{outcome: "confirmed", orderID: order, created: s(created)}
	}
	cases := []struct {
		name   string
		sent   sentKey
		stored map[string]storedKey
		// want names the list the key must land in: "" for none (it passes).
		want string
	}{
		{"told 201, stored", sentKey{key: "k", orderID: "o1", attempts: []model.Attempt{at(1, 201)}},
			map[string]storedKey{"k": confirmed("o1", 0.99)}, ""},
		{"told 201 after a lost answer", sentKey{key: "k", orderID: "o1", attempts: []model.Attempt{at(1, 0), at(2, 201)}},
			map[string]storedKey{"k": confirmed("o1", 0.99)}, ""},
		{"busy, nothing stored", sentKey{key: "k", attempts: []model.Attempt{at(1, 429)}}, nil, ""},
		{"sold out, stored sold out", sentKey{key: "k", attempts: []model.Attempt{at(1, 409)}},
			map[string]storedKey{"k": {outcome: "sold_out", created: s(0.9)}}, ""},
		{"no answer, stored confirmed", sentKey{key: "k", attempts: []model.Attempt{at(1, 0), at(3, 502)}},
			map[string]storedKey{"k": confirmed("o1", 0.5)}, ""},
		{"lost, then refused before the sale was stored", sentKey{key: "k", attempts: []model.Attempt{at(1, 0), at(2, 429)}},
			map[string]storedKey{"k": confirmed("o1", 1.8)}, ""},
		{"lost, then refused just after the sale began", sentKey{key: "k", attempts: []model.Attempt{at(1, 0), at(2, 429)}},
			map[string]storedKey{"k": confirmed("o1", 1.7)}, ""},
		// The chain: Go sent the request again when the killed replica's connection
		// broke, another replica answered busy after its lock wait; the client saw one 429.
		{"told busy, but sold", sentKey{key: "k", attempts: []model.Attempt{{Start: s(1), End: s(2.0), Status: 429, Resent: true}}},
			map[string]storedKey{"k": confirmed("o1", 1.004)}, "refusedSold"},
		{"told sold out, but sold", sentKey{key: "k", attempts: []model.Attempt{at(1, 429), at(2, 409)}},
			map[string]storedKey{"k": confirmed("o1", 5)}, "refusedSold"},
		{"lost, then refused a second after the sale", sentKey{key: "k", attempts: []model.Attempt{at(1, 0), at(2.2, 429), at(4, 0)}},
			map[string]storedKey{"k": confirmed("o1", 1.1)}, "refusedAfter"},
		{"told 201, nothing stored", sentKey{key: "k", orderID: "o1", attempts: []model.Attempt{at(1, 201)}}, nil, "notStored"},
		{"told 201, another order stored", sentKey{key: "k", orderID: "o1", attempts: []model.Attempt{at(1, 201)}},
			map[string]storedKey{"k": confirmed("o2", 0.9)}, "notStored"},
		{"told 201, stored sold out", sentKey{key: "k", orderID: "o1", attempts: []model.Attempt{at(1, 201)}},
			map[string]storedKey{"k": {outcome: "sold_out", created: s(0.9)}}, "notStored"},
		{"stored, sent by nobody", sentKey{key: "k", attempts: []model.Attempt{at(1, 429)}},
			map[string]storedKey{"other": confirmed("o9", 0.5)}, "strangers"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			v := reconcileKeys([]sentKey{c.sent}, c.stored)
			got := map[string]int{"refusedSold": len(v.refusedSold), "refusedAfter": len(v.refusedAfter),
				"notStored": len(v.notStored), "strangers": len(v.strangers)}
			for list, n := range got {
				if want := map[bool]int{true: 1}[list == c.want]; n != want {
					t.Errorf("%s has %d keys, want %d (verdict %+v)", list, n, want, v)
				}
			}
			failed := 0
			for _, inv := range v.invariants() {
				if !inv.OK {
					failed++
				}
			}
			if (failed > 0) != (c.want != "") {
				t.Errorf("%d checks failed: %+v", failed, v.invariants())
			}
		})
	}
}

func TestReconcileKeysCounts(t *testing.T) {
	t.Parallel()
	v := reconcileKeys([]sentKey{
		{key: "a", orderID: "oa", attempts: []model.Attempt{{End: time.Second, Status: 201}}},
		{key: "b", attempts: []model.Attempt{{End: time.Second}}},
		{key: "c", attempts: []model.Attempt{{End: 2 * time.Second, Status: 429}}, what: "customer c: 429 busy at 2.000s"},
	}, map[string]storedKey{
		"a": {outcome: "confirmed", orderID: "oa"},
		"b": {outcome: "confirmed", orderID: "ob"},
		"c": {outcome: "confirmed", orderID: "oc", created: time.Second},
		"d": {outcome: "sold_out"},
	})
	if v.sent != 3 || v.storedConfirmed != 3 || v.unknownSold != 1 || len(v.refusedSold) != 1 {
		t.Fatalf("verdict %+v: want 3 sent, 3 stored confirmed, 1 with no answer, 1 refused", v)
	}
	detail := v.invariants()[0].Detail
	for _, want := range []string{"3 keys sent", "1 every attempt refused", "key c: stored confirmed at 1.000s (order oc); customer c: 429 busy"} {
		if !strings.Contains(detail, want) {
			t.Errorf("detail %q does not say %q", detail, want)
		}
	}
}

// TestReadStoredKeys reads real idempotency records, their creation on the run's clock.
func TestReadStoredKeys(t *testing.T) {
	t.Parallel()
	pool := testenv.Pool(t)
	ctx := context.Background()
	var product int64
	if err := pool.QueryRow(ctx, `INSERT INTO products (sku, name, stock, initial_stock) VALUES ('K', 'k', 10, 10) RETURNING id`).Scan(&product); err != nil {
		t.Fatal(err)
	}
	var order string
	if err := pool.QueryRow(ctx, `INSERT INTO orders (id, customer_id, status) VALUES (gen_random_uuid(), 'c', 'confirmed') RETURNING id::text`).Scan(&order); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, order_id) VALUES ('c', 'kc', '\x00', 'confirmed', $1)`, order); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO idempotency_keys (customer_id, key, fingerprint, outcome, product_id, requested, available) VALUES ('c', 'ks', '\x00', 'sold_out', $1, 2, 1)`, product); err != nil {
		t.Fatal(err)
	}
	start := time.Now().Add(-time.Minute)
	stored, err := readStoredKeys(ctx, pool, start)
	if err != nil {
		t.Fatal(err)
	}
	if c := stored["kc"]; c.outcome != "confirmed" || c.orderID != order || c.created < 50*time.Second || c.created > 2*time.Minute {
		t.Errorf("confirmed record %+v: want order %s, created about a minute after start", c, order)
	}
	if so := stored["ks"]; so.outcome != "sold_out" || so.orderID != "" {
		t.Errorf("sold-out record %+v", so)
	}
}
