package line

// Room is what the admission rule is decided from: the line's settings, the product's sale
// at one moment, and the admissions running then.
type Room struct {
	// Open is whether the sale is open (opened, not ended), by Postgres's clock.
	Open bool
	// Stock is the units left: held units are already out of it, and come back to it when
	// their hold is cancelled or expires.
	Stock int64
	// PerBuyer is the most units one buyer may take: the product's max_per_customer when it
	// has one, else the service's most units per order (STOCKSVC_MAX_QUANTITY).
	PerBuyer int64
	// Admit is the line's setting: the most buyers admitted at once.
	Admit int64
	// Active is how many admissions are running: admitted, not used, not left, not run out.
	Active int64
}

// Admissions returns how many of the waiting tickets to admit now (the store admits fewer
// when fewer wait): the rule of the line.
//
// Admit the next tickets, in place order, while
//
//	active < admit  and  active < ⌈stock / q⌉
//
// where q is the most units one buyer may take (PerBuyer), and only while the sale is open.
// So the buyers admitted at once never exceed the line's setting, and never exceed the buyers
// the units left could serve even if each took the most it may: with max_per_customer 1, never
// more buyers admitted than units left. Held units are out of the stock, so holds count; they
// come back — and admit the next — when a hold ends. An admission ends when its order is
// confirmed or held (used), when it runs out (its room passes to the next), or when its buyer
// leaves; each frees its room for the next advance.
//
// The rule is a promise about admissions, not the guard against overselling: every layer of
// the purchase path behind it holds on its own, whatever the line admitted.
func Admissions(r Room) int64 {
	if !r.Open || r.Stock <= 0 || r.Admit <= 0 {
		return 0
	}
	q := max(r.PerBuyer, 1)
	room := min(r.Admit, (r.Stock+q-1)/q) // ⌈stock / q⌉ without overflow: stock ≤ MaxStock
	return max(room-r.Active, 0)
}
