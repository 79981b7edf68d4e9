package faults

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// availability is what a fault did to the buyers, from the attempts the clients recorded.
type availability struct {
	// busy and unavailable add up the 100 ms slices of the run in which at least one order
	// attempt was answered 429, or 503 / 5xx / nothing.
	busy, unavailable time.Duration
	// longestStall is the longest time no order got an answer that says what happened (a 201
	// or a sold-out), while the load ran.
	longestStall time.Duration
	stallAt      time.Duration // when that stall began
	// slowest is the longest an order attempt waited for a replica's answer, and slowestWhat
	// that answer.
	slowest     time.Duration
	slowestWhat string
	timeouts    int // attempts the client gave up on
	// staleInFlight counts 409 idempotency-key-in-flight answers for a key whose earlier
	// attempts had all been answered by a replica: nothing of that key was running.
	staleInFlight int
	// Every attempt of every operation, and those with no answer or a 5xx.
	attempts, failedAttempts int
	failedKinds              string
	orders                   map[model.Outcome]int // order operations by outcome, as the clients were told
	// Answers given inside the fault windows, by status (0: none).
	duringFault map[int]int
}

const availabilitySlice = 100 * time.Millisecond

func measureAvailability(ops []*model.Op, faults []window) availability {
	a := availability{orders: map[model.Outcome]int{}, duringFault: map[int]int{}}
	busy, down := map[int64]bool{}, map[int64]bool{}
	var decided []time.Duration
	var first, last time.Duration = -1, 0
	failedBy := map[string]int{}
	for _, p := range ops {
		if p.Final || p.In.Kind == model.KindCreate {
			continue
		}
		if p.In.Kind == model.KindOrder {
			a.orders[p.Out.Outcome]++
		}
		answeredByReplica := true
		for _, at := range p.Attempts {
			a.attempts++
			if first < 0 || at.Start < first {
				first = at.Start
			}
			last = max(last, at.End)
			failed := at.Status == 0 || at.Status >= 500
			if failed {
				a.failedAttempts++
				failedBy[describeFailure(at)]++
			}
			for _, w := range faults {
				if at.End >= w.start && at.End <= w.end {
					a.duringFault[at.Status]++
					break
				}
			}
			if at.Status == 0 && strings.Contains(at.Err, "timeout") {
				a.timeouts++
			}
			if p.In.Kind != model.KindOrder {
				continue
			}
			slice := int64(at.End / availabilitySlice)
			switch {
			case at.Status == http.StatusTooManyRequests:
				busy[slice] = true
			case failed:
				down[slice] = true
			case at.Status == http.StatusCreated || at.Status == http.StatusConflict && client.RuleCodes[at.Code]:
				decided = append(decided, at.End)
			case at.Status == http.StatusConflict && at.Code == "idempotency-key-in-flight" && answeredByReplica:
				a.staleInFlight++
			}
			if at.Status != 0 && at.Replica && at.End-at.Start > a.slowest {
				a.slowest, a.slowestWhat = at.End-at.Start, fmt.Sprintf("%d %s", at.Status, at.Code)
			}
			if at.Status == 0 || !at.Replica {
				answeredByReplica = false
			}
		}
	}
	a.busy = time.Duration(len(busy)) * availabilitySlice
	a.unavailable = time.Duration(len(down)) * availabilitySlice
	sort.Slice(decided, func(i, j int) bool { return decided[i] < decided[j] })
	prev := first
	for _, t := range append(decided, last) {
		if t-prev > a.longestStall {
			a.longestStall, a.stallAt = t-prev, prev
		}
		prev = max(prev, t)
	}
	var kinds []string
	for k, n := range failedBy {
		kinds = append(kinds, fmt.Sprintf("%d× %s", n, k))
	}
	slices.Sort(kinds)
	a.failedKinds = strings.Join(kinds, ", ")
	return a
}

func describeFailure(at model.Attempt) string {
	switch {
	case at.Status == 0:
		return "no answer (" + at.Err + ")"
	case at.Replica && at.Server != "":
		return fmt.Sprintf("%d %s from %s", at.Status, at.Code, at.Server)
	case at.Replica:
		return fmt.Sprintf("%d %s from a replica", at.Status, at.Code)
	}
	return fmt.Sprintf("%d from the balancer", at.Status)
}
