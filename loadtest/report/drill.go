package report

import (
	"fmt"
	"strconv"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// A fault drill's page (-fault), beside its history: every order attempt the clients made, by
// its answer, the hot product's stock from Postgres, the fault's windows shaded and its events
// marked; the verdict of Postgres and of the linearizability check beside them.

// Drill is one run of a fault drill as its page shows it; the drill runner fills it in.
type Drill struct {
	Scenario, About string
	Run             int
	Seed            uint64
	Verdict         string // PASS, FAIL, INVALID or ERROR
	Params          DrillParams

	Checks  []Check  // the SQL verdict and the reconciliation with the clients' history
	Failed  []string // the scenario's own checks that failed
	Invalid []string // why the run proves nothing
	Notes   []string

	History               []*model.Op // every operation, for its order attempts
	Operations, AtOnce    int         // operations checked, and at most open at once
	Orders                map[model.Outcome]int
	Unknown, Resolved     int // outcomes unknown to the clients, and of them found in the database
	Writes, Reads         model.CheckResult
	Busy, Unavailable     time.Duration // 100 ms slices answered 429, or 5xx or nothing
	LongestStall, StallAt time.Duration
	Catches               map[string]float64 // the defense layers', by layer

	Faults []Window
	Events []Mark
	Hot    Line // the hot product's stock
}

// DrillParams are the run's settings the page repeats.
type DrillParams struct {
	Replicas                         int
	Victim                           string
	Rate                             float64 // operations/s
	Defense                          string
	LockTTL, LockWait, ClientTimeout time.Duration
	HotStock                         int64
	Buyers                           int // closed-loop buyers of the hot product
}

// DrillPage is the page of one drill run.
func DrillPage(command string, d Drill) Page {
	return Page{Title: "stocksvc fault drill: " + d.Scenario, Command: command, Runs: []Run{DrillRun(d)}}
}

// DrillRun is one drill run as its page shows it.
func DrillRun(d Drill) Run {
	r := Run{
		Title:      fmt.Sprintf("%s, run %d", d.Scenario, d.Run),
		About:      d.About + ".",
		Verdict:    d.Verdict,
		OutcomesOf: "every order attempt of the drill's clients (all products), by its answer",
		LatencyOf:  "the same attempts, request to answer at the client (a retry is an attempt of its own)",
		StockOf:    "Postgres: the hot product's initial stock, less each order at its transaction's start, plus each restock",
		Checks:     d.Checks,
		Params:     d.params(),
		Figures: []Field{
			{Name: "operations", Value: fmt.Sprintf("%d (at most %d open at once)", d.Operations, d.AtOnce)},
			{Name: "orders", Value: fmt.Sprintf("confirmed %d, sold-out %d, refused %d, unknown %d", d.Orders[model.Confirmed], d.Orders[model.SoldOut],
				d.Orders[model.Refused], d.Orders[model.Unknown])},
			{Name: "outcomes unknown", Value: fmt.Sprintf("%d, of which %d found in the database", d.Unknown, d.Resolved)},
			{Name: "linearizable, " + d.Writes.Name, Value: Linearizable(d.Writes)},
			{Name: "linearizable, " + d.Reads.Name, Value: Linearizable(d.Reads)},
			{Name: "answered 429", Value: fmt.Sprintf("during %.1f s (100 ms slices)", d.Busy.Seconds())},
			{Name: "answered 5xx or nothing", Value: fmt.Sprintf("during %.1f s (100 ms slices)", d.Unavailable.Seconds())},
			{Name: "longest stall", Value: fmt.Sprintf("%.1f s from %.1f s", d.LongestStall.Seconds(), d.StallAt.Seconds())},
			{Name: "layer catches", Value: fmt.Sprintf("fence %.0f, version %.0f, guard %.0f, check %.0f", d.Catches["fence"], d.Catches["version"],
				d.Catches["guard"], d.Catches["check"])},
		},
		Files:  []Field{{Name: "history", Value: "history.txt"}, {Name: "for -recheck", Value: "history.json"}},
		Faults: d.Faults,
		Events: d.Events,
		Stock:  []Line{d.Hot},
	}
	for _, f := range d.Failed {
		r.Checks = append(r.Checks, Check{Name: "the scenario's own check", OK: false, Detail: f})
	}
	for _, why := range d.Invalid {
		r.Notes = append(r.Notes, "INVALID: "+why)
	}
	r.Notes = append(r.Notes, d.Notes...)
	for _, p := range d.History {
		if p.In.Kind != model.KindOrder {
			continue
		}
		for _, at := range p.Attempts {
			r.Answers = append(r.Answers, Answer{At: at.End, Latency: at.End - at.Start, Class: ClassOf(at.Status, at.Code)})
		}
	}
	return r
}

// Linearizable says what the linearizability checker found, and how long it searched.
func Linearizable(c model.CheckResult) string {
	v := map[porcupine.CheckResult]string{porcupine.Ok: "linearizable", porcupine.Illegal: "NOT LINEARIZABLE",
		porcupine.Unknown: "undecided (the checker timed out)"}[c.Result]
	return fmt.Sprintf("%s: %d operations in %d partitions, checked in %v (%d configurations)", v, c.Ops, c.Partitions,
		c.Elapsed.Round(time.Millisecond), c.Explored)
}

func (d Drill) params() []Field {
	p := d.Params
	fields := []Field{
		{Name: "scenario", Value: d.Scenario},
		{Name: "run, seed", Value: fmt.Sprintf("%d, %d", d.Run, d.Seed)},
		{Name: "replicas", Value: strconv.Itoa(p.Replicas) + " behind HAProxy"},
		{Name: "victim", Value: p.Victim},
		{Name: "rate", Value: fmt.Sprintf("%.0f operations/s", p.Rate)},
		{Name: "defense", Value: p.Defense},
		{Name: "lock TTL, lock wait", Value: fmt.Sprintf("%v, %v", p.LockTTL, p.LockWait)},
		{Name: "client timeout", Value: p.ClientTimeout.String()},
		{Name: "hot product", Value: fmt.Sprintf("%d units, restocked 10 every 4 s", p.HotStock)},
	}
	if p.Buyers > 0 {
		fields = append(fields, Field{Name: "closed-loop buyers", Value: strconv.Itoa(p.Buyers)})
	}
	return fields
}
