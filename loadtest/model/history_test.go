package model

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// h builds hand-made histories: times are in milliseconds, an end of -1 means the operation
// never answered (unknown).
type h struct {
	ops []*Op
}

func (b *h) add(product int64, kind Kind, qty int64, out Output, start, end int) *h {
	p := &Op{ID: len(b.ops), Client: len(b.ops), In: Input{Kind: kind, Product: product, Quantity: qty}, Out: out,
		Invoke: time.Duration(start) * time.Millisecond, Return: time.Duration(end) * time.Millisecond}
	b.ops = append(b.ops, p)
	return b
}

func (b *h) create(product, stock int64, start, end int) *h {
	return b.add(product, KindCreate, 0, Output{Outcome: Confirmed, Stock: stock}, start, end)
}
func (b *h) order(product, qty int64, oc Outcome, start, end int) *h {
	return b.add(product, KindOrder, qty, Output{Outcome: oc}, start, end)
}
func (b *h) soldOut(product, qty, available int64, start, end int) *h {
	return b.add(product, KindOrder, qty, Output{Outcome: SoldOut, Available: available, HasAvailable: true}, start, end)
}
func (b *h) restock(product, qty, answered int64, start, end int) *h {
	return b.add(product, KindRestock, qty, Output{Outcome: Confirmed, Stock: answered}, start, end)
}
func (b *h) restockUnknown(product, qty int64, start int) *h {
	return b.add(product, KindRestock, qty, Output{Outcome: Unknown}, start, start)
}
func (b *h) read(product, stock int64, start, end int) *h {
	return b.add(product, KindRead, 0, Output{Outcome: Confirmed, Stock: stock}, start, end)
}

// sale creates a product with rules: opens and ends in milliseconds (-1: none), a limit
// (0: none).
func (b *h) sale(product, stock int64, opens, ends int, limit int64, start, end int) *h {
	r := Rules{Limit: limit}
	if opens >= 0 {
		r.Opens, r.HasOpens = time.Duration(opens)*time.Millisecond, true
	}
	if ends >= 0 {
		r.Ends, r.HasEnds = time.Duration(ends)*time.Millisecond, true
	}
	return b.add(product, KindCreate, 0, Output{Outcome: Confirmed, Stock: stock, Rules: r}, start, end)
}

// by orders qty units of product for customer.
func (b *h) by(product int64, customer string, qty int64, oc Outcome, start, end int) *h {
	b.add(product, KindOrder, qty, Output{Outcome: oc}, start, end)
	b.ops[len(b.ops)-1].Customer = customer
	return b
}

