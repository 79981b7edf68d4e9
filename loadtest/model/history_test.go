package model

import (
	"os"
	"path/filepath"
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
			got := porcupine.CheckOperationsTimeout(New(Options{ExactAvailable: c.exact}), history, 10*time.Second)
			if got != c.want {
				t.Errorf("check = %v, want %v", got, c.want)
			}
		})
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
