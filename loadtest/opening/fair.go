package opening

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
	"github.com/stocksvc/stocksvc/loadtest/report"
	"github.com/stocksvc/stocksvc/loadtest/verdict"
)

// -opening-fair is issue #33's acceptance: who wins at an opening with a line and without it.
// On one cluster (the replicas verify customer tokens), each round is a product of its own with
// max_per_customer 1 opening Lead after its creation, and a crowd of Go buyers:
//
//   - polite buyers, each arriving once at a random moment before the opening (the round's
//     seed draws them). With a line they join, wait with the long-poll as told and order with
//     the pass once admitted; without, they order and come back exactly when Retry-After says;
//   - scripts, from scriptsLead before the opening with no pause: with a line they join and cycle
//     through every route (join, a plain poll, an order without a pass, an order with the pass
//     once they have one); without, they send orders;
//   - with a line, leavers: polite buyers who leave the line at their first status after the
//     draw, counted in neither group (nobody must wait on them).
//
// Each mix runs with the line and without, for each seed. Winners are read from Postgres; the
// sold-out moment is the last unit's order's created_at; every buyer in line who did not win
// notes when it first heard that the units were gone.

// mix is one crowd: polite buyers, scripts, units.
type mix struct{ Polite, Scripts, Units int }

func (m mix) String() string {
	return fmt.Sprintf("%d polite, %d scripts, %d units", m.Polite, m.Scripts, m.Units)
}

// defaultMixes are picked with FairChance (TestPickedCrowdsMeetTheBound): a fair draw meets
// the bound with probability 0.979 (200 against 200, half of them winning) and 0.969 (1000
// against 100, half winning). Smaller crowds miss it: 100 against 100 for 100 units is 0.880,
// and 200 against 20 needs 200 units of 220 (0.996), where nearly everyone wins and the
// scripts have nothing to take from the polite buyers even without a line.
const defaultMixes = "200:200:200,1000:100:550"

// parseMixes reads polite:scripts:units, comma-separated.
func parseMixes(spec string) ([]mix, error) {
	var out []mix
	for part := range strings.SplitSeq(spec, ",") {
		f := strings.Split(strings.TrimSpace(part), ":")
		if len(f) != 3 {
			return nil, fmt.Errorf("-opening-mixes: %q is not polite:scripts:units", part)
		}
		var n [3]int
		for i, s := range f {
			v, err := strconv.Atoi(s)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("-opening-mixes: %q: counts are positive integers", part)
			}
			n[i] = v
		}
		m := mix{n[0], n[1], n[2]}
		if m.Units >= m.Polite+m.Scripts {
			return nil, fmt.Errorf("-opening-mixes: %q: fewer units than buyers, or everyone wins", part)
		}
		out = append(out, m)
	}
	return out, nil
}

// FairOptions configure -opening-fair.
type FairOptions struct {
	On      bool
	Mixes   string
	Seeds   int
	Seed    uint64
	Lead    time.Duration // from a round's product's creation to its opening
	Admit   int           // the line's admit
	Leavers int           // with a line, leavers per round (beside the mix)
	// Speed, when positive, adds the speed comparison: this many new buyers, half as many
	// units, in token mode with a line against body mode without one (a second cluster).
	Speed int
	// Profile records, in each round with the line, a CPU profile of the first replica and
	// one of the harness itself from a second before the opening for profileFor, and the
	// replica's goroutines a second after the opening.
	Profile bool
}

// profileFor is how long -opening-profile records: from a second before the opening to past
// the sold-out moment of the rounds measured so far.
const profileFor = 5 * time.Second