func TestStockModel(t *testing.T) {
	t.Parallel()
	end := time.Hour // every operation is over by then
	cases := []struct {
		name  string
		b     *h
		exact bool
		slack time.Duration
		want  porcupine.CheckResult
	}{
		{"sequential sale, sell-out and restock", new(h).create(1, 5, 0, 1).order(1, 2, Confirmed, 2, 3).read(1, 3, 4, 5).
			soldOut(1, 4, 3, 6, 7).restock(1, 2, 5, 8, 9).read(1, 5, 10, 11).order(1, 5, Confirmed, 12, 13).soldOut(1, 1, 0, 14, 15), true, 0, porcupine.Ok},
		{"two confirmed orders for the last unit", new(h).create(1, 1, 0, 1).order(1, 1, Confirmed, 2, 10).order(1, 1, Confirmed, 3, 9), true, 0, porcupine.Illegal},
		{"lost update: three sold from two", new(h).create(1, 2, 0, 1).order(1, 1, Confirmed, 2, 10).order(1, 1, Confirmed, 3, 11).
			order(1, 1, Confirmed, 4, 12), false, 0, porcupine.Illegal},
		{"sold out while the stock sufficed", new(h).create(1, 5, 0, 1).soldOut(1, 2, 5, 2, 3), false, 0, porcupine.Illegal},
		{"sold out not un-said by a finished restock", new(h).create(1, 0, 0, 1).restock(1, 2, 2, 2, 3).soldOut(1, 1, 0, 4, 5), false, 0, porcupine.Illegal},
		{"sold out concurrent with the restock", new(h).create(1, 0, 0, 1).restock(1, 2, 2, 2, 6).soldOut(1, 1, 0, 4, 5), true, 0, porcupine.Ok},
		{"available not the stock, exact", new(h).create(1, 3, 0, 1).soldOut(1, 5, 2, 2, 3), true, 0, porcupine.Illegal},
		{"available not the stock, loose", new(h).create(1, 3, 0, 1).soldOut(1, 5, 2, 2, 3), false, 0, porcupine.Ok},
		{"an unknown order that happened later", new(h).create(1, 1, 0, 1).order(1, 1, Unknown, 2, 3).read(1, 1, 5, 6).read(1, 0, 10, 11), true, 0, porcupine.Ok},
		{"an unknown order that never happened", new(h).create(1, 1, 0, 1).order(1, 1, Unknown, 2, 3).read(1, 1, 5, 6).order(1, 1, Confirmed, 7, 8), true, 0, porcupine.Ok},
		{"an unknown order undone", new(h).create(1, 1, 0, 1).order(1, 1, Unknown, 2, 3).read(1, 0, 5, 6).read(1, 1, 10, 11), true, 0, porcupine.Illegal},
		{"a found order must fit the stock", new(h).create(1, 1, 0, 1).order(1, 1, Confirmed, 2, 3).order(1, 1, Happened, 4, 5), true, 0, porcupine.Illegal},
		{"restock answers a sum that never was", new(h).create(1, 1, 0, 1).restock(1, 2, 4, 2, 3), true, 0, porcupine.Illegal},
		{"unknown restock, not applied", new(h).create(1, 1, 0, 1).restockUnknown(1, 5, 2).read(1, 1, 10, 11), true, 0, porcupine.Ok},
		{"unknown restock, applied", new(h).create(1, 1, 0, 1).restockUnknown(1, 5, 2).read(1, 6, 10, 11), true, 0, porcupine.Ok},
		{"unknown restock applied twice", new(h).create(1, 1, 0, 1).restockUnknown(1, 5, 2).read(1, 11, 10, 11), true, 0, porcupine.Illegal},
		{"stale read", new(h).create(1, 5, 0, 1).order(1, 2, Confirmed, 2, 3).read(1, 5, 10, 11), true, 0, porcupine.Illegal},
		{"stale read within the cache bound", new(h).create(1, 5, 0, 1).order(1, 2, Confirmed, 2, 3).read(1, 5, 10, 11), true, 8 * time.Millisecond, porcupine.Ok},
		{"products are independent", new(h).create(1, 1, 0, 1).create(2, 1, 0, 1).order(1, 1, Confirmed, 2, 3).order(2, 1, Confirmed, 2, 3).
			soldOut(1, 1, 0, 4, 5).read(2, 0, 4, 5), true, 0, porcupine.Ok},
		{"an order before the product exists", new(h).order(1, 1, Confirmed, 0, 1).create(1, 1, 2, 3), true, 0, porcupine.Illegal},
		{"refused orders change nothing", new(h).create(1, 1, 0, 1).order(1, 1, Refused, 2, 3).read(1, 1, 4, 5), true, 0, porcupine.Ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// Unknown operations stay open until the end of the run.
			for _, p := range c.b.ops {
				if p.Out.Outcome == Unknown && p.Return == p.Invoke {
					p.Return = p.Invoke + time.Millisecond
				}
			}
			history := History(c.b.ops, HistoryOptions{Reads: true, ReadSlack: c.slack, End: end})
			got := agree(t, New(Options{ExactAvailable: c.exact}), history)
			if got != c.want {
				t.Errorf("check = %v, want %v", got, c.want)
			}
		})
	}
}

