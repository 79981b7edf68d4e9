package faults

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stocksvc/stocksvc/loadtest/client"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/failpoint"
	"github.com/stocksvc/stocksvc/loadtest/model"
	"github.com/stocksvc/stocksvc/loadtest/traffic"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// A drill runs a sale through the balancer over the replicas, injects one fault while it
// sells, lets it heal, and then judges everything the clients were told: the linearizability checker (package model) checks
// the history against the model of each product's stock, and the SQL verdict the tables.

// drillPlan is what every run of every scenario shares.
type drillPlan struct {
	rate          float64       // operations per second at the base rate
	lockTTL       time.Duration // the replicas' STOCKSVC_LOCK_TTL: short, so pauses outlast it
	clientTimeout time.Duration
	checkTimeout  time.Duration
	readSlack     time.Duration
	model         model.Options
	direct        bool          // clients talk to the replicas in turn, no balancer (tests)
	warmup, tail  time.Duration // selling before the fault, and after it healed
	// rules adds a third product with a sale window and a limit per customer (issue #20),
	// ordered by customers who come back; off, the same product and orders have no rules.
	rules bool
	// windowSlack widens the window's moments in the model (model.HistoryOptions).
	windowSlack time.Duration
}

// drillEnv is one run's world: its deployment (database, Redis, replicas, balancer) and the
// proxies a fault puts between the victim and the servers.
type drillEnv struct {
	h       *harness
	plan    drillPlan
	sc      scenario
	dir     string
	c       *cluster.Cluster
	rng     *traffic.Rand
	rec     *model.Recorder
	client  *client.Client
	load    *traffic.Mix
	victim  int
	catches map[string]float64
	pgProxy *failpoint.Proxy // between the victim and Postgres
	rdProxy *failpoint.Proxy // between the victim and Redis
	hot     int64
	scarce  int64
	limited int64 // the product with sale rules
	holds   int64 // the product sold with a hold (holds-expiry), or 0
	// holdsOpen admits the holds product's orders, confirms and cancels (holds.go).
	holdsOpen holdsGate
	regular   atomic.Int64 // orders of the limited product so far: its customers grow with them
	// identity mints the customers' tokens, which the replicas verify.
	identity *cluster.Identity

	mu     sync.Mutex
	events []event // what the fault did, when
	faults []window
	notes  []string // scenario findings (e.g. failed requests during a rolling restart)
	failed []string // scenario checks that failed
	abuse  *abuseTally
	hang   *hangProbe // reads sent while Redis was stopped (pause-redis)
	// noSale is the HA drills' worst window without selling (ha.go).
	noSale time.Duration
}

type event struct {
	at   time.Duration
	what string
}

// window is when a fault was in force.
type window struct{ start, end time.Duration }

func (d *drillEnv) event(format string, args ...any) {
	e := event{at: d.rec.Now(), what: fmt.Sprintf(format, args...)}
	d.mu.Lock()
	d.events = append(d.events, e)
	d.mu.Unlock()
	d.h.Printf("[%s] %6.2fs  %s\n", filepath.Base(d.dir), e.at.Seconds(), e.what)
}

// faultWindow records that a fault was in force from start until now.
func (d *drillEnv) faultWindow(start time.Duration) {
	d.mu.Lock()
	d.faults = append(d.faults, window{start, d.rec.Now()})
	d.mu.Unlock()
}

