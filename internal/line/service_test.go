package line_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// The line end to end over the in-memory stores: several replicas of the service sharing them,
// as replicas share Postgres.

func customers(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprint("c", i)
	}
	return out
}

// TestOpeningDrawsAndAdmitsAsTheStockAllows: everyone who joined before the opening is queued,
// then drawn at the opening, by the seed recorded; the line admits as many buyers as units
// (one each), from the front; the rest wait, each knowing how many are ahead.
func TestOpeningDrawsAndAdmitsAsTheStockAllows(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	b, _ := w.replica(t)
	opens := time.Now().Add(300 * time.Millisecond)
	id := w.product(t, 3, 10, stock.SaleRules{StartsAt: &opens, MaxPerCustomer: 1})
	in := joinAll(t, a, id, customers(8)...)
	for _, j := range in {
		if j.status.State != line.Queued {
			t.Fatalf("%s joined before the opening: %s, want queued", j.customer, j.status.State)
		}
	}
	places := map[int64]*joined{}
	for _, j := range in {
		st := j.next(t, b, id) // the other replica answers
		if st.State != line.Admitted && st.State != line.Waiting {
			t.Fatalf("%s after the opening: %+v", j.customer, st)
		}
		places[st.Place] = j
	}
	for p := int64(1); p <= 8; p++ {
		j := places[p]
		if j == nil {
			t.Fatalf("no ticket at place %d", p)
		}
		want := line.Waiting
		if p <= 3 {
			want = line.Admitted
		}
		if j.status.State != want || want == line.Waiting && j.status.Ahead != p-4 || want == line.Admitted && j.status.Pass == "" {
			t.Errorf("place %d: %+v, want %s", p, j.status, want)
		}
	}
	d, err := a.Draw(context.Background(), id)
	if err != nil || len(d.Tickets) != 8 || d.DrawnAt.Before(opens) {
		t.Fatalf("draw = %+v, %v", d, err)
	}
	var ids []int64
	for _, j := range in {
		ids = append(ids, j.status.Ticket)
	}
	for i, tid := range line.Rank(d.Seed, ids) {
		if places[int64(i+1)].status.Ticket != tid {
			t.Errorf("place %d is not the seed's", i+1)
		}
	}
}

// TestSoldOutReachesEveryWaitingTicket: once the last unit sells, every ticket still in line
// — waiting, or admitted and too late — is told sold out, and the buyers are told used.
func TestSoldOutReachesEveryWaitingTicket(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	b, _ := w.replica(t)
	id := w.product(t, 3, 4, stock.SaleRules{MaxPerCustomer: 1})
	in := joinAll(t, a, id, customers(12)...)
	var admitted, waiting []*joined
	for _, j := range in {
		if st := j.placed(t, b, id); st.State == line.Admitted {
			admitted = append(admitted, j)
		} else {
			waiting = append(waiting, j)
		}
	}
	if len(admitted) != 3 {
		t.Fatalf("%d admitted with 3 units, one each: want 3", len(admitted))
	}
	for _, j := range admitted {
		if err := buy(t, w, a, id, j); err != nil {
			t.Fatalf("%s's order: %v", j.customer, err)
		}
	}
	soldOut := 0
	for _, j := range waiting {
		if st := j.until(t, b, id, line.SoldOut); st.MayReturn {
			t.Errorf("%s: units may return, with no hold", j.customer)
		}
		soldOut++
	}
	if soldOut != 9 {
		t.Errorf("%d tickets told sold out, want the 9 in line", soldOut)
	}
	for _, j := range admitted {
		j.until(t, b, id, line.Used)
	}
}

// TestLeavingFreesThePlace: a buyer who leaves gives its admission to the next in line, and
// the one behind moves up.
func TestLeavingFreesThePlace(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	b, _ := w.replica(t)
	id := w.product(t, 10, 1, stock.SaleRules{MaxPerCustomer: 1})
	in := joinAll(t, a, id, customers(3)...)
	byPlace := make([]*joined, 3)
	for _, j := range in {
		byPlace[j.placed(t, a, id).Place-1] = j
	}
	first, second, third := byPlace[0], byPlace[1], byPlace[2]
	first.until(t, a, id, line.Admitted)
	if second.status.State != line.Waiting || second.status.Ahead != 0 || third.status.Ahead != 1 {
		t.Fatalf("behind the admitted: %+v and %+v", second.status, third.status)
	}
	st, err := b.Leave(context.Background(), id, first.token)
	if err != nil || st.State != line.Left {
		t.Fatalf("leave = %+v, %v", st, err)
	}
	second.until(t, a, id, line.Admitted)
	if st := third.next(t, b, id); st.State != line.Waiting || st.Ahead != 0 {
		t.Errorf("the third after the first left: %+v, want waiting with none ahead", st)
	}
	if _, err := a.Admit(context.Background(), []int64{id}, []string{first.pass}, "", "", 0); !errors.Is(err, line.ErrNotAdmitted) {
		t.Errorf("the pass of a ticket that left: %v, want not admitted", err)
	}
	if again, err := a.Leave(context.Background(), id, first.token); err != nil || again.State != line.Left {
		t.Errorf("leaving again = %+v, %v; want left", again, err)
	}
}

