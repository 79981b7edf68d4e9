package report

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The asynchronous sale's page (-async): what the clients were answered (202 accepted, 409
// sold out at once, never answered) when they were answered, and what the service decided for
// the accepted orders when Postgres says it decided (confirmed; rejected, which is a
// sold-out); the product's stock from Postgres; the kill or the pause shaded.

// AsyncSale is the asynchronous sale as its page shows it; the sale (package faults) fills
// it in.
type AsyncSale struct {
	Replicas, Rate, Stock           int // Rate: orders/s; Stock: the product's units
	Duration                        time.Duration
	Seed                            uint64
	KillAfter, PauseAfter, PauseFor time.Duration // zero: no such fault
	Verdict                         string
	Checks                          []Check

	Sent, Retried, Accepted, RefusedAtOnce, Failed int
	Confirmed, Rejected, Pending                   int
	AcceptP50, AcceptP99                           time.Duration // POST → 202, at the client
	P50, P99, Max                                  time.Duration // 202 → decision

	Orders    []AsyncOrder    // what each client was answered
	Decisions []AsyncDecision // what Postgres decided, and when
	Product   Line            // the product's stock
	Faults    []Window        // unlabelled: each is named by the event that began it
	Events    []Mark
}

// AsyncOrder is what one order's client was answered, on the run's clock.
type AsyncOrder struct {
	Status   string        // "accepted" (202), "confirmed" (201), "refused" (409), "failed: ..." (never answered)
	Sent     time.Duration // when it was first sent
	Answered time.Duration // from then to the answer that ended it
}

// AsyncDecision is a decision of async_orders, on the run's clock.
type AsyncDecision struct {
	At     time.Duration
	Status string // confirmed, or rejected
}

// AsyncPage is the asynchronous sale's page.
func AsyncPage(command string, a AsyncSale) Page {
	return Page{Title: "stocksvc asynchronous sale", Command: command, Runs: []Run{AsyncRun(a)}}
}

// AsyncRun is the asynchronous sale as its page shows it.
func AsyncRun(a AsyncSale) Run {
	r := Run{
		Title: "asynchronous sale", Verdict: a.Verdict, Checks: a.Checks,
		About: fmt.Sprintf("Every order Prefer: respond-async through HAProxy over %d replicas, %d orders/s of 1–2 units for %v on a product of %d units.",
			a.Replicas, a.Rate, a.Duration, a.Stock),
		OutcomesOf: "the clients' answers (accepted: 202; sold-out: 409 at once; unavailable: never answered), " +
			"and the decisions in Postgres at their decided_at (confirmed; rejected, shown as sold-out)",
		LatencyOf: "POST to its final answer at the client (202, or 409), retries with the same key included",
		StockOf:   "Postgres: the initial stock less each confirmed order, at its transaction's start",
		Params: []Field{
			{Name: "replicas", Value: strconv.Itoa(a.Replicas) + " behind HAProxy"},
			{Name: "rate", Value: fmt.Sprintf("%d orders/s", a.Rate)},
			{Name: "duration", Value: a.Duration.String()},
			{Name: "stock", Value: fmt.Sprintf("%d units", a.Stock)},
			{Name: "seed", Value: strconv.FormatUint(a.Seed, 10)},
		},
		Figures: []Field{
			{Name: "orders sent", Value: fmt.Sprintf("%d (%d retried with the same key)", a.Sent, a.Retried)},
			{Name: "answered", Value: fmt.Sprintf("%d accepted, %d refused at once, %d never answered", a.Accepted, a.RefusedAtOnce, a.Failed)},
			{Name: "decided", Value: fmt.Sprintf("%d confirmed, %d rejected, %d pending", a.Confirmed, a.Rejected, a.Pending)},
			{Name: "POST → 202", Value: fmt.Sprintf("p50 %v, p99 %v", a.AcceptP50.Round(100*time.Microsecond), a.AcceptP99.Round(100*time.Microsecond))},
			{Name: "202 → decision", Value: fmt.Sprintf("p50 %v, p99 %v, max %v", a.P50.Round(time.Millisecond), a.P99.Round(time.Millisecond), a.Max.Round(time.Millisecond))},
		},
		Stock:  []Line{a.Product},
		Events: a.Events,
	}
	if a.KillAfter > 0 {
		r.Params = append(r.Params, Field{Name: "kill after", Value: a.KillAfter.String()})
	}
	if a.PauseAfter > 0 {
		r.Params = append(r.Params, Field{Name: "pause after, for", Value: fmt.Sprintf("%v, %v", a.PauseAfter, a.PauseFor)})
	}
	for _, o := range a.Orders {
		class := Down // failed: never answered
		switch o.Status {
		case "accepted":
			class = Accepted
		case "confirmed":
			class = Confirmed
		case "refused":
			class = SoldOut
		}
		r.Answers = append(r.Answers, Answer{At: o.Sent + o.Answered, Latency: o.Answered, Class: class})
	}
	for _, d := range a.Decisions {
		class := SoldOut
		if d.Status == "confirmed" {
			class = Confirmed
		}
		r.Answers = append(r.Answers, Answer{At: d.At, Latency: -1, Class: class})
	}
	if n := len(a.Product.Points); n > 1 && a.Product.Points[n-1].Value == 0 {
		at := a.Product.Points[n-1].At
		r.SoldOut = &at
	}
	for _, w := range a.Faults {
		// Named by the event that began it ("SIGKILL r2", "SIGSTOP r1, which..."): its verb.
		label := "fault"
		for _, e := range a.Events {
			if e.At <= w.Start {
				label, _, _ = strings.Cut(e.Label, " ")
			}
		}
		r.Faults = append(r.Faults, Window{Start: w.Start, End: w.End, Label: label})
	}
	return r
}