func (d *drillEnv) fail(format string, args ...any) {
	d.mu.Lock()
	d.failed = append(d.failed, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}

func (d *drillEnv) note(format string, args ...any) {
	d.mu.Lock()
	d.notes = append(d.notes, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}

// setup starts the run's world (cluster.Start). Everything it starts is stopped, and its
// database dropped, by d.teardown, deferred by the caller.
func (d *drillEnv) setup(ctx context.Context) error {
	d.victim = d.rng.IntN(d.h.Cluster.Replicas)
	var victimEnv []string
	// Customers prove who they are with tokens of the run's own issuer.
	if err := os.MkdirAll(d.dir, 0o755); err != nil {
		return err
	}
	identity, err := cluster.NewIdentity(d.dir)
	if err != nil {
		return err
	}
	d.identity = identity
	c, err := cluster.Start(ctx, cluster.Config{
		Dir: d.dir, Binary: d.h.Binary, HAProxy: d.h.HAProxy, Replicas: d.h.Cluster.Replicas,
		ServerURL: d.h.Cluster.DatabaseURL, OwnPostgres: d.sc.ownPostgres, PostgresHA: d.sc.postgresHA, RedisSentinel: d.sc.sentinel,
		Database: fmt.Sprintf("stocksvc_drill_%d_%s", time.Now().UnixNano(), strings.ReplaceAll(d.sc.name, "-", "_")),
		RedisURL: d.h.Cluster.RedisURL, OwnRedis: d.sc.ownRedis, Redlock: max(d.h.Cluster.Redlock, d.sc.redlock),
		Prefix: "stocksvc-drill:" + rand.Text()[:10] + ":", Token: rand.Text(),
		Direct: d.plan.direct, Keep: d.h.Cluster.Keep, Warnings: d.h.W, Identity: identity,
		BeforeReplicas: func(c *cluster.Cluster) error {
			if d.sc.proxyPostgres {
				u, _ := url.Parse(c.DatabaseURL)
				p, err := failpoint.NewProxy("pg", u.Host, true)
				if err != nil {
					return err
				}
				d.pgProxy = p
				victimEnv = append(victimEnv, "DATABASE_URL="+cluster.WithHost(c.DatabaseURL, p.Addr()))
			}
			if d.sc.proxyRedis {
				u, _ := url.Parse(c.RedisURL)
				p, err := failpoint.NewProxy("redis", u.Host, false)
				if err != nil {
					return err
				}
				d.rdProxy = p
				victimEnv = append(victimEnv, "REDIS_URL="+cluster.WithHost(c.RedisURL, p.Addr()))
			}
			return nil
		},
		Env: func(i int) []string {
			settings := []string{
				"STOCKSVC_DEFENSE=" + d.h.Cluster.Defense,
				"STOCKSVC_LOCK_WAIT=" + d.lockWait().String(),
				"STOCKSVC_LOCK_TTL=" + d.plan.lockTTL.String(),
				// Three replicas of every drill share the machine's Postgres (100 connections)
				// with the rest of the machine.
				"STOCKSVC_DB_MAX_CONNS=8",
			}
			if d.h.Cluster.Defense != env.DefaultDefense {
				settings = append(settings, "STOCKSVC_DEMO_UNSAFE=1")
			}
			if i == d.victim {
				settings = append(settings, victimEnv...) // through the proxies, when the scenario has them
			}
			return settings
		},
	})
	d.c = c
	return err
}

// lockWait is the replicas' STOCKSVC_LOCK_WAIT: the scenario's, or -lock-wait.
func (d *drillEnv) lockWait() time.Duration {
	if d.sc.lockWait > 0 {
		return d.sc.lockWait
	}
	return d.h.Cluster.LockWait
}

// firstRedisURL is the Redis a fault looks at the locks on: the run's Redis, or the first of
// its Redlock nodes (which also keeps the views).
func (d *drillEnv) firstRedisURL() string {
	if d.c.Redlock != nil {
		return d.c.Redlock[0].URL()
	}
	return d.c.RedisURL
}

// teardown stops the run's processes, then the proxies (which the victim used until it
// stopped), and removes the run's database and keys.
func (d *drillEnv) teardown() {
	if d.c != nil {
		if err := d.c.Stop(); err != nil {
			d.h.Printf("  warning: %v\n", err)
		}
	}
	if d.pgProxy != nil {
		d.pgProxy.Stop()
	}
	if d.rdProxy != nil {
		d.rdProxy.Stop()
	}
	if d.c != nil {
		d.c.Close()
	}
}

// limitedLimit is the limited product's max_per_customer; orders are of 1 to limitedLimit
// units, so that a customer's second order often exceeds it.
const limitedLimit = 2

// regularCustomer picks who orders the limited product: one of a set of customers that grows
// by one every fourth order, so that some come back (and meet the limit) and new ones keep
// arriving.
func (d *drillEnv) regularCustomer() string {
	n := 3 + int(d.regular.Add(1))/4
	return fmt.Sprintf("%s-regular-%d", d.client.Tag(), d.rng.IntN(n))
}

// createLimited creates the product with sale rules: it opens half the warm-up after its
// creation (by the harness's clock, which Postgres shares: the service stores the moment,
// Postgres's clock judges it) and sells at most limitedLimit units to a customer; the drill
// ends its sale halfway through the tail (endLimited). With -rules=false it has none.
func (d *drillEnv) createLimited(ctx context.Context) (int64, error) {
	var rules client.SaleRules
	if d.plan.rules {
		rules = client.SaleRules{Opens: time.Now().Add(d.plan.warmup / 2), Limit: limitedLimit}
	}
	return d.client.CreateSale(ctx, "LIMITED-"+rand.Text()[:6], limitedStock, rules)
}

// limitedStock outlasts what the limited product's customers may buy in any drill.
const limitedStock = 100_000

// hotStock sizes the hot product so that it outlasts the fault at the rate the scenario
// drives: the orders it gets at 2 units on average, over the whole run, doubled.
func (d *drillEnv) hotStock() int64 {
	if d.sc.buyers > 0 {
		return rushStock
	}
	seconds := (d.plan.warmup + d.sc.expected + d.plan.tail).Seconds() + d.sc.extraLoad
	return int64(2 * d.plan.rate * 0.45 * 2 * seconds)
}

// rushStock is the hot product's stock in a scenario with closed-loop buyers: more than they
// can buy in a drill, so that every order of theirs can be confirmed.
const rushStock = 1_000_000

// drillOutcome is one run's verdict and figures.
type drillOutcome struct {
	scenario   string
	run        int
	seed       uint64
	dir        string
	ops        int
	writes     model.CheckResult
	reads      model.CheckResult
	invariants []verdict.Invariant
	reconcile  []verdict.Invariant
	avail      availability
	invalid    []string // why the run proves nothing (the fault came after the sell-out...)
	failed     []string // scenario checks that failed
	notes      []string
	unknown    int // operations whose outcome stayed unknown to the client
	resolved   int // of which the database showed to have happened
	concurrent int
	catches    map[string]float64 // defense catches by layer, from the replicas' metrics
	noSale     time.Duration      // the HA drills' window without selling (0: not measured)
	err        error
}

func (o drillOutcome) violations() int {
	n := 0
	if o.writes.Result == porcupine.Illegal {
		n++
	}
	if o.reads.Result == porcupine.Illegal {
		n++
	}
	for _, inv := range slices.Concat(o.invariants, o.reconcile) {
		if !inv.OK {
			n++
		}
	}
	return n + len(o.failed)
}

func (o drillOutcome) verdict() string {
	switch {
	case o.err != nil:
		return "ERROR"
	case o.violations() > 0:
		return "FAIL"
	case len(o.invalid) > 0 || o.writes.Result == porcupine.Unknown || o.reads.Result == porcupine.Unknown:
		return "INVALID"
	}
	return "PASS"
}

// checkBoth checks the writes-only history and the one with reads.
func checkBoth(plan drillPlan, ops []*model.Op, end time.Duration, annotations []porcupine.Annotation, dir string) (writes, reads model.CheckResult, err error) {
	m := model.New(plan.model)
	w := model.History(ops, model.HistoryOptions{End: end, WindowSlack: plan.windowSlack})
	all := model.History(ops, model.HistoryOptions{Reads: true, ReadSlack: plan.readSlack, End: end, WindowSlack: plan.windowSlack})
	if writes, err = model.Check("orders+restocks", m, w, plan.checkTimeout, annotations, dir, "violation-writes.html"); err != nil {
		return writes, reads, err
	}
	reads, err = model.Check("with reads", m, all, plan.checkTimeout, annotations, dir, "violation-reads.html")
	return writes, reads, err
}

// validity says why a run proves nothing, if it does not: the fault must have hit a sale in
// progress, and stock must have remained when it ended — orders for the hot product were
// confirmed after it.
func (d *drillEnv) validity(ops []*model.Op, faultStart, faultEnd time.Duration) []string {
	var before, after bool
	for _, p := range ops {
		if p.In.Product != d.hot || p.In.Kind != model.KindOrder || p.Out.Outcome != model.Confirmed {
			continue
		}
		if p.Return <= faultStart {
			before = true
		}
		if p.Invoke >= faultEnd {
			after = true
		}
	}
	var why []string
	if !before {
		why = append(why, "no order was confirmed before the fault: it did not hit a sale in progress")
	}
	if !after {
		why = append(why, "no hot order was confirmed after the fault ended: stock may have run out, so the fault proves nothing")
	}
	return why
}

func (d *drillEnv) annotations() []porcupine.Annotation {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []porcupine.Annotation
	for _, w := range d.faults {
		out = append(out, porcupine.Annotation{Tag: "fault", Start: int64(w.start), End: int64(w.end),
			Description: d.sc.name, BackgroundColor: "#f8d7da"})
	}
	for _, e := range d.events {
		out = append(out, porcupine.Annotation{Tag: "events", Start: int64(e.at), Description: e.what})
	}
	return out
}