// TestAdmissionThatRunsOutPassesToTheNext: an admission not used in time ends, its pass is
// refused, and the next in line is admitted.
func TestAdmissionThatRunsOutPassesToTheNext(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	id := w.product(t, 10, 1, stock.SaleRules{MaxPerCustomer: 1})
	in := joinAll(t, a, id, "slow", "next")
	var slow, next *joined
	for _, j := range in {
		if st := j.placed(t, a, id); st.State == line.Admitted {
			slow = j
		} else {
			next = j
		}
	}
	if slow == nil || next == nil {
		t.Fatal("want one admitted, one waiting")
	}
	w.lines.Update(slow.status.Ticket, func(tk *line.Ticket) { tk.AdmittedUntil = time.Now().Add(-time.Millisecond) })
	slow.until(t, a, id, line.Expired)
	next.until(t, a, id, line.Admitted)
	if err := buy(t, w, a, id, slow); !errors.Is(err, line.ErrAdmissionExpired) {
		t.Errorf("the pass that ran out: %v, want admission expired", err)
	}
	if err := buy(t, w, a, id, next); err != nil {
		t.Errorf("the next one's order: %v", err)
	}
}

// TestUnitsThatComeBackAdmitTheNext: a sold-out line says units may come back while a hold is
// open; the hold cancelled, or a restock, admits the next in line.
func TestUnitsThatComeBackAdmitTheNext(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	b, _ := w.replica(t)
	ctx := context.Background()
	id := w.product(t, 1, 5, stock.SaleRules{MaxPerCustomer: 1, HoldFor: time.Hour})
	in := joinAll(t, a, id, customers(3)...)
	var first *joined
	var rest []*joined
	for _, j := range in {
		if st := j.placed(t, a, id); st.State == line.Admitted {
			first = j
		} else {
			rest = append(rest, j)
		}
	}
	cl, err := a.Admit(ctx, []int64{id}, []string{first.pass}, "", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	res, err := w.stock.PlaceOrder(ctx, stock.OrderRequest{CustomerID: cl.Customer, Items: []stock.Item{{ProductID: id, Quantity: 1}}})
	if err != nil || res.Order.Status != stock.OrderStatusHeld {
		t.Fatalf("order = %+v, %v; want held", res, err)
	}
	a.Used(cl, "")
	for _, j := range rest {
		if st := j.until(t, b, id, line.SoldOut); !st.MayReturn {
			t.Errorf("%s: sold out with a unit held, and not told it may return", j.customer)
		}
	}
	if _, err := w.stock.Cancel(ctx, res.Order.ID, ""); err != nil {
		t.Fatal(err)
	}
	admittedNow := func() (n int) {
		for _, j := range rest {
			if st := j.next(t, b, id); st.State == line.Admitted {
				n++
			}
		}
		return n
	}
	if n := admittedNow(); n != 1 {
		t.Fatalf("%d admitted once the hold was cancelled, want 1", n)
	}
	var waiter *joined
	for _, j := range rest {
		if j.status.State != line.Admitted {
			waiter = j
		}
	}
	if _, err := w.stock.Restock(ctx, stock.RestockRequest{ProductID: id, Quantity: 1}); err != nil {
		t.Fatal(err)
	}
	waiter.until(t, b, id, line.Admitted)
}

// TestPassChecks: an order for a lined product needs a pass of this service, for that product,
// of one customer, not used by another order (its own retry with the same key is let
// through), nor of a ticket that left; a product without a line needs none.
func TestPassChecks(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := w.replica(t)
	ctx := context.Background()
	id := w.product(t, 10, 10, stock.SaleRules{})
	other := w.product(t, 10, 10, stock.SaleRules{})
	plain, err := w.stock.CreateProduct(ctx, stock.NewProduct{SKU: "plain", Name: "plain", Stock: 5})
	if err != nil {
		t.Fatal(err)
	}
	ann := joinAll(t, a, id, "ann")[0]
	ann.until(t, a, id, line.Admitted)
	bob := joinAll(t, a, other, "bob")[0]
	bob.until(t, a, other, line.Admitted)
	cara := joinAll(t, a, id, "cara")[0]
	cara.until(t, a, id, line.Admitted)

	if cl, err := a.Admit(ctx, []int64{plain.ID}, nil, "", "", 0); err != nil || cl.Customer != "" || len(cl.Admissions) != 0 {
		t.Errorf("a product without a line: %+v, %v; want let through, no customer", cl, err)
	}
	notAdmitted := func(what string, products []int64, passes []string, ticket string) *line.NotAdmittedError {
		t.Helper()
		_, err := a.Admit(ctx, products, passes, ticket, "", 0)
		e, ok := errors.AsType[*line.NotAdmittedError](err)
		if !ok {
			t.Fatalf("%s: %v, want not admitted", what, err)
		}
		return e
	}
	notAdmitted("no pass", []int64{id}, nil, "")
	notAdmitted("a pass for another product", []int64{id}, []string{bob.pass}, "")
	notAdmitted("a ticket for a pass", []int64{id}, []string{ann.token}, "")
	notAdmitted("garbage", []int64{id}, []string{"garbage"}, "")
	notAdmitted("a cart with passes of two customers", []int64{id, other}, []string{cara.pass, bob.pass}, "")
	if e := notAdmitted("no pass, a ticket named", []int64{id}, nil, cara.token); e.Status == nil || e.Status.State != line.Admitted {
		t.Errorf("the refusal names the ticket's status %+v, want admitted", e.Status)
	}
	cl, err := a.Admit(ctx, []int64{plain.ID, id}, []string{ann.pass}, "", "k1", 0)
	if err != nil || cl.Customer != "ann" || len(cl.Admissions) != 1 || cl.Admissions[0].Ticket != ann.status.Ticket {
		t.Fatalf("ann's pass in a cart with a product without a line = %+v, %v", cl, err)
	}
	a.Used(cl, "k1")
	if _, err := a.Admit(ctx, []int64{id}, []string{ann.pass}, "", "k2", 0); !errors.Is(err, line.ErrAdmissionUsed) {
		t.Errorf("ann's pass again, another key: %v, want admission used", err)
	}
	if _, err := a.Admit(ctx, []int64{id}, []string{ann.pass}, "", "", 0); !errors.Is(err, line.ErrAdmissionUsed) {
		t.Errorf("ann's pass again, no key: %v, want admission used", err)
	}
	if _, err := a.Admit(ctx, []int64{id}, []string{ann.pass}, "", "k1", 0); err != nil {
		t.Errorf("ann's retry with the same key: %v, want it let through", err)
	}
	ann.until(t, a, id, line.Used) // at once, from a's memory of the use
	// Once the store has the use, another replica (with no memory of it) refuses it too.
	testenv.Poll(t, 5*time.Second, "the use written", func() bool {
		tk, err := w.lines.Ticket(ctx, id, ann.status.Ticket)
		return err == nil && tk.Status == line.TicketUsed
	})
	b, _ := w.replica(t)
	if _, err := b.Admit(ctx, []int64{id}, []string{ann.pass}, "", "k2", 0); !errors.Is(err, line.ErrAdmissionUsed) {
		t.Errorf("ann's pass on another replica: %v, want admission used", err)
	}
	if _, err := b.Admit(ctx, []int64{id}, []string{ann.pass}, "", "k1", 0); err != nil {
		t.Errorf("ann's retry on another replica: %v, want it let through", err)
	}
	for _, reason := range []string{"missing", "invalid", "used"} {
		if n := testenv.MetricOr(t, reg, "stocksvc_line_refusals_total", 0, "reason", reason); n < 1 {
			t.Errorf("refusals %s = %v", reason, n)
		}
	}
}

// TestTicketsOfAnotherProductOrForgedAreRefused: a ticket is good only for the product it was
// issued for, and only as it was signed.
func TestTicketsOfAnotherProductOrForgedAreRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	ctx := context.Background()
	id := w.product(t, 10, 10, stock.SaleRules{})
	other := w.product(t, 10, 10, stock.SaleRules{})
	j := joinAll(t, a, id, "ann")[0]
	for _, bad := range []struct {
		product int64
		token   string
	}{{other, j.token}, {id, j.token + "A"}, {id, ""}, {id, j.pass}} {
		if _, err := a.Status(ctx, bad.product, bad.token); !errors.Is(err, line.ErrInvalidTicket) {
			t.Errorf("status of %.12q for product %d: %v, want invalid ticket", bad.token, bad.product, err)
		}
		if _, err := a.Leave(ctx, bad.product, bad.token); !errors.Is(err, line.ErrInvalidTicket) {
			t.Errorf("leave with %.12q for product %d: %v, want invalid ticket", bad.token, bad.product, err)
		}
	}
	plain, err := w.stock.CreateProduct(ctx, stock.NewProduct{SKU: "plain", Name: "plain", Stock: 5})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Join(ctx, plain.ID, "ann"); !errors.Is(err, line.ErrNoLine) {
		t.Errorf("joining a product without a line: %v", err)
	}
}