// TestSaleRules: the window and the limit. Times in milliseconds; the window's moments are
// widened by slack milliseconds.
func TestSaleRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		b     *h
		slack int
		want  porcupine.CheckResult
	}{
		{"confirmed after the opening", new(h).sale(1, 5, 100, -1, 0, 0, 1).by(1, "a", 1, NotOpen, 10, 20).by(1, "b", 1, Confirmed, 110, 120).read(1, 4, 130, 140),
			0, porcupine.Ok},
		{"confirmed before the opening", new(h).sale(1, 5, 100, -1, 0, 0, 1).by(1, "a", 1, Confirmed, 10, 20), 0, porcupine.Illegal},
		{"confirmed across the opening", new(h).sale(1, 5, 100, -1, 0, 0, 1).by(1, "a", 1, Confirmed, 90, 110), 0, porcupine.Ok},
		{"confirmed just before the opening, within the slack", new(h).sale(1, 5, 100, -1, 0, 0, 1).by(1, "a", 1, Confirmed, 90, 97), 5, porcupine.Ok},
		{"confirmed just before the opening, beyond the slack", new(h).sale(1, 5, 100, -1, 0, 0, 1).by(1, "a", 1, Confirmed, 90, 97), 2, porcupine.Illegal},
		// Its row's created_at is what pins it down: the SQL verdict's check.
		{"an unknown order that happened may have taken effect after the opening", new(h).sale(1, 2, 100, -1, 0, 0, 1).by(1, "a", 1, Happened, 10, 20).
			by(1, "b", 1, Confirmed, 110, 120).read(1, 0, 130, 140), 0, porcupine.Ok},
		{"sale-not-open after the opening", new(h).sale(1, 5, 100, -1, 0, 0, 1).by(1, "a", 1, NotOpen, 110, 120), 0, porcupine.Illegal},
		{"sale-not-open across the opening", new(h).sale(1, 5, 100, -1, 0, 0, 1).by(1, "a", 1, NotOpen, 90, 110), 0, porcupine.Ok},
		{"sale-not-open of a product without a window", new(h).create(1, 5, 0, 1).by(1, "a", 1, NotOpen, 10, 20), 0, porcupine.Illegal},
		{"opened before its creation: on sale at once", new(h).sale(1, 5, 0, -1, 0, 50, 60).by(1, "a", 1, Confirmed, 70, 80), 0, porcupine.Ok},
		{"confirmed after the end", new(h).sale(1, 5, -1, 100, 0, 0, 1).by(1, "a", 1, Confirmed, 10, 20).by(1, "b", 1, Confirmed, 110, 120), 0, porcupine.Illegal},
		{"sale-ended before the end", new(h).sale(1, 5, -1, 100, 0, 0, 1).by(1, "a", 1, Ended, 10, 20), 0, porcupine.Illegal},
		{"sale-ended after the end", new(h).sale(1, 5, 50, 100, 0, 0, 1).by(1, "a", 1, NotOpen, 10, 20).by(1, "b", 2, Confirmed, 60, 70).
			by(1, "c", 1, Ended, 110, 120).read(1, 3, 130, 140), 0, porcupine.Ok},
		{"a sale ended early: sale-ended after the end, not before", new(h).sale(1, 5, -1, -1, 0, 0, 1).by(1, "a", 1, Confirmed, 10, 20).
			add(1, KindClose, 0, Output{Outcome: Confirmed}, 30, 40).by(1, "b", 1, Ended, 50, 60).read(1, 4, 70, 80), 0, porcupine.Ok},
		{"a sale ended early: confirmed after the end", new(h).sale(1, 5, -1, -1, 0, 0, 1).add(1, KindClose, 0, Output{Outcome: Confirmed}, 30, 40).
			by(1, "b", 1, Confirmed, 50, 60), 0, porcupine.Illegal},
		{"a sale ended early: sale-ended before the end", new(h).sale(1, 5, -1, -1, 0, 0, 1).by(1, "b", 1, Ended, 10, 20).
			add(1, KindClose, 0, Output{Outcome: Confirmed}, 30, 40), 0, porcupine.Illegal},
		{"two for a customer with a limit of one", new(h).sale(1, 5, -1, -1, 1, 0, 1).by(1, "a", 1, Confirmed, 10, 20).by(1, "a", 1, Confirmed, 15, 30),
			0, porcupine.Illegal},
		{"one each for two customers with a limit of one", new(h).sale(1, 5, -1, -1, 1, 0, 1).by(1, "a", 1, Confirmed, 10, 20).by(1, "b", 1, Confirmed, 15, 30),
			0, porcupine.Ok},
		{"three units over two orders, limit two", new(h).sale(1, 5, -1, -1, 2, 0, 1).by(1, "a", 1, Confirmed, 10, 20).by(1, "a", 2, Confirmed, 30, 40),
			0, porcupine.Illegal},
		{"customer-limit when the customer held nothing", new(h).sale(1, 5, -1, -1, 2, 0, 1).by(1, "a", 1, OverLimit, 10, 20), 0, porcupine.Illegal},
		{"customer-limit after the customer's purchase", new(h).sale(1, 5, -1, -1, 2, 0, 1).by(1, "a", 2, Confirmed, 10, 20).by(1, "a", 1, OverLimit, 30, 40),
			0, porcupine.Ok},
		{"customer-limit: the order alone exceeds the limit", new(h).sale(1, 5, -1, -1, 2, 0, 1).by(1, "a", 3, OverLimit, 10, 20), 0, porcupine.Ok},
		{"customer-limit concurrent with the purchase that reached it", new(h).sale(1, 5, -1, -1, 1, 0, 1).by(1, "a", 1, OverLimit, 10, 30).
			by(1, "a", 1, Confirmed, 15, 40), 0, porcupine.Ok},
		{"customer-limit after the purchase that reached it, refused first", new(h).sale(1, 5, -1, -1, 1, 0, 1).by(1, "a", 1, OverLimit, 10, 20).
			by(1, "a", 1, Confirmed, 25, 40), 0, porcupine.Illegal},
		{"an unknown order that never happened leaves the limit free", new(h).sale(1, 5, -1, -1, 1, 0, 1).by(1, "a", 1, Unknown, 10, 20).
			by(1, "a", 1, Confirmed, 30, 40), 0, porcupine.Ok},
		{"an unknown order that happened holds the limit", new(h).sale(1, 5, -1, -1, 1, 0, 1).by(1, "a", 1, Happened, 10, 20).
			by(1, "a", 1, Confirmed, 30, 40), 0, porcupine.Illegal},
		{"a limit does not hide an oversell", new(h).sale(1, 1, -1, -1, 1, 0, 1).by(1, "a", 1, Confirmed, 10, 20).by(1, "b", 1, Confirmed, 15, 30),
			0, porcupine.Illegal},
		{"the window and the limit together", new(h).sale(1, 3, 100, 200, 1, 0, 1).by(1, "a", 1, NotOpen, 10, 20).by(1, "a", 1, Confirmed, 105, 120).
			by(1, "a", 1, OverLimit, 130, 140).by(1, "b", 1, Confirmed, 130, 150).by(1, "b", 1, Ended, 210, 220).read(1, 1, 230, 240), 0, porcupine.Ok},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			history := History(c.b.ops, HistoryOptions{Reads: true, End: time.Hour, WindowSlack: time.Duration(c.slack) * time.Millisecond})
			got := agree(t, New(Options{ExactAvailable: true}), history)
			if got != c.want {
				t.Errorf("check = %v, want %v", got, c.want)
			}
		})
	}
}