func (o *FairOptions) register(fs *flag.FlagSet) {
	fs.BoolVar(&o.On, "opening-fair", false, "in -opening, issue #33's acceptance instead of the k6 crowd: Go buyers, polite against scripts, with the line and without, for each mix and seed (docs/loadtest.md)")
	fs.StringVar(&o.Mixes, "opening-mixes", defaultMixes, "in -opening-fair, the crowds as polite:scripts:units, comma-separated (the probability that a fair draw meets the 0.8–1.25 bound is printed for each)")
	fs.IntVar(&o.Seeds, "opening-seeds", 3, "in -opening-fair, seeded runs of each mix (seeds -seed, -seed+1, ...)")
	fs.Uint64Var(&o.Seed, "opening-seed", 1, "in -opening-fair, the first seed: the polite buyers' arrival moments and who leaves")
	fs.DurationVar(&o.Lead, "opening-fair-lead", 8*time.Second, "in -opening-fair, from each round's product's creation to its opening (the polite buyers arrive in it)")
	fs.IntVar(&o.Admit, "opening-admit", 1000, "in -opening-fair, the line's admit (buyers admitted at once; the rule admits no more than the units left in any case)")
	fs.IntVar(&o.Leavers, "opening-leavers", 20, "in -opening-fair, buyers who join and leave the line after the draw, in each round with the line")
	fs.BoolVar(&o.Profile, "opening-profile", false, "in -opening-fair, record a CPU profile of the first replica and of the harness in each round with the line, from 1 s before the opening for 5 s (r<mix>-<round>-replica.pprof, r<mix>-<round>-harness.pprof in the run's opening-fair/fair folder)")
	fs.IntVar(&o.Speed, "opening-speed", 400, "in -opening-fair, new buyers of the speed comparison (token mode with a line against body mode without, half as many units); 0: none")
}

func (o FairOptions) validate() error {
	if !o.On {
		return nil
	}
	if _, err := parseMixes(o.Mixes); err != nil {
		return err
	}
	switch {
	case o.Seeds < 1 || o.Admit < 1 || o.Admit > 10000 || o.Leavers < 0 || o.Speed < 0 || o.Speed == 1:
		return errors.New("-opening-seeds must be positive, -opening-admit 1..10000, -opening-leavers not negative, -opening-speed 0 or at least 2")
	case o.Lead < 3*time.Second:
		return errors.New("-opening-fair-lead must be at least 3s")
	}
	return nil
}

// scriptsLead is how long before the opening the scripts start: long enough that their joins,
// all sent at once to a loaded machine, reach Postgres before the draw (a late one would go to
// the back, and the polite buyers would win more than a fair draw gives them).
const scriptsLead = 2 * time.Second

// roundResult is one round: a mix, a seed, with the line or without.
type roundResult struct {
	mix        mix
	seed       uint64
	lined      bool
	product    int64
	politeWins int
	scriptWins int
	leaverWins int
	sold       int64
	firstSale  time.Duration // from the opening; <0: none
	soldOut    time.Duration // from the opening to the last unit's order; 0: not sold out
	// learnt is, for every buyer in line who did not win, from the sold-out moment to when it
	// heard; politeLearnt the same for the polite buyers alone.
	learnt, politeLearnt []time.Duration
	neverHeard           int // buyers in line who neither won nor heard before the round ended
	left                 int
	invariants           []verdict.Invariant
	scriptRequests       int
	// answers counts each group's answers by status and problem code ("p", "s", "l").
	answers map[string]map[string]int
	// late counts each group's tickets placed after the draw: joins that reached Postgres
	// after the opening.
	late map[string]int64
	// For the page (fairpage.go): the round's origin (its product's creation) and opening;
	// every order's answer; when each group's buyers heard their outcome (won, or heard the
	// units were gone), from the origin; and the round's sales and line, from Postgres.
	origin, opens time.Time
	orders        []report.Answer
	heard         map[string][]time.Duration
	tables        roundTables
}

func (r roundResult) ratio() float64 {
	return Ratio(r.politeWins, r.mix.Polite, r.scriptWins, r.mix.Scripts)
}

