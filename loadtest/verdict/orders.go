package verdict

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// Orders compares what each order operation was told with the orders table, finding
// every order by its customer id when that is unique to the operation, and by its
// Idempotency-Key (the order its record names) when the customer made several — as the
// customers of a product with a limit do. It settles unknown outcomes: an
// unknown order found in the database happened (model.Happened); one not found never will, since
// every replica has stopped, and counts as refused.
//
// It also narrows when an order that happened can have taken effect: not before its row's
// created_at, which the transaction that committed it wrote (Postgres's now() is the start of
// that transaction). An order stuck on a paused replica thus no longer counts as open during
// the pause. Narrowing an interval can only make the check stricter, never hide a violation.
func Orders(ctx context.Context, pool *pgxpool.Pool, ops []*model.Op, start time.Time) ([]Invariant, error) {
	type row struct {
		id       string
		created  time.Time
		product  int64
		quantity int64
		key      string // the Idempotency-Key whose record names the order, if any
		txn      string // the transaction that wrote the order's items (their xmin)
	}
	// An item's xmin names the transaction that inserted it (items are never updated; an
	// order's row is, when a hold ends): the orders of one batch share it.
	rows, _ := pool.Query(ctx, `SELECT o.id::text, o.customer_id, o.created_at, i.product_id, i.quantity, coalesce(k.key, ''), i.xmin::text
		FROM orders o JOIN order_items i ON i.order_id = o.id LEFT JOIN idempotency_keys k ON k.order_id = o.id`)
	byCustomer := map[string][]row{}
	var r row
	var customer string
	if _, err := pgx.ForEachRow(rows, []any{&r.id, &customer, &r.created, &r.product, &r.quantity, &r.key, &r.txn}, func() error {
		byCustomer[customer] = append(byCustomer[customer], r)
		return nil
	}); err != nil {
		return nil, fmt.Errorf("read orders: %w", err)
	}
	// A customer who made several operations has its orders told apart by their keys.
	opsOf := map[string]int{}
	keysOf := map[string]map[string]bool{}
	for _, p := range ops {
		if p.In.Kind == model.KindOrder {
			opsOf[p.Customer]++
			if keysOf[p.Customer] == nil {
				keysOf[p.Customer] = map[string]bool{}
			}
			keysOf[p.Customer][p.Key] = true
		}
	}
	var missing, wrong, phantom, twice, unknownNo int
	known := map[string]bool{}
	for _, p := range ops {
		if p.In.Kind != model.KindOrder {
			continue
		}
		known[p.Customer] = true
		found := byCustomer[p.Customer]
		if opsOf[p.Customer] > 1 {
			found = nil
			for _, o := range byCustomer[p.Customer] {
				if p.Key != "" && o.key == p.Key {
					found = append(found, o)
				}
			}
		}
		if len(found) > 1 {
			twice++
			continue
		}
		switch p.Out.Outcome {
		case model.Confirmed, model.Held:
			switch {
			case len(found) == 0:
				missing++
			case found[0].id != p.OrderID || found[0].product != p.In.Product || found[0].quantity != p.In.Quantity:
				wrong++
			default:
				p.NotBefore, p.Txn = found[0].created.Sub(start)-clockSlack, found[0].txn
			}
		case model.SoldOut, model.NotOpen, model.Ended, model.OverLimit:
			if len(found) > 0 {
				phantom++
			}
		case model.Refused:
			if len(found) > 0 {
				phantom++
				// The violation is counted here. For the model, the order happened: a refusal
				// constrains nothing, and leaving out an order the stock shows was sold would
				// make the history unexplainable — and with dozens of orders open at once,
				// Porcupine takes its whole time limit to prove that.
				if len(found) == 1 && found[0].product == p.In.Product && found[0].quantity == p.In.Quantity {
					p.Out.Outcome, p.RefusedButSold, p.OrderID = model.Happened, true, found[0].id
					p.NotBefore = found[0].created.Sub(start) - clockSlack
				}
			}
		case model.Unknown:
			if len(found) == 1 && found[0].product == p.In.Product && found[0].quantity == p.In.Quantity {
				p.Out.Outcome, p.OrderID = model.Happened, found[0].id
				p.NotBefore, p.Txn = found[0].created.Sub(start)-clockSlack, found[0].txn
			} else if len(found) == 1 {
				wrong++
			} else {
				p.Out.Outcome = model.Refused
				unknownNo++
			}
		}
	}
	strangers := 0
	for c, orders := range byCustomer {
		switch {
		case !known[c]:
			strangers++
		case opsOf[c] > 1:
			// Every order of a customer with several operations must be one of theirs, by
			// its key; an order without a key, or under a key nobody sent, is a stranger.
			for _, o := range orders {
				if !keysOf[c][o.key] || o.key == "" {
					strangers++
				}
			}
		}
	}
	restocks, err := reconcileRestocks(ctx, pool, ops)
	if err != nil {
		return nil, err
	}
	return []Invariant{
		restocks,
		{Name: "every confirmed order is in the database with its items", OK: missing == 0 && wrong == 0,
			Detail: fmt.Sprintf("%d missing, %d with other items or another id", missing, wrong)},
		{Name: "no order for a client told sold-out or busy, none nobody asked for", OK: phantom == 0 && strangers == 0,
			Detail: fmt.Sprintf("%d orders for refused requests, %d for unknown customers", phantom, strangers)},
		{Name: "one order per operation (idempotency across retries)", OK: twice == 0,
			Detail: fmt.Sprintf("%d operations with two orders or more; %d unknown outcomes never happened", twice, unknownNo)},
	}, nil
}

