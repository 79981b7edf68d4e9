package stockpg_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// heldCases are the Store contract of the cap on what one customer holds of a product (issue
// #31), run against every store with the rest of the contract.
var heldCases = []storeCase{
	{"the cap on held units refuses a write above it, in every store, and an ended hold frees it", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "capped", Name: "capped", Stock: 10,
			Sale: stock.SaleRules{HoldFor: time.Hour, MaxHeldPerCustomer: 2}})
		if err != nil || p.MaxHeldPerCustomer != 2 {
			t.Fatalf("create = %+v, %v", p, err)
		}
		id := p.ID
		held := func(customer string) int64 {
			t.Helper()
			return customerLevels(t, s, customer, id)[id].Held[customer]
		}
		hold := func(st stock.Store, customer string, qty int64) (stock.Order, error) {
			t.Helper()
			w := heldWrite(customer, customerLevels(t, s, customer, id), stock.Item{ProductID: id, Quantity: qty})
			c, err := st.Commit(ctx, w)
			if _, ok := c.Holds[w.Orders[0].ID]; err == nil && !ok {
				t.Errorf("commit %+v, want order %s held", c, w.Orders[0].ID)
			}
			return w.Orders[0], err
		}
		first, err := hold(s, "c", 2)
		if err != nil {
			t.Fatalf("hold 2: %v", err)
		}
		if got := held("c"); got != 2 {
			t.Errorf("c holds %d by the snapshot, want 2", got)
		}
		// A demonstration store keeps the cap: it is a rule of the product, not a layer taken away.
		for name, st := range map[string]stock.Store{"production": s, "check alone": demo(stock.Defense{Check: true})} {
			o, err := hold(st, "c", 1)
			var caught *stock.CaughtError
			if !errors.As(err, &caught) || caught.Layer != stock.LayerHoldLimit || caught.ProductID != id || !errors.Is(err, stock.ErrConflict) {
				t.Fatalf("%s: a hold above the cap = %v, want the hold_limit layer's ErrConflict", name, err)
			}
			wantNothingWritten(t, s, id, 8, o.ID)
		}
		if _, err := hold(s, "d", 2); err != nil {
			t.Fatalf("another customer: %v", err)
		}
		if _, err := s.ReleaseHolds(ctx, []uuid.UUID{first.ID}, []int64{id}, false); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		if got := held("c"); got != 0 {
			t.Errorf("c holds %d after the cancel, want 0", got)
		}
		again, err := hold(s, "c", 2)
		if err != nil {
			t.Fatalf("hold 2 after the cancel: %v", err)
		}
		if _, _, err := s.ConfirmHold(ctx, again.ID, ""); err != nil {
			t.Fatalf("confirm: %v", err)
		}
		if got := held("c"); got != 0 {
			t.Errorf("c holds %d after the confirm, want 0", got)
		}
		if _, err := hold(s, "c", 2); err != nil {
			t.Errorf("hold 2 after the confirm: %v", err)
		}
	}},
	{"a cart held for one product's hold counts every product's units against its own cap", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		plain, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "plain", Name: "plain", Stock: 10, Sale: stock.SaleRules{MaxHeldPerCustomer: 3}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		held, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "held", Name: "held", Stock: 10, Sale: stock.SaleRules{HoldFor: time.Hour}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		// Alone, the plain product is sold, not held: its cap is not in play.
		if _, err := s.Commit(ctx, heldWrite("c", customerLevels(t, s, "c", plain.ID), stock.Item{ProductID: plain.ID, Quantity: 5})); err != nil {
			t.Fatalf("5 units of the plain product: %v", err)
		}
		if got := customerLevels(t, s, "c", plain.ID, held.ID)[plain.ID].Held["c"]; got != 0 {
			t.Errorf("c holds %d of the plain product after buying it, want 0", got)
		}
		cart := func() stock.Write {
			return heldWrite("c", customerLevels(t, s, "c", plain.ID, held.ID),
				stock.Item{ProductID: plain.ID, Quantity: 3}, stock.Item{ProductID: held.ID, Quantity: 1})
		}
		if _, err := s.Commit(ctx, cart()); err != nil {
			t.Fatalf("a held cart: %v", err)
		}
		if got := customerLevels(t, s, "c", plain.ID, held.ID)[plain.ID].Held["c"]; got != 3 {
			t.Errorf("c holds %d of the plain product in a held cart, want 3", got)
		}
		if _, err := s.Commit(ctx, cart()); !errors.Is(err, stock.ErrConflict) {
			t.Errorf("a second held cart, above the plain product's cap = %v, want ErrConflict", err)
		}
	}},
	{"a limit set after holds ended counts only the units held or bought", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "recount", Name: "recount", Stock: 10, Sale: stock.SaleRules{HoldFor: time.Hour}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		var orders []uuid.UUID
		for range 3 {
			w := heldWrite("c", customerLevels(t, s, "c", p.ID), stock.Item{ProductID: p.ID, Quantity: 1})
			if _, err := s.Commit(ctx, w); err != nil {
				t.Fatalf("hold: %v", err)
			}
			orders = append(orders, w.Orders[0].ID)
		}
		if _, err := s.ReleaseHolds(ctx, orders[:1], []int64{p.ID}, false); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		if _, _, err := s.ConfirmHold(ctx, orders[1], ""); err != nil {
			t.Fatalf("confirm: %v", err)
		}
		if _, err := s.UpdateSale(ctx, p.ID, stock.SaleChange{MaxPerCustomer: ptr(int64(3))}); err != nil {
			t.Fatalf("set a limit: %v", err)
		}
		if got := customerLevels(t, s, "c", p.ID)[p.ID].Bought["c"]; got != 2 {
			t.Errorf("c has bought %d by the recount, want 2: one confirmed, one held, the cancelled one no more", got)
		}
	}},
	{"a hold lasts at most an hour, and a sale change sets the cap or puts back its default", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		var invalid *stock.ValidationError
		if _, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "day", Name: "day", Stock: 1, Sale: stock.SaleRules{HoldFor: 2 * time.Hour}}); !errors.As(err, &invalid) || invalid.Field != "hold_for" {
			t.Errorf("a product held for 2 h = %v, want hold_for refused", err)
		}
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "rules", Name: "rules", Stock: 1})
		if err != nil || p.MaxHeldPerCustomer != stock.DefaultMaxQuantity {
			t.Fatalf("create without a cap = %+v, %v; want the cap %d", p, err, stock.DefaultMaxQuantity)
		}
		if _, err := s.UpdateSale(ctx, p.ID, stock.SaleChange{HoldFor: ptr(2 * time.Hour)}); !errors.As(err, &invalid) || invalid.Field != "hold_for" {
			t.Errorf("a change to a 2 h hold = %v, want hold_for refused", err)
		}
		for _, step := range []struct {
			name   string
			change stock.SaleChange
			want   int64
		}{
			{"set", stock.SaleChange{MaxHeldPerCustomer: ptr(int64(4))}, 4},
			{"another rule: kept", stock.SaleChange{HoldFor: ptr(time.Minute)}, 4},
			{"a limit: the default follows it", stock.SaleChange{MaxPerCustomer: ptr(int64(7)), DefaultMaxHeld: 12}, 7},
			{"set beside the limit", stock.SaleChange{MaxPerCustomer: ptr(int64(6)), MaxHeldPerCustomer: ptr(int64(2))}, 2},
			{"the default again, with the limit", stock.SaleChange{ClearMaxHeldPerCustomer: true, DefaultMaxHeld: 12}, 6},
			{"no limit: the default", stock.SaleChange{ClearMaxPerCustomer: true, DefaultMaxHeld: 12}, 12},
		} {
			got, err := s.UpdateSale(ctx, p.ID, step.change)
			if err != nil || got.MaxHeldPerCustomer != step.want {
				t.Errorf("%s: cap %d, %v; want %d", step.name, got.MaxHeldPerCustomer, err, step.want)
			}
		}
	}},
	{"an expired hold frees its customer's cap and count under the limit, as a cancelled one does", func(t *testing.T, s stock.Store, demo demos) {
		ctx := context.Background()
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "expiring", Name: "expiring", Stock: 10,
			Sale: stock.SaleRules{HoldFor: time.Second, MaxPerCustomer: 5, MaxHeldPerCustomer: 2}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		id := p.ID
		hold := func(qty int64) stock.Order { return mustHold(t, s, "c", id, qty) }
		has := func() stock.Level {
			t.Helper()
			return customerLevels(t, s, "c", id)[id]
		}
		cancelled := hold(1)
		if _, err := s.ReleaseHolds(ctx, []uuid.UUID{cancelled.ID}, []int64{id}, false); err != nil {
			t.Fatalf("cancel: %v", err)
		}
		if l := has(); l.Held["c"] != 0 || l.Bought["c"] != 0 || l.Stock != 10 {
			t.Errorf("after the cancel: held %d, bought %d, stock %d; want 0, 0, 10", l.Held["c"], l.Bought["c"], l.Stock)
		}
		expiring := hold(2)
		if l := has(); l.Held["c"] != 2 || l.Bought["c"] != 2 {
			t.Errorf("held %d, bought %d; want 2 and 2", l.Held["c"], l.Bought["c"])
		}
		// Due once its second has passed on the store's clock.
		testenv.Poll(t, 10*time.Second, "the hold to be due", func() bool {
			due, err := s.DueHolds(ctx, []uuid.UUID{expiring.ID}, 0, 10)
			if err != nil {
				t.Fatalf("due holds: %v", err)
			}
			return len(due[expiring.ID]) == 1 && due[expiring.ID][0] == id
		})
		if rel, err := s.ReleaseHolds(ctx, []uuid.UUID{expiring.ID}, []int64{id}, true); err != nil || len(rel.Lag) != 1 {
			t.Fatalf("expire = %+v, %v; want the hold expired", rel, err)
		}
		if l := has(); l.Held["c"] != 0 || l.Bought["c"] != 0 || l.Stock != 10 {
			t.Errorf("after the expiry: held %d, bought %d, stock %d; want 0, 0, 10", l.Held["c"], l.Bought["c"], l.Stock)
		}
		if o, err := s.Order(ctx, expiring.ID); err != nil || o.Status != stock.OrderStatusExpired {
			t.Errorf("the expired order = %+v, %v; want expired", o, err)
		}
	}},
	{"a hold's confirm and cancel decide it for its customer only, and say what stands in the way", func(t *testing.T, s stock.Store, _ demos) {
		ctx := context.Background()
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "decided", Name: "decided", Stock: 10, Sale: stock.SaleRules{HoldFor: time.Hour}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		id := p.ID
		hold := func(qty int64) stock.Order { return mustHold(t, s, "c", id, qty) }
		paid, gaveUp := hold(2), hold(3)
		for _, o := range []uuid.UUID{paid.ID, gaveUp.ID, uuid.Must(uuid.NewV7())} {
			if _, _, err := s.ConfirmHold(ctx, o, "d"); !errors.Is(err, stock.ErrOrderNotFound) {
				t.Errorf("another customer's confirm of %s: %v, want ErrOrderNotFound", o, err)
			}
			if _, err := s.CancelHold(ctx, o, "d", []int64{id}); !errors.Is(err, stock.ErrOrderNotFound) {
				t.Errorf("another customer's cancel of %s: %v, want ErrOrderNotFound", o, err)
			}
		}
		missing := uuid.Must(uuid.NewV7())
		if _, _, err := s.ConfirmHold(ctx, missing, ""); !errors.Is(err, stock.ErrOrderNotFound) {
			t.Errorf("confirm of no order: %v, want ErrOrderNotFound", err)
		}
		if _, err := s.CancelHold(ctx, missing, "", []int64{id}); !errors.Is(err, stock.ErrOrderNotFound) {
			t.Errorf("cancel of no order: %v, want ErrOrderNotFound", err)
		}
		if l := customerLevels(t, s, "c", id)[id]; l.Stock != 5 || l.Held["c"] != 5 {
			t.Fatalf("after the refusals: stock %d, c holds %d; want 5 and 5", l.Stock, l.Held["c"])
		}

		for i, customer := range []string{"c", ""} {
			o, confirmed, err := s.ConfirmHold(ctx, paid.ID, customer)
			if err != nil || confirmed != (i == 0) || o.Status != stock.OrderStatusConfirmed || o.CustomerID != "c" || o.DecidedAt == nil ||
				len(o.Items) != 1 || o.Items[0] != paid.Items[0] || o.ExpiresAt == nil {
				t.Errorf("confirm %d = %+v, %t, %v; want the order confirmed, by the first call", i, o, confirmed, err)
			}
		}
		if c, err := s.CancelHold(ctx, paid.ID, "c", []int64{id}); err != nil || c.Cancelled || c.Order.Status != stock.OrderStatusConfirmed || len(c.Products) != 0 {
			t.Errorf("cancel of the confirmed order = %+v, %v; want it found confirmed, nothing given back", c, err)
		}

		c, err := s.CancelHold(ctx, gaveUp.ID, "", []int64{id})
		if err != nil || !c.Cancelled || c.Order.Status != stock.OrderStatusCancelled || c.Order.CustomerID != "c" || c.Order.DecidedAt == nil ||
			len(c.Order.Items) != 1 || c.Order.Items[0] != gaveUp.Items[0] || len(c.Products) != 1 {
			t.Fatalf("an admin's cancel = %+v, %v; want the order cancelled and its product raised", c, err)
		}
		if now, err := s.Product(ctx, id); err != nil || !cmp.Equal(c.Products[0], now) || now.Stock != 8 {
			t.Errorf("the product raised = %+v, want it as it stands (%+v, %v), 8 in stock", c.Products[0], now, err)
		}
		if c, err := s.CancelHold(ctx, gaveUp.ID, "c", []int64{id}); err != nil || c.Cancelled || c.Order.Status != stock.OrderStatusCancelled || len(c.Products) != 0 {
			t.Errorf("a second cancel = %+v, %v; want it found cancelled, nothing given back", c, err)
		}
		if _, _, err := s.ConfirmHold(ctx, gaveUp.ID, "c"); !errors.Is(err, stock.ErrOrderCancelled) {
			t.Errorf("confirm of the cancelled order: %v, want ErrOrderCancelled", err)
		}
		if l := customerLevels(t, s, "c", id)[id]; l.Stock != 8 || l.Held["c"] != 0 {
			t.Errorf("at the end: stock %d, c holds %d; want 8 and 0", l.Stock, l.Held["c"])
		}
	}},
	{"a hold past its expires_at is neither confirmed nor, once expired, cancelled", func(t *testing.T, s stock.Store, _ demos) {
		ctx := context.Background()
		p, err := s.CreateProduct(ctx, stock.NewProduct{SKU: "lapsed", Name: "lapsed", Stock: 10, Sale: stock.SaleRules{HoldFor: time.Second}})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		id := p.ID
		lapsed := mustHold(t, s, "c", id, 1).ID
		testenv.Poll(t, 10*time.Second, "the hold to be due", func() bool {
			due, err := s.DueHolds(ctx, []uuid.UUID{lapsed}, 0, 10)
			if err != nil {
				t.Fatalf("due holds: %v", err)
			}
			return len(due) == 1
		})
		if _, _, err := s.ConfirmHold(ctx, lapsed, "c"); !errors.Is(err, stock.ErrHoldExpired) {
			t.Errorf("confirm past expires_at: %v, want ErrHoldExpired", err)
		}
		if rel, err := s.ReleaseHolds(ctx, []uuid.UUID{lapsed}, []int64{id}, true); err != nil || len(rel.Lag) != 1 {
			t.Fatalf("expire = %+v, %v", rel, err)
		}
		if _, _, err := s.ConfirmHold(ctx, lapsed, "c"); !errors.Is(err, stock.ErrHoldExpired) {
			t.Errorf("confirm of the expired order: %v, want ErrHoldExpired", err)
		}
		if c, err := s.CancelHold(ctx, lapsed, "c", []int64{id}); err != nil || c.Cancelled || c.Order.Status != stock.OrderStatusExpired {
			t.Errorf("cancel of the expired order = %+v, %v; want it found expired", c, err)
		}
		if got := stockOf(t, s, id); got != 10 {
			t.Errorf("stock %d, want 10: the expiry's unit back once", got)
		}
	}},
}