// RunFair runs -opening-fair and reports it; env.ErrFailed when an invariant failed or a
// round with the line missed an acceptance bound.
func RunFair(ctx context.Context, h *env.Harness, o FairOptions) error {
	mixes, err := parseMixes(o.Mixes)
	if err != nil {
		return err
	}
	dir := filepath.Join(h.Out, "opening-fair")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, m := range mixes {
		p, err := FairChance(m.Polite, m.Scripts, m.Units)
		if err != nil {
			return err
		}
		h.Printf("[fair] %s: a fair draw meets 0.8 ≤ ratio ≤ 1.25 with probability %.4f\n", m, p)
	}
	identity, err := cluster.NewIdentity(dir)
	if err != nil {
		return err
	}
	c, pool, err := startFairCluster(ctx, h, dir, "fair", identity, o.Profile)
	if err != nil {
		return err
	}
	var rounds []roundResult
	n := 0
	for mi, m := range mixes {
		for s := range o.Seeds {
			seed := o.Seed + uint64(s)
			for _, lined := range []bool{true, false} {
				n++
				r, err := runRound(ctx, h, c, pool, identity, o, m, seed, lined, fmt.Sprintf("r%d-%d-", mi, n))
				if err != nil {
					c.Close()
					pool.Close()
					return fmt.Errorf("round %d (%s, seed %d, line %v): %w", n, m, seed, lined, err)
				}
				h.Printf("[fair] %s\n", r.line())
				rounds = append(rounds, r)
			}
		}
	}
	var speed *speedResult
	if o.Speed > 0 && ctx.Err() == nil {
		sr, err := runSpeed(ctx, h, c, pool, identity, o)
		c.Close()
		pool.Close()
		if err != nil {
			return fmt.Errorf("the speed comparison: %w", err)
		}
		body, bpool, err := startFairCluster(ctx, h, dir, "body", nil, false)
		if err != nil {
			return err
		}
		bo, err := crowdRound(ctx, h, body, bpool, nil, o, false)
		body.Close()
		bpool.Close()
		if err != nil {
			return fmt.Errorf("the speed comparison, body mode: %w", err)
		}
		sr.body = bo
		speed = &sr
	} else {
		c.Close()
		pool.Close()
	}
	text := fairReport(mixes, rounds, speed, o)
	h.Printf("\n%s", text)
	if err := os.WriteFile(filepath.Join(h.Out, "opening-fair.md"), []byte(text), 0o644); err != nil {
		return err
	}
	page := filepath.Join(h.Out, "opening-fair.html")
	if err := report.Write(page, fairPage("go run -C loadtest . "+strings.Join(h.Args, " "), rounds)); err != nil {
		return err
	}
	h.Printf("written to %s and %s; logs in %s\n", filepath.Join(h.Out, "opening-fair.md"), page, dir)
	if fairFailed(rounds) {
		return env.ErrFailed
	}
	if ctx.Err() != nil {
		return env.ErrStopped
	}
	return nil
}

// startFairCluster starts the replicas (verifying tokens of identity; nil: body mode).
func startFairCluster(ctx context.Context, h *env.Harness, dir, name string, identity *cluster.Identity, debug bool) (*cluster.Cluster, *pgxpool.Pool, error) {
	sub := filepath.Join(dir, name)
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return nil, nil, err
	}
	database := fmt.Sprintf("stocksvc_load_%d_%s", time.Now().Unix(), name)
	c, err := cluster.Start(ctx, cluster.Config{
		Dir: sub, Binary: h.Binary, HAProxy: h.HAProxy, Replicas: h.Cluster.Replicas,
		ServerURL: h.Cluster.DatabaseURL, Database: database,
		RedisURL: h.Cluster.RedisURL, Prefix: "stocksvc-load:" + rand.Text()[:10] + ":", Token: rand.Text(),
		Redlock: h.Cluster.Redlock, Keep: h.Cluster.Keep, Warnings: h.W, Identity: identity, DebugPorts: debug,
		Env: func(int) []string {
			s := []string{"STOCKSVC_DEFENSE=" + h.Cluster.Defense, "STOCKSVC_LOCK_WAIT=" + h.Cluster.LockWait.String()}
			if h.Cluster.Defense != env.DefaultDefense {
				s = append(s, "STOCKSVC_DEMO_UNSAFE=1")
			}
			return s
		},
	})
	if err != nil {
		return nil, nil, err
	}
	pool, err := pgxpool.New(context.WithoutCancel(ctx), c.DatabaseURL)
	if err != nil {
		c.Close()
		return nil, nil, fmt.Errorf("connect to %s: %w", database, err)
	}
	return c, pool, nil
}