// TestJoinIsIdempotentAndANewTicketGoesToTheBack: joining again answers the open ticket;
// after it was used, joining again is a new arrival at the back.
func TestJoinIsIdempotentAndANewTicketGoesToTheBack(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := w.replica(t)
	ctx := context.Background()
	id := w.product(t, 10, 1, stock.SaleRules{})
	in := joinAll(t, a, id, "ann", "bob")
	var ann, bob *joined
	for _, j := range in {
		if st := j.placed(t, a, id); st.State == line.Admitted {
			ann = j
		} else {
			bob = j
		}
	}
	again, err := a.Join(ctx, id, ann.customer)
	if err != nil || again.Created || again.Ticket != ann.status.Ticket || again.State != line.Admitted {
		t.Fatalf("joining again = %+v, %v", again, err)
	}
	if err := buy(t, w, a, id, ann); err != nil {
		t.Fatal(err)
	}
	bob.until(t, a, id, line.Admitted)
	back, err := a.Join(ctx, id, ann.customer)
	if err != nil || !back.Created || back.Ticket == ann.status.Ticket {
		t.Fatalf("joining after the order = %+v, %v; want a new ticket", back, err)
	}
	ann2 := &joined{customer: "ann", token: back.Token}
	ann2.saw(back.Status)
	if ann2.placed(t, a, id); ann2.status.Place != 3 || ann2.status.State != line.Waiting {
		t.Errorf("the new ticket = %+v, want waiting at place 3", ann2.status)
	}
	if n := testenv.Metric(t, reg, "stocksvc_line_joins_total", "product", fmt.Sprint(id)); n != 3 {
		t.Errorf("joins = %v, want 3", n)
	}
}