// TestRulesPartitions: a product with a limit gets a partition per customer beside its own,
// each starting with the creation; a product without one does not.
func TestRulesPartitions(t *testing.T) {
	t.Parallel()
	b := new(h).sale(1, 5, 100, -1, 2, 0, 1).create(2, 5, 0, 1).by(1, "a", 1, Confirmed, 110, 120).by(1, "b", 1, Confirmed, 110, 120).
		by(1, "a", 1, Confirmed, 130, 140).by(2, "a", 1, Confirmed, 10, 20)
	history := History(b.ops, HistoryOptions{End: time.Hour})
	parts := New(Options{}).Partition(history)
	var sizes []int
	for _, p := range parts {
		sizes = append(sizes, len(p))
	}
	// product 1: creation, opening, three orders; customer a: creation and two orders;
	// customer b: creation and one; product 2: creation and one order.
	if want := []int{5, 3, 2, 2}; !slices.Equal(sizes, want) {
		t.Fatalf("partition sizes = %v, want %v", sizes, want)
	}
	if first := parts[1][0].Input.(Input); first.Kind != KindCreate || !first.PerCustomer || first.Customer != "a" {
		t.Errorf("customer partition starts with %+v, want the creation for customer a", first)
	}
}

// TestSaveKeepsRules: a history saved and loaded again keeps the rules and the customers the
// check needs.
func TestSaveKeepsRules(t *testing.T) {
	t.Parallel()
	b := new(h).sale(1, 5, 100, 300, 2, 0, 1).by(1, "a", 1, NotOpen, 10, 20)
	path := filepath.Join(t.TempDir(), "history.json")
	if err := Save(path, b.ops, time.Second); err != nil {
		t.Fatal(err)
	}
	ops, _, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ops[0].Out.Rules, b.ops[0].Out.Rules; got != want {
		t.Errorf("rules = %+v, want %+v", got, want)
	}
	if ops[1].Customer != "a" || ops[1].Out.Outcome != NotOpen {
		t.Errorf("order = %+v, want customer a refused sale-not-open", ops[1])
	}
}

func TestPorcupineHistory(t *testing.T) {
	t.Parallel()
	b := new(h).create(1, 5, 0, 1).order(1, 1, Refused, 2, 3).order(1, 1, Unknown, 4, 5).read(1, 5, 6, 7)
	writes := History(b.ops, HistoryOptions{End: time.Second})
	if len(writes) != 2 {
		t.Fatalf("writes-only history has %d operations, want 2 (refused and reads left out): %+v", len(writes), writes)
	}
	if got := writes[1].Return; got != int64(time.Second) {
		t.Errorf("unknown order returns at %d, want the end of the run %d", got, int64(time.Second))
	}
	all := History(b.ops, HistoryOptions{Reads: true, ReadSlack: 5 * time.Millisecond, End: time.Second})
	if len(all) != 3 || all[2].Call != int64(time.Millisecond) {
		t.Errorf("with reads = %+v, want the read widened back to 1ms", all)
	}
	if got := concurrency(all); got != 2 {
		t.Errorf("concurrency = %d, want 2 (the unknown order and the widened read)", got)
	}
}