// newProduct creates a round's product: units, one per customer, opening lead from Postgres's
// now, with a line of admit when admit > 0.
func newProduct(ctx context.Context, c *cluster.Cluster, pool *pgxpool.Pool, units, admit int, lead time.Duration) (int64, time.Time, error) {
	var now time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return 0, time.Time{}, fmt.Errorf("read Postgres's clock: %w", err)
	}
	opens := now.Add(lead).Truncate(time.Millisecond)
	body := map[string]any{"sku": "FAIR-" + rand.Text()[:8], "name": "a fair opening", "stock": units,
		"sale_starts_at": opens.UTC().Format(time.RFC3339Nano), "max_per_customer": 1}
	if admit > 0 {
		body["line"] = map[string]any{"admit": admit, "admission_for": 60}
	}
	var p struct {
		ID int64 `json:"id"`
	}
	if err := c.CreateProductWith(ctx, body, &p); err != nil {
		return 0, time.Time{}, err
	}
	return p.ID, opens, nil
}

// runRound runs one round and reads its figures.
func runRound(ctx context.Context, h *env.Harness, c *cluster.Cluster, pool *pgxpool.Pool, identity *cluster.Identity,
	o FairOptions, m mix, seed uint64, lined bool, prefix string) (roundResult, error) {
	r := roundResult{mix: m, seed: seed, lined: lined}
	admit := 0
	if lined {
		admit = o.Admit
	}
	leavers := 0
	if lined {
		leavers = o.Leavers
	}
	// The tokens first: minting is not the buyers' time.
	names := func(kind string, n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = prefix + kind + strconv.Itoa(i)
		}
		return out
	}
	polite, scripts, leaving := names("p", m.Polite), names("s", m.Scripts), names("l", leavers)
	tokens := map[string]string{}
	for _, group := range [][]string{polite, scripts, leaving} {
		for _, cu := range group {
			t, err := identity.Token(cu)
			if err != nil {
				return r, err
			}
			tokens[cu] = t
		}
	}
	product, opens, err := newProduct(ctx, c, pool, m.Units, admit, o.Lead)
	if err != nil {
		return r, err
	}
	r.product = product
	created := time.Now()
	// The seed draws the polite buyers' (and leavers') arrivals, uniformly from half a second
	// after the product's creation to half a second before the opening.
	rng := mrand.New(mrand.NewPCG(seed, uint64(m.Polite)<<32|uint64(m.Scripts)))
	window := time.Until(opens) - time.Second
	arrival := func() time.Time { return created.Add(500*time.Millisecond + time.Duration(rng.Int64N(int64(window)))) }
	roundCtx, cancel := context.WithDeadline(ctx, opens.Add(45*time.Second))
	defer cancel()
	type result struct {
		kind string
		out  outcome
	}
	results := make(chan result, len(polite)+len(scripts)+len(leaving))
	var wg sync.WaitGroup
	r.origin, r.opens = created, opens
	start := func(kind, customer string, f func(*buyer) outcome) {
		b := newBuyer(c.FrontURL(), tokens[customer], customer, product)
		b.origin = created
		wg.Go(func() {
			defer b.close()
			results <- result{kind, f(b)}
		})
	}
	for _, cu := range polite {
		at := arrival()
		if lined {
			start("p", cu, func(b *buyer) outcome { return politeInLine(roundCtx, b, at, false) })
		} else {
			start("p", cu, func(b *buyer) outcome { return politeNoLine(roundCtx, b, at) })
		}
	}
	for _, cu := range leaving {
		at := arrival()
		start("l", cu, func(b *buyer) outcome { return politeInLine(roundCtx, b, at, true) })
	}
	for _, cu := range scripts {
		start("s", cu, func(b *buyer) outcome { return script(roundCtx, b, opens.Add(-scriptsLead), lined) })
	}
	var profiled chan error
	if o.Profile && lined {
		profiled = make(chan error, 1)
		go func() { profiled <- profileOpening(roundCtx, c, opens, prefix) }()
	}
	wg.Wait()
	if profiled != nil {
		if err := <-profiled; err != nil {
			h.Printf("[fair] profile: %v\n", err)
		}
	}
	close(results)
	checkCtx, cancelCheck := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancelCheck()
	if err := r.read(checkCtx, pool, prefix); err != nil {
		return r, err
	}
	if r.tables, err = readTables(checkCtx, pool, product, lined); err != nil {
		return r, err
	}
	soldOutAt := opens.Add(r.soldOut)
	r.answers = map[string]map[string]int{}
	r.heard = map[string][]time.Duration{}
	for res := range results {
		r.orders = append(r.orders, res.out.orders...)
		if (res.out.won || !res.out.learnt.IsZero()) && !res.out.ended.IsZero() {
			r.heard[res.kind] = append(r.heard[res.kind], res.out.ended.Sub(created))
		}
		if r.answers[res.kind] == nil {
			r.answers[res.kind] = map[string]int{}
		}
		for k, n := range res.out.answers {
			r.answers[res.kind][k] += n
		}
		switch res.kind {
		case "s":
			r.scriptRequests += res.out.requests
		case "l":
			if res.out.left {
				r.left++
			}
		}
		if !res.out.waited && !res.out.unresolved || res.out.won || res.kind == "l" && res.out.left {
			continue
		}
		if res.out.learnt.IsZero() {
			r.neverHeard++
			continue
		}
		if r.soldOut > 0 {
			d := res.out.learnt.Sub(soldOutAt)
			r.learnt = append(r.learnt, d)
			if res.kind == "p" {
				r.politeLearnt = append(r.politeLearnt, d)
			}
		}
	}
	if lined {
		inv, err := verdict.Line(checkCtx, pool, product)
		if err != nil {
			return r, err
		}
		r.invariants = append(r.invariants, inv...)
		r.invariants = append(r.invariants, verdict.Invariant{Name: "no leaver bought", OK: r.leaverWins == 0,
			Detail: fmt.Sprintf("%d of %d leavers left, %d bought", r.left, leavers, r.leaverWins)})
		r.invariants = append(r.invariants, verdict.Heard("every buyer in line heard within 1 s of the last unit selling", r.learnt, r.neverHeard, time.Second))
	}
	inv, _, err := verdict.Ledgers(checkCtx, pool)
	if err != nil {
		return r, err
	}
	r.invariants = append(r.invariants, inv...)
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	_ = h
	return r, nil
}