// TestLongPollAnswersOnChangeOrAtTheEnd: a long-poll with the current ETag answers at the end
// of its wait with the same status when nothing changed, and as soon as something did.
func TestLongPollAnswersOnChangeOrAtTheEnd(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, reg := w.replica(t)
	b, _ := w.replica(t)
	ctx := context.Background()
	id := w.product(t, 10, 1, stock.SaleRules{})
	in := joinAll(t, a, id, "ann", "bob")
	for _, j := range in {
		j.placed(t, a, id)
	}
	slices.SortFunc(in, func(x, y *joined) int { return int(x.status.Place - y.status.Place) })
	first, second := in[0], in[1]
	st, err := b.Wait(ctx, id, second.token, second.status.ETag, 50*time.Millisecond)
	if err != nil || st.ETag != second.status.ETag {
		t.Fatalf("a wait with nothing changing = %+v, %v; want the same status", st, err)
	}
	done := make(chan line.Status, 1)
	go func() {
		st, err := b.Wait(ctx, id, second.token, second.status.ETag, 20*time.Second)
		if err != nil {
			t.Error(err)
		}
		done <- st
	}()
	testenv.Poll(t, 5*time.Second, "the long-poll to be open", func() bool {
		return testenv.Gauge(t, reg, "stocksvc_line_long_polls") == 0 // a's gauge: the poll is b's
	})
	if _, err := a.Leave(ctx, id, first.token); err != nil {
		t.Fatal(err)
	}
	if st := <-done; st.State != line.Admitted {
		t.Errorf("the long-poll answered %+v, want admitted", st)
	}
}