// customerLevels reads the levels of ids with what customer has of them.
func customerLevels(t *testing.T, s stock.Store, customer string, ids ...int64) map[int64]stock.Level {
	t.Helper()
	snap, err := s.Snapshot(context.Background(), ids, nil, []string{customer})
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return snap.Levels
}

// mustHold writes an order of qty units of product id for customer, held.
func mustHold(t *testing.T, s stock.Store, customer string, id, qty int64) stock.Order {
	t.Helper()
	w := heldWrite(customer, customerLevels(t, s, customer, id), stock.Item{ProductID: id, Quantity: qty})
	if _, err := s.Commit(context.Background(), w); err != nil {
		t.Fatalf("hold %d: %v", qty, err)
	}
	return w.Orders[0]
}

// heldWrite is a write of one order of items (ascending product ids) for customer, decided from
// levels.
func heldWrite(customer string, levels map[int64]stock.Level, items ...stock.Item) stock.Write {
	o := stock.Order{ID: uuid.Must(uuid.NewV7()), CustomerID: customer, Status: stock.OrderStatusConfirmed, Items: items}
	w := stock.Write{Orders: []stock.Order{o}}
	for _, it := range items {
		w.Decrements = append(w.Decrements, stock.Decrement{ProductID: it.ProductID, Quantity: it.Quantity, Read: levels[it.ProductID]})
	}
	return w
}

func ptr[T any](v T) *T { return &v }