// profileOpening records a CPU profile of c's first replica and of this process from a second
// before opens for profileFor, into the cluster's folder as <prefix>replica.pprof and
// <prefix>harness.pprof.
func profileOpening(ctx context.Context, c *cluster.Cluster, opens time.Time, prefix string) error {
	if !pause(ctx, time.Until(opens.Add(-time.Second))) {
		return ctx.Err()
	}
	f, err := os.Create(filepath.Join(c.Dir, prefix+"harness.pprof"))
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return fmt.Errorf("the harness's profile: %w", err)
	}
	// Where the replica's goroutines wait a second into the sale: what a CPU profile of a
	// replica that waits more than it works does not show.
	stacks := make(chan error, 1)
	go func() {
		if !pause(ctx, time.Until(opens.Add(time.Second))) {
			stacks <- ctx.Err()
			return
		}
		stacks <- goroutines(ctx, c, filepath.Join(c.Dir, prefix+"replica.goroutines.txt"))
	}()
	err = c.Profile(ctx, 0, profileFor, prefix+"replica.pprof")
	pprof.StopCPUProfile()
	return errors.Join(err, <-stacks)
}

// goroutines writes the goroutines of c's first replica, grouped by stack, to file.
func goroutines(ctx context.Context, c *cluster.Cluster, file string) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/goroutine?debug=1", c.Replicas[0].DebugPort)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return fmt.Errorf("%s: %w", url, err)
	}
	return os.WriteFile(file, b, 0o644)
}