// TestCheckHistoryVisualisesViolations: a history that is not linearizable leaves Porcupine's
// HTML next to the run, and one that is leaves nothing.
func TestCheckHistoryVisualisesViolations(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	model := New(Options{ExactAvailable: true})
	bad := History(new(h).create(1, 1, 0, 1).order(1, 1, Confirmed, 2, 10).order(1, 1, Confirmed, 3, 9).ops,
		HistoryOptions{End: time.Second})
	res, err := Check("orders+restocks", model, bad, 10*time.Second,
		[]porcupine.Annotation{{Tag: "fault", Start: 2e6, End: 5e6, Description: "pause r2"}}, dir, "bad.html")
	if err != nil {
		t.Fatal(err)
	}
	if res.Result != porcupine.Illegal || res.Visual == "" {
		t.Fatalf("result = %+v, want illegal with a visualisation", res)
	}
	html, err := os.ReadFile(res.Visual)
	if err != nil || !strings.Contains(string(html), "order(1)") {
		t.Errorf("visualisation %s: %v, describes the orders: %v", res.Visual, err, strings.Contains(string(html), "order(1)"))
	}
	good := History(new(h).create(1, 1, 0, 1).order(1, 1, Confirmed, 2, 10).ops, HistoryOptions{End: time.Second})
	res, err = Check("orders+restocks", model, good, 10*time.Second, nil, dir, "good.html")
	if err != nil || res.Result != porcupine.Ok {
		t.Fatalf("good history: %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "good.html")); !os.IsNotExist(err) {
		t.Errorf("a linearizable history left a visualisation (%v)", err)
	}
}

// TestOneTransactionOneMoment: the orders of a product one transaction committed (Op.Txn)
// take their units at one moment, so a read may not see part of them; a sold-out answer that
// may have come from the batch keeps them apart (it saw the units left at its turn); so do
// intervals that do not meet. A customer's partition still sees each order of a batch.
func TestOneTransactionOneMoment(t *testing.T) {
	t.Parallel()
	txn := func(b *h, name string, ids ...int) *h {
		for _, i := range ids {
			b.ops[i].Txn = name
		}
		return b
	}
	cases := []struct {
		name string
		b    *h
		want porcupine.CheckResult
	}{
		{"a read sees a whole batch", txn(new(h).create(1, 5, 0, 1).order(1, 1, Confirmed, 2, 10).order(1, 2, Confirmed, 3, 10).read(1, 2, 11, 12),
			"t", 1, 2), porcupine.Ok},
		{"a read sees half a batch", txn(new(h).create(1, 5, 0, 1).order(1, 1, Confirmed, 2, 10).order(1, 2, Confirmed, 3, 10).read(1, 4, 4, 5),
			"t", 1, 2), porcupine.Illegal},
		{"half a batch, of two transactions", new(h).create(1, 5, 0, 1).order(1, 1, Confirmed, 2, 10).order(1, 2, Confirmed, 3, 10).read(1, 4, 4, 5),
			porcupine.Ok},
		{"a sold-out from inside the batch", txn(new(h).create(1, 3, 0, 1).order(1, 2, Confirmed, 2, 10).soldOut(1, 2, 1, 3, 10).order(1, 1, Confirmed, 3, 10),
			"t", 1, 3), porcupine.Ok},
		{"intervals that do not meet", txn(new(h).create(1, 5, 0, 1).order(1, 1, Confirmed, 2, 3).read(1, 4, 4, 5).order(1, 2, Confirmed, 6, 7),
			"t", 1, 3), porcupine.Ok},
		{"a batch past the stock", txn(new(h).create(1, 2, 0, 1).order(1, 2, Confirmed, 2, 10).order(1, 1, Confirmed, 3, 10), "t", 1, 2), porcupine.Illegal},
		{"a customer over the limit within a batch", txn(new(h).sale(1, 9, -1, -1, 2, 0, 1).by(1, "a", 2, Confirmed, 2, 10).by(1, "a", 1, Confirmed, 3, 10),
			"t", 1, 2), porcupine.Illegal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			history := History(c.b.ops, HistoryOptions{Reads: true, End: time.Hour})
			got := agree(t, New(Options{ExactAvailable: true}), history)
			if got != c.want {
				t.Errorf("got %v, want %v", got, c.want)
			}
		})
	}
}