// TestFlushWritesTheUsedMarksOnTheWayOut: a replica stopping writes the admissions its last
// orders spent, so that the next in line is admitted at once rather than when they run out.
func TestFlushWritesTheUsedMarksOnTheWayOut(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	id := w.product(t, 10, 1, stock.SaleRules{MaxPerCustomer: 1})
	in := joinAll(t, a, id, "first", "second")
	var first *joined
	for _, j := range in {
		if j.placed(t, a, id).State == line.Admitted {
			first = j
		}
	}
	a.Stop() // its keeper writes nothing from now on
	if err := buy(t, w, a, id, first); err != nil {
		t.Fatal(err)
	}
	if tk, _ := w.lines.Ticket(context.Background(), id, first.status.Ticket); tk.Status != line.TicketAdmitted {
		t.Fatalf("before the flush the store has %s, want admitted", tk.Status)
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if tk, _ := w.lines.Ticket(context.Background(), id, first.status.Ticket); tk.Status != line.TicketUsed {
		t.Errorf("after the flush the store has %s, want used", tk.Status)
	}
}

// TestSoldOutByAnOrderWithoutTheLine: units that run out without an admission's order (one
// placed before the line was set, or by the purchase path directly) still reach every ticket
// in line as sold out: the keeper's poll sees the views say so, and advances.
func TestSoldOutByAnOrderWithoutTheLine(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	id := w.product(t, 5, 1, stock.SaleRules{})
	in := joinAll(t, a, id, customers(3)...)
	for _, j := range in {
		j.placed(t, a, id)
	}
	if _, err := w.stock.PlaceOrder(context.Background(), stock.OrderRequest{CustomerID: "direct",
		Items: []stock.Item{{ProductID: id, Quantity: 5}}}); err != nil {
		t.Fatal(err)
	}
	for _, j := range in {
		j.until(t, a, id, line.SoldOut)
	}
}

// TestJoinAfterTheDrawIsNeverToldQueued: a join the store made after the draw is a late
// arrival, and says so even on a replica whose view of the line has not heard of the draw.
func TestJoinAfterTheDrawIsNeverToldQueued(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	a, _ := w.replica(t)
	b, _ := w.replica(t)
	opens := time.Now().Add(200 * time.Millisecond)
	id := w.product(t, 5, 1, stock.SaleRules{StartsAt: &opens})
	joinAll(t, b, id, "early") // b's view of the line, before the draw
	b.Stop()                   // and it hears of nothing from now on
	joinAll(t, a, id, "other")[0].placed(t, a, id)
	late, err := b.Join(context.Background(), id, "late")
	if err != nil {
		t.Fatal(err)
	}
	if late.State != line.Waiting {
		t.Errorf("a join after the draw, on a replica that had not heard of it: %s, want waiting", late.State)
	}
}

// TestJoiningAgainIsAnsweredFromMemory: a customer joining in a loop reaches the store once
// per replica while its ticket is open, and is answered the same ticket; once the replica
// learns the ticket ended — used here, or left through another replica —, the next join goes
// to the store and makes a new one.
func TestJoiningAgainIsAnsweredFromMemory(t *testing.T) {
	t.Parallel()
	w := newWorld(t)
	counted := &joinCounter{Store: w.lines}
	a, _ := w.replicaOver(t, counted)
	b, _ := w.replica(t)
	ctx := context.Background()
	id := w.product(t, 10, 1, stock.SaleRules{})
	first := joinAll(t, a, id, "ann", "bob")
	for range 5 {
		again, err := a.Join(ctx, id, "ann")
		if err != nil || again.Created || again.Ticket != first[0].status.Ticket {
			t.Fatalf("joining again = %+v, %v; want ticket %d", again, err, first[0].status.Ticket)
		}
		if _, err := a.Status(ctx, id, again.Token); err != nil {
			t.Fatalf("the token of a join answered from memory: %v", err)
		}
	}
	if n := counted.joins.Load(); n != 2 {
		t.Fatalf("%d joins reached the store, want 2 (one per customer)", n)
	}
	ann, bob := first[0], first[1]
	bob.placed(t, a, id)
	if ann.placed(t, a, id).State != line.Admitted {
		ann, bob = bob, ann
	}
	if err := buy(t, w, a, id, ann); err != nil {
		t.Fatal(err)
	}
	bob.until(t, a, id, line.Admitted) // the use is written: the store holds ann's ticket used
	if back, err := a.Join(ctx, id, ann.customer); err != nil || !back.Created || back.Ticket == ann.status.Ticket {
		t.Fatalf("joining after the order = %+v, %v; want a new ticket", back, err)
	}
	if _, err := b.Leave(ctx, id, bob.token); err != nil {
		t.Fatal(err)
	}
	bob.until(t, a, id, line.Left)
	if back, err := a.Join(ctx, id, bob.customer); err != nil || !back.Created || back.Ticket == bob.status.Ticket {
		t.Fatalf("joining after leaving on another replica = %+v, %v; want a new ticket", back, err)
	}
	if n := counted.joins.Load(); n != 4 {
		t.Errorf("%d joins reached the store, want 4", n)
	}
}