// read reads a round's winners and moments from Postgres.
func (r *roundResult) read(ctx context.Context, pool *pgxpool.Pool, prefix string) error {
	f, err := measure(ctx, pool, r.product)
	if err != nil {
		return err
	}
	r.sold, r.firstSale, r.soldOut = f.sold, f.firstSale, f.soldOutAt
	rows, _ := pool.Query(ctx, `
		SELECT o.customer_id FROM orders o JOIN order_items i ON i.order_id = o.id
		 WHERE i.product_id = $1 AND o.status = 'confirmed'`, r.product)
	winners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read the winners: %w", err)
	}
	rows, _ = pool.Query(ctx, `
		SELECT substring(t.customer_id from length($2) + 1 for 1), count(*)
		  FROM line_tickets t JOIN lines l ON l.product_id = t.product_id
		 WHERE t.product_id = $1 AND t.place > l.drawn GROUP BY 1`, r.product, prefix)
	r.late = map[string]int64{}
	var group string
	var n int64
	if _, err := pgx.ForEachRow(rows, []any{&group, &n}, func() error { r.late[group] = n; return nil }); err != nil {
		return fmt.Errorf("read the late arrivals: %w", err)
	}
	for _, w := range winners {
		switch {
		case strings.HasPrefix(w, prefix+"p"):
			r.politeWins++
		case strings.HasPrefix(w, prefix+"s"):
			r.scriptWins++
		case strings.HasPrefix(w, prefix+"l"):
			r.leaverWins++
		}
	}
	return nil
}

// percentile is the p-th percentile (0..1) of ds by the nearest rank; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s))*p+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func (r roundResult) line() string {
	kind := "without the line"
	if r.lined {
		kind = "with the line"
	}
	return fmt.Sprintf("%s, seed %d, %s: polite %d/%d, scripts %d/%d, ratio %.2f, first order +%v, sold out +%v; late arrivals polite %d, scripts %d; polite answers %s; script answers %s",
		r.mix, r.seed, kind, r.politeWins, r.mix.Polite, r.scriptWins, r.mix.Scripts, r.ratio(), r.firstSale.Round(time.Millisecond), r.soldOut.Round(time.Millisecond),
		r.late["p"], r.late["s"], answerList(r.answers["p"]), answerList(r.answers["s"]))
}

