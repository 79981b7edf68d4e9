package stockpg

import (
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/syncrep"
)

// NewDemo returns a Store whose purchase writes carry only the conditions d selects — the
// demonstration modes of STOCKSVC_DEFENSE, which show what each layer stops by taking it away.
// The production store (New) never builds its statement: NewDemo(pool, stock.DefaultDefense())
// writes exactly what New does (TestDemoDefaultIsProduction).
func NewDemo(pool *pgxpool.Pool, d stock.Defense) *Store {
	dec := demoDecrement(d)
	return &Store{pool: pool,
		commit:         commitHead + dec + commitTail,
		commitSkipping: commitSkippingHead + dec + commitSkippingTail,
		conditions:     d,
		barrier:        syncrep.Barrier}
}

// demoDecrement is the decrement with the conditions d selects. Every setting but the naive one
// decrements relatively (stock = stock - qty), which keeps the CHECK (stock >= 0) backstop
// armed; the naive one writes back the stock computed from the read, which is precisely what
// loses concurrent updates.
func demoDecrement(d stock.Defense) string {
	set := "stock = p.stock - d.qty"
	if d.Naive() {
		set = "stock = d.read_stock - d.qty"
	}
	set += ", version = p.version + 1, updated_at = now()"
	var where []string
	if d.Lock {
		set += ", fence = d.fence"
	}
	where = append(where, "p.id = d.id")
	if d.Version {
		where = append(where, "p.version = d.read_version")
	}
	if d.Guard {
		where = append(where, "p.stock >= d.qty")
	}
	if d.Lock {
		where = append(where, "p.fence <= d.fence")
	}
	// The window is a rule of the product, in every store.
	return "UPDATE products p\n     SET " + set + "\n    FROM d\n   WHERE " + strings.Join(where, " AND ") + "\n     AND " + saleOpen
}