// reconcileRestocks compares the units the restocks table received with what the clients
// asked for: at least every confirmed restock, at most those plus the unknown ones — each once,
// however many attempts it took.
func reconcileRestocks(ctx context.Context, pool *pgxpool.Pool, ops []*model.Op) (Invariant, error) {
	low, high := map[int64]int64{}, map[int64]int64{}
	for _, p := range ops {
		if p.In.Kind != model.KindRestock {
			continue
		}
		switch p.Out.Outcome {
		case model.Confirmed:
			low[p.In.Product] += p.In.Quantity
			high[p.In.Product] += p.In.Quantity
		case model.Unknown:
			high[p.In.Product] += p.In.Quantity
		}
	}
	rows, _ := pool.Query(ctx, `SELECT product_id, sum(quantity)::bigint FROM restocks GROUP BY product_id`)
	got := map[int64]int64{}
	var product, units int64
	if _, err := pgx.ForEachRow(rows, []any{&product, &units}, func() error {
		got[product] = units
		return nil
	}); err != nil {
		return Invariant{}, fmt.Errorf("read restocks: %w", err)
	}
	var problems []string
	for _, id := range slices.Sorted(maps.Keys(mergeKeys(low, high, got))) {
		switch {
		case got[id] > high[id]:
			problems = append(problems, fmt.Sprintf("product %d received %d units, clients asked for at most %d (a retried restock applied twice?)", id, got[id], high[id]))
		case got[id] < low[id]:
			problems = append(problems, fmt.Sprintf("product %d received %d units, confirmed restocks add up to %d", id, got[id], low[id]))
		}
	}
	// A product that received exactly its confirmed restocks received none of the unknown
	// ones (each adds units): they never happened, and the model leaves them out rather than
	// keep each open to the end of the run, where, among a scarce product's exact sold-out
	// answers, it made Porcupine's search outlast its limit (pg-failover in CI).
	for _, p := range ops {
		if p.In.Kind == model.KindRestock && p.Out.Outcome == model.Unknown && got[p.In.Product] == low[p.In.Product] {
			p.Out.Outcome = model.Refused
		}
	}
	detail := "every product received between its confirmed restocks and those plus the unknown ones"
	if len(problems) > 0 {
		detail = strings.Join(problems, "; ")
	}
	return Invariant{Name: "each restock applied once", OK: len(problems) == 0, Detail: detail}, nil
}

func mergeKeys(ms ...map[int64]int64) map[int64]bool {
	out := map[int64]bool{}
	for _, m := range ms {
		for k := range m {
			out[k] = true
		}
	}
	return out
}

// clockSlack allows for the harness and Postgres reading the same wall clock at slightly
// different instants.
const clockSlack = 5 * time.Millisecond

// FinalStock reads each product's stock once every replica has stopped: the last
// observation of the history, after every operation that might still have taken effect.
func FinalStock(ctx context.Context, pool *pgxpool.Pool, products []int64, end time.Duration) ([]*model.Op, error) {
	var out []*model.Op
	for i, id := range products {
		var stock int64
		if err := pool.QueryRow(ctx, `SELECT stock FROM products WHERE id = $1`, id).Scan(&stock); err != nil {
			return nil, fmt.Errorf("read final stock of %d: %w", id, err)
		}
		out = append(out, &model.Op{ID: -1 - i, In: model.Input{Kind: model.KindRead, Product: id}, Final: true,
			Out: model.Output{Outcome: model.Confirmed, Stock: stock}, Invoke: end + 1, Return: end + 2})
	}
	return out, nil
}