// answerList renders answers by status and code, most first.
func answerList(m map[string]int) string {
	keys := slices.Collect(maps.Keys(m))
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s ×%d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

func fairFailed(rounds []roundResult) bool {
	for _, r := range rounds {
		for _, inv := range r.invariants {
			if !inv.OK {
				return true
			}
		}
		if r.lined && (r.ratio() < 0.8 || r.ratio() > 1.25) {
			return true
		}
	}
	return false
}

// fairReport is the Markdown report: the fairness table, the 1-s figures, the speed ratios.
func fairReport(mixes []mix, rounds []roundResult, speed *speedResult, o FairOptions) string {
	var b strings.Builder
	b.WriteString("| mix | seed | line | polite wins / buyers | scripts wins / buyers | ratio | opening → sold out | script requests | late joins (polite, scripts) | 429 busy (polite, scripts) |\n| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |\n")
	for _, r := range rounds {
		line := "without"
		if r.lined {
			line = "with"
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %d / %d | %d / %d | %.2f | %v | %d | %d, %d | %d, %d |\n", r.mix, r.seed, line, r.politeWins, r.mix.Polite,
			r.scriptWins, r.mix.Scripts, r.ratio(), r.soldOut.Round(time.Millisecond), r.scriptRequests, r.late["p"], r.late["s"],
			r.answers["p"]["429 busy"], r.answers["s"]["429 busy"])
	}
	b.WriteString("\nA fair draw's probability of meeting 0.8 ≤ ratio ≤ 1.25 (hypergeometric, exact):\n\n")
	for _, m := range mixes {
		p, _ := FairChance(m.Polite, m.Scripts, m.Units)
		fmt.Fprintf(&b, "- %s: %.4f\n", m, p)
	}
	b.WriteString("\nSpeed, the same crowd with the line and without (opening → sold out, by Postgres's clock):\n\n")
	for _, m := range mixes {
		var with, without []time.Duration
		for _, r := range rounds {
			if r.mix != m || r.soldOut <= 0 {
				continue
			}
			if r.lined {
				with = append(with, r.soldOut)
			} else {
				without = append(without, r.soldOut)
			}
		}
		mw, mo := percentile(with, 0.5), percentile(without, 0.5)
		ratio := "-"
		if mo > 0 {
			ratio = fmt.Sprintf("%.2f×", float64(mw)/float64(mo))
		}
		fmt.Fprintf(&b, "- %s: median %v with, %v without: %s\n", m, mw.Round(time.Millisecond), mo.Round(time.Millisecond), ratio)
	}
	var all, polite []time.Duration
	never, left := 0, 0
	for _, r := range rounds {
		if r.lined {
			all, polite = append(all, r.learnt...), append(polite, r.politeLearnt...)
			never += r.neverHeard
			left += r.left
		}
	}
	fmt.Fprintf(&b, "\nNobody waits for nothing (rounds with the line): %d buyers in line who did not win heard that the units were gone %v after the last unit's order at most (p99 %v, p50 %v); the polite ones, waiting on the long-poll: max %v, p99 %v (%d); %d never heard; %d leavers left (%d a round), and none was waited on: every round sold out.\n",
		len(all), percentile(all, 1).Round(time.Millisecond), percentile(all, 0.99).Round(time.Millisecond), percentile(all, 0.5).Round(time.Millisecond),
		percentile(polite, 1).Round(time.Millisecond), percentile(polite, 0.99).Round(time.Millisecond), len(polite), never, left, o.Leavers)
	if speed != nil {
		b.WriteString("\n" + speed.String())
	}
	b.WriteString("\nInvariants, in Postgres, every round:\n\n")
	failed := 0
	for _, r := range rounds {
		for _, inv := range r.invariants {
			if !inv.OK {
				failed++
				fmt.Fprintf(&b, "- FAIL round %s seed %d line %v: %s: %s\n", r.mix, r.seed, r.lined, inv.Name, inv.Detail)
			}
		}
	}
	if failed == 0 && len(rounds) > 0 {
		var names []string
		for _, inv := range rounds[0].invariants {
			names = append(names, inv.Name)
		}
		fmt.Fprintf(&b, "- ok in all %d rounds: %s\n", len(rounds), strings.Join(names, "; "))
	}
	verdict := "PASS"
	if fairFailed(rounds) {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "\nverdict: %s (with the line every ratio within 0.8–1.25 and every invariant held)\n", verdict)
	return b.String()
}

// speedResult is the speed comparison: one crowd of new buyers in token mode with a line,
// the same in body mode without.
type speedResult struct {
	buyers      int
	token, body speedRound
}

// speedRound is one crowd's figures.
type speedRound struct {
	sold      int64
	firstSale time.Duration
	soldOut   time.Duration
}

// rate is confirmed orders a second from the opening to the sold-out moment.
func (s speedRound) rate() float64 {
	if s.soldOut <= 0 {
		return 0
	}
	return float64(s.sold) / s.soldOut.Seconds()
}

// selling is confirmed orders a second from the first order to the last: the pace once the
// sale sells, whatever the opening's first moments cost.
func (s speedRound) selling() float64 {
	if s.soldOut <= s.firstSale || s.sold < 2 {
		return 0
	}
	return float64(s.sold-1) / (s.soldOut - s.firstSale).Seconds()
}

func (s speedResult) String() string {
	ratio := "-"
	if s.body.rate() > 0 {
		ratio = fmt.Sprintf("%.2f×", s.token.rate()/s.body.rate())
	}
	selling := "-"
	if s.body.selling() > 0 {
		selling = fmt.Sprintf("%.2f×", s.token.selling()/s.body.selling())
	}
	return fmt.Sprintf("Orders a second at the opening, %d new buyers, %d units, everyone ordering at once: token mode with the line %.0f/s (%d units, opening → sold out %v, first order +%v; %.0f/s from the first order to the last), body mode without a line %.0f/s (%d units, %v, first order +%v; %.0f/s from the first to the last): %s from the opening, %s from the first order\n",
		s.buyers, s.buyers/2, s.token.rate(), s.token.sold, s.token.soldOut.Round(time.Millisecond), s.token.firstSale.Round(time.Millisecond), s.token.selling(),
		s.body.rate(), s.body.sold, s.body.soldOut.Round(time.Millisecond), s.body.firstSale.Round(time.Millisecond), s.body.selling(), ratio, selling)
}

// runSpeed runs the token half of the speed comparison on the token cluster.
func runSpeed(ctx context.Context, h *env.Harness, c *cluster.Cluster, pool *pgxpool.Pool, identity *cluster.Identity, o FairOptions) (speedResult, error) {
	tr, err := crowdRound(ctx, h, c, pool, identity, o, true)
	return speedResult{buyers: o.Speed, token: tr}, err
}

// crowdRound is a crowd of o.Speed new buyers, all arriving before the opening, for half as
// many units, each buying as fast as it is let: with a line (token mode) each joins and
// long-polls, ordering with its pass at once; without (body mode) each sends its order at the
// opening and again at once after every refusal but sold-out.
func crowdRound(ctx context.Context, h *env.Harness, c *cluster.Cluster, pool *pgxpool.Pool, identity *cluster.Identity, o FairOptions, lined bool) (speedRound, error) {
	var s speedRound
	units := o.Speed / 2
	admit := 0
	if lined {
		admit = min(units, 10000)
	}
	customers := make([]string, o.Speed)
	tokens := make([]string, o.Speed)
	for i := range customers {
		customers[i] = "speed-" + strconv.FormatBool(lined) + "-" + strconv.Itoa(i)
		if identity != nil {
			t, err := identity.Token(customers[i])
			if err != nil {
				return s, err
			}
			tokens[i] = t
		}
	}
	product, opens, err := newProduct(ctx, c, pool, units, admit, o.Lead)
	if err != nil {
		return s, err
	}
	roundCtx, cancel := context.WithDeadline(ctx, opens.Add(45*time.Second))
	defer cancel()
	var wg sync.WaitGroup
	for i, cu := range customers {
		b := newBuyer(c.FrontURL(), tokens[i], cu, product)
		arrive := opens.Add(-time.Duration(1+i%3) * time.Second)
		wg.Go(func() {
			defer b.close()
			if lined {
				politeInLine(roundCtx, b, arrive, false)
				return
			}
			eager(roundCtx, b, opens)
		})
	}
	wg.Wait()
	checkCtx, cancelCheck := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancelCheck()
	f, err := measure(checkCtx, pool, product)
	if err != nil {
		return s, err
	}
	s.sold, s.firstSale, s.soldOut = f.sold, f.firstSale, f.soldOutAt
	h.Printf("[fair] speed, line %v: %d units sold, first +%v, sold out +%v\n", lined, s.sold, s.firstSale.Round(time.Millisecond), s.soldOut.Round(time.Millisecond))
	return s, ctx.Err()
}

// eager orders from the opening and again at once after every refusal that is not final.
func eager(ctx context.Context, b *buyer, opens time.Time) {
	if !pause(ctx, time.Until(opens)) {
		return
	}
	key := newKey()
	for ctx.Err() == nil {
		a, err := b.order(ctx, "", key)
		if err == nil && (a.status == 201 || gone(a) || a.code == "customer-limit") {
			return
		}
		if err == nil && a.code != "sale-not-open" && a.retryAfter > 0 {
			pause(ctx, cmp.Or(a.retryAfter/10, time.Millisecond))
		}
	}
}
