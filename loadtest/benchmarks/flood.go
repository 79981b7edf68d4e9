package benchmarks

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/env"
)

// The flood benchmark (-flood, issue #18 items 2 and 7): what a flood of one kind of request
// takes from a sale running beside it. In every round, wrk buys one hot product in a closed
// loop (every order a fresh Idempotency-Key; the product never sells out) while another wrk
// floods the same balancer with one kind of request. The kinds take turns, round after round;
// the buyers' confirmed orders per second under each flood are compared with those under a
// flood of GET /healthz — what the requests alone cost on a shared machine — by the medians of
// the rounds of one run. The hot product is first given many past orders, written straight
// into the run's database, so that a recount of its sales costs what it would in production.
//
// The replicas verify customer tokens, as in production (issue #31): the buyers are
// floodBuyerCustomers customers whose tokens the harness mints, each request one of them at
// random, so that each stays far inside the limit per customer.

// FloodOptions configure -flood. The zero value is off.
type FloodOptions struct {
	On     bool
	Round  time.Duration // length of each round (whole seconds)
	Rounds int           // measured rounds of each kind
	Orders int           // past orders of the hot product seeded before the rounds
	Buyers int           // wrk connections buying the hot product, in every round
	Conns  int           // wrk connections flooding
	// Rate, when positive, paces every flood to at most this many requests per second in all
	// (each connection waits conns/Rate s before its next request); 0 floods in a closed loop.
	Rate  float64
	Kinds string // the floods, comma-separated; healthz is the baseline and always runs
}

// Register defines the -flood flags on fs.
func (o *FloodOptions) Register(fs *flag.FlagSet) {
	fs.BoolVar(&o.On, "flood", false, "benchmark: confirmed orders/s of a sale beside floods of GET /healthz, the public audit, the admin audit, orders for missing ids, forged tokens and one customer's orders, in alternating rounds (docs/loadtest.md)")
	fs.DurationVar(&o.Round, "flood-round", 5*time.Second, "in -flood, the length of each round (whole seconds)")
	fs.IntVar(&o.Rounds, "flood-rounds", 3, "in -flood, measured rounds of each flood (medians are compared)")
	fs.IntVar(&o.Orders, "flood-orders", 300_000, "in -flood, past orders of the hot product written into the run's database before the rounds")
	fs.IntVar(&o.Buyers, "flood-buyers", 64, "in -flood, wrk connections buying the hot product")
	fs.IntVar(&o.Conns, "flood-conns", 32, "in -flood, wrk connections flooding")
	fs.Float64Var(&o.Rate, "flood-rate", 0, "in -flood, pace every flood to at most this many requests/s, so that kinds are compared at one rate (0: closed loop, as fast as answers come)")
	fs.StringVar(&o.Kinds, "flood-kinds", "healthz,audit,audit-admin,missing-ids,bad-signature,one-customer,no-pass", "in -flood, the floods to run (healthz, the baseline, always runs)")
}

// Validate refuses flags -flood cannot run with; a mode that is off is not judged.
func (o FloodOptions) Validate() error {
	if !o.On {
		return nil
	}
	switch {
	case o.Round < time.Second || o.Rounds < 1 || o.Orders < 0 || o.Buyers < 1 || o.Conns < 1 || o.Rate < 0:
		return errors.New("-flood-round must be at least 1s, -flood-rounds, -flood-buyers and -flood-conns positive, -flood-orders and -flood-rate not negative")
	}
	_, err := pickFloodKinds(o.Kinds)
	return err
}

// floodKind is one kind of flood.
type floodKind struct {
	name  string
	about string
	// target is the least ratio of the buyers' rate under this flood to their rate under the
	// healthz flood that issue #18 demands; 0 reports the ratio without judging it.
	target float64
}

const floodBaseline = "healthz"

var floodKinds = []floodKind{
	{name: floodBaseline, about: "`GET /healthz` (the baseline)"},
	{name: "audit", about: "`GET /v1/products/{hot}/audit`, no credentials", target: 0.9},
	{name: "audit-admin", about: "`GET /v1/products/{hot}/audit` with the admin token (for information)"},
	{name: "missing-ids", about: "`POST /v1/orders` for random missing product ids, each keyed", target: 0.9},
	{name: "bad-signature", about: "`POST /v1/orders` with a token of a known `kid` and a bad signature, a new one each time", target: 0.9},
	{name: "one-customer", about: "`POST /v1/orders` of the hot product, one customer's valid token, each keyed", target: 0.9},
	{name: noPassKind, about: "`POST /v1/orders` of a product sold through a line, without a pass (valid tokens, each keyed; issue #33)", target: 0.9},
}

// The customers of the flood benchmark's tokens: the buyers, the missing-ids flood (enough of
// them that each stays inside the limit per customer at any flood rate: it measures the 404),
// and the one customer who floods.
const (
	floodBuyerCustomers = 997
	floodMissingIDs     = 4000
)

// pickFloodKinds resolves -flood-kinds, healthz first whether named or not.
func pickFloodKinds(spec string) ([]floodKind, error) {
	picked := []floodKind{floodKinds[0]}
	for name := range strings.SplitSeq(spec, ",") {
		name = strings.TrimSpace(name)
		if name == "" || name == floodBaseline {
			continue
		}
		i := slices.IndexFunc(floodKinds, func(k floodKind) bool { return k.name == name })
		if i < 0 {
			return nil, fmt.Errorf("-flood-kinds: unknown flood %q (want some of healthz, audit, audit-admin, missing-ids, bad-signature, one-customer, no-pass)", name)
		}
		if !slices.ContainsFunc(picked, func(k floodKind) bool { return k.name == name }) {
			picked = append(picked, floodKinds[i])
		}
	}
	return picked, nil
}

// floodLua is the script of both wrk processes of a round, so that the buyers' and the
// flood's counting cost the same in every round. $MODE says what each request is:
//   - order: a new order of one unit of $PRODUCT, with its own Idempotency-Key;
//   - missing: the same for a random product id far above any the run creates;
//   - forged: an order of $PRODUCT whose bearer token is $FORGED (a token's header and claims
//     and a dot) followed by a random signature of as many characters as a real one, its last
//     character $FORGED_LAST (it carries bits a decoder may require to be zero): a token of a
//     known kid whose signature is bad, a new one each time;
//   - otherwise wrk's own request: a GET of the URL it was given, with its -H headers.
//
// With $TOKENS, a file of bearer tokens one a line, every order carries one of them at random;
// without, the body names a customer of its own (body mode). Keys start with $KEYPREFIX,
// unique to the process, then the thread, a counter and randomness. With $DELAY_MS, each
// connection waits that long before each request. It prints the answers by status
// (`wrk-status`), as statusLua does.
var floodLua = wrkScript(`
local mode = os.getenv("MODE") or "get"
local product = os.getenv("PRODUCT")
local prefix = os.getenv("KEYPREFIX") or "k"
local pause = tonumber(os.getenv("DELAY_MS") or "0")
local forged = os.getenv("FORGED") or ""
local forgedLast = os.getenv("FORGED_LAST") or ""
local tokens = {}
if os.getenv("TOKENS") then
  for line in io.lines(os.getenv("TOKENS")) do
    if line ~= "" then table.insert(tokens, line) end
  end
end
local b64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
if pause > 0 then
  function delay() return pause end
end
-- signature returns n random base64url characters and the fixed last one.
local function signature(n)
  local s = {}
  for i = 1, n do
    local j = math.random(1, 64)
    s[i] = b64:sub(j, j)
  end
  return table.concat(s) .. forgedLast
end
if mode == "order" or mode == "missing" or mode == "forged" then
  function request()
    local key = newKey(prefix)
    local id = product
    if mode == "missing" then
      id = string.format("7%012d", math.random(0, 999999999))
    end
    local headers = {["Content-Type"] = "application/json", ["Idempotency-Key"] = key}
    local body = string.format('{"items":[{"product_id":%s,"quantity":1}]}', id)
    if mode == "forged" then
      headers["Authorization"] = "Bearer " .. forged .. signature(85)
    elseif #tokens > 0 then
      headers["Authorization"] = "Bearer " .. tokens[math.random(1, #tokens)]
    else
      body = string.format('{"customer_id":"%s","items":[{"product_id":%s,"quantity":1}]}', key, id)
    end
    return wrk.format("POST", "/v1/orders", headers, body)
  end
end
function response(status, headers, body)
  countStatus(status)
end
function done(summary, latency, requests)
  printStatuses()
end
`)

// floodRound is what one round measured.
type floodRound struct {
	kind   string
	round  int // 1-based; 0 is the warm-up
	buyers wrkResult
	flood  wrkResult
}

// confirmed is the buyers' confirmed orders per second over the round.
func (r floodRound) confirmed() float64 { return r.buyers.perSecond(http.StatusCreated) }

// floodBench runs the -flood benchmark and writes flood.md.
func (h *harness) floodBench(ctx context.Context, o FloodOptions) error {
	kinds, err := pickFloodKinds(o.Kinds)
	if err != nil {
		return err
	}
	dir := filepath.Join(h.Out, "flood")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	identity, err := cluster.NewIdentity(dir)
	if err != nil {
		return err
	}
	creds, err := writeFloodCredentials(dir, identity)
	if err != nil {
		return err
	}
	c, err := h.startClusterHA(ctx, "flood", false, identity)
	if err != nil {
		return err
	}
	defer c.Close()
	script := filepath.Join(c.Dir, "flood.lua")
	if err := os.WriteFile(script, []byte(floodLua), 0o644); err != nil {
		return err
	}
	hot, err := c.CreateProduct(ctx, "FLOOD-HOT-"+strconv.FormatInt(time.Now().UnixNano(), 36), throughputStock)
	if err != nil {
		return err
	}
	creds.hot, creds.admin = hot, c.Token
	if creds.lined, err = linedFloodProduct(ctx, c, kinds); err != nil {
		return err
	}
	// The buyers are in the sale already: each replica has verified their tokens once, as it
	// would have by the time a flood starts. A buyer it has not would be checked in the flood's
	// round, and, behind the one address every wrk connection comes from, wait out the forged
	// tokens' refusals (the limit by address spares only tokens verified before).
	began := time.Now()
	if err := verifyOnEveryReplica(ctx, c, creds.buyers); err != nil {
		return err
	}
	h.Printf("[flood] every replica verified the %d buyers' tokens in %v\n", floodBuyerCustomers, time.Since(began).Round(100*time.Millisecond))
	dbURL := c.DatabaseURL
	h.Printf("[flood] seeding product %d with %d past orders in %s\n", hot, o.Orders, c.Database)
	began = time.Now()
	if err := seedPastOrders(ctx, dbURL, hot, o.Orders, func(done int) {
		h.Printf("[flood]   %d of %d orders written (%v)\n", done, o.Orders, time.Since(began).Round(time.Second))
	}); err != nil {
		return err
	}
	h.Printf("[flood] seeded in %v; %d replicas, %d buyers beside %d flooding connections, rounds of %v\n",
		time.Since(began).Round(time.Second), h.Cluster.Replicas, o.Buyers, o.Conns, o.Round)

	runRound := func(k floodKind, n int, d time.Duration) (floodRound, error) {
		label := fmt.Sprintf("round%d-%s", n, k.name)
		if n == 0 {
			label = "warm-up-" + k.name
		}
		buyers := wrkJob{name: "buyers", conns: o.Buyers, threads: 2, script: script,
			env: []string{"MODE=order", "PRODUCT=" + strconv.FormatInt(hot, 10), fmt.Sprintf("KEYPREFIX=b%d%s", n, k.name), "TOKENS=" + creds.buyers}}
		flood := floodJob(k, script, o.Conns, creds, n)
		if o.Rate > 0 {
			flood.env = append(flood.env, "DELAY_MS="+strconv.Itoa(max(1, int(float64(o.Conns)*1000/o.Rate))))
		}
		res, err := runWrkJobs(ctx, h.Wrk, c.Dir, label, c.Front, d, buyers, flood)
		if err != nil {
			return floodRound{}, err
		}
		// A statement a round left running (an admin audit's recount, which outlives the wrk
		// connection that asked for it until the request's deadline) must not weigh on the next
		// round's buyers: each round measures its own flood.
		if waited, err := waitStatementsDone(ctx, dbURL, time.Now(), floodQuiesce); err != nil {
			return floodRound{}, err
		} else if waited > time.Second {
			h.Printf("[flood] waited %v for the statements of %s to end\n", waited.Round(100*time.Millisecond), label)
		}
		return floodRound{kind: k.name, round: n, buyers: res[0], flood: res[1]}, nil
	}
	// One unmeasured round of each kind first: connections, pools and the seeded rows' pages.
	for _, k := range kinds {
		r, err := runRound(k, 0, floodWarmUp)
		if err != nil {
			return err
		}
		h.Printf("[flood] warm-up, %s: buyers %.0f confirmed/s; flood %s\n", k.name, r.confirmed(), answersOf(r.flood.statuses))
	}
	var rounds []floodRound
	for n := 1; n <= o.Rounds; n++ {
		for _, k := range kinds {
			r, err := runRound(k, n, o.Round)
			if err != nil {
				return err
			}
			h.Printf("[flood] round %d/%d, %-11s buyers %6.0f confirmed/s (%s); flood %6.0f answers/s (%s)\n", n, o.Rounds, k.name+":",
				r.confirmed(), answersOf(r.buyers.statuses), r.flood.perSecond(0), answersOf(r.flood.statuses))
			rounds = append(rounds, r)
		}
	}
	summary := summariseFlood(kinds, rounds)
	report := floodReport(h.Cluster.Replicas, o, hot, summary, rounds)
	h.Printf("\n%s\n", report)
	path := filepath.Join(h.Out, "flood.md")
	if err := os.WriteFile(path, []byte(report), 0o644); err != nil {
		return err
	}
	h.Printf("written to %s\n", path)
	if failed := floodChecks(summary); len(failed) > 0 {
		for _, f := range failed {
			h.Printf("FAIL: %s\n", f)
		}
		return env.ErrFailed
	}
	h.Printf("PASS: every flood with a target left the sale within it\n")
	return nil
}

// floodWarmUp is the length of each kind's unmeasured round.
const floodWarmUp = 2 * time.Second

// floodQuiesce bounds the wait for a round's statements to end; past it the run fails, since
// the next round would not measure what it says.
const floodQuiesce = 30 * time.Second

// waitStatementsDone waits until no statement that began before since is still running in the
// database at dbURL, and returns how long that took. It fails after within.
func waitStatementsDone(ctx context.Context, dbURL string, since time.Time, within time.Duration) (time.Duration, error) {
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return 0, fmt.Errorf("connect to watch the round's statements: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	began := time.Now()
	for {
		var left int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'active' AND query_start < $1`, since).Scan(&left)
		if err != nil {
			return 0, fmt.Errorf("watch the round's statements: %w", err)
		}
		if left == 0 {
			return time.Since(began), nil
		}
		if time.Since(began) > within {
			return 0, fmt.Errorf("%d statements of the last round still run after %v", left, within)
		}
		if err := clock.Sleep(ctx, 50*time.Millisecond); err != nil {
			return 0, err
		}
	}
}

// floodCredentials are what the floods and the buyers send: files of tokens one a line, and
// a forged token's fixed part.
type floodCredentials struct {
	buyers  string // the buyers' tokens
	missing string // the missing-ids flood's
	one     string // the one customer's token, alone
	// forged is a buyer's token's header, claims and dot; forgedLast the last character of
	// its signature.
	forged, forgedLast string
	hot                int64  // the hot product
	lined              int64  // the product with a line of the no-pass flood (0: not flooded)
	admin              string // the admin token
}

// writeFloodCredentials mints the tokens of the benchmark's customers into files in dir.
func writeFloodCredentials(dir string, id *cluster.Identity) (floodCredentials, error) {
	c := floodCredentials{buyers: filepath.Join(dir, "buyers.tokens"), missing: filepath.Join(dir, "missing.tokens"),
		one: filepath.Join(dir, "one.tokens")}
	for _, f := range []struct {
		path, prefix string
		n            int
	}{{c.buyers, "buyer-", floodBuyerCustomers}, {c.missing, "missing-", floodMissingIDs}, {c.one, "flooder", 1}} {
		lines := make([]string, f.n)
		for i := range lines {
			customer := f.prefix
			if f.n > 1 {
				customer += strconv.Itoa(i)
			}
			t, err := id.Token(customer)
			if err != nil {
				return floodCredentials{}, fmt.Errorf("mint a token for %s: %w", customer, err)
			}
			lines[i] = t
		}
		if err := os.WriteFile(f.path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
			return floodCredentials{}, err
		}
	}
	t, err := id.Token("buyer-0")
	if err != nil {
		return floodCredentials{}, err
	}
	dot := strings.LastIndexByte(t, '.')
	c.forged, c.forgedLast = t[:dot+1], t[len(t)-1:]
	return c, nil
}

// verifyOnEveryReplica has each replica of c verify every token in the file at tokens, with
// a read of the token's customer's orders sent to the replica itself.
func verifyOnEveryReplica(ctx context.Context, c *cluster.Cluster, tokens string) error {
	raw, err := os.ReadFile(tokens)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(8)
	for _, r := range c.Replicas {
		for tok := range strings.FieldsSeq(string(raw)) {
			g.Go(func() error {
				req, err := http.NewRequestWithContext(gctx, http.MethodGet, r.Base()+"/v1/orders?limit=1", nil)
				if err != nil {
					return err
				}
				req.Header.Set("Authorization", "Bearer "+tok)
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					return fmt.Errorf("verify a buyer's token on %s: %w", r.Name, err)
				}
				body, _ := io.ReadAll(res.Body)
				res.Body.Close()
				if res.StatusCode != http.StatusOK {
					return fmt.Errorf("verify a buyer's token on %s: status %d: %s", r.Name, res.StatusCode, body)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// floodJob is the wrk process that floods with kind k.
func floodJob(k floodKind, script string, conns int, c floodCredentials, round int) wrkJob {
	j := wrkJob{name: "flood", conns: conns, threads: 1, script: script, env: []string{"MODE=get"}}
	audit := fmt.Sprintf("/v1/products/%d/audit", c.hot)
	product := "PRODUCT=" + strconv.FormatInt(c.hot, 10)
	switch k.name {
	case floodBaseline:
		j.path = "/healthz"
	case "audit":
		j.path = audit
	case "audit-admin":
		j.path, j.headers = audit, []string{"Authorization: Bearer " + c.admin}
	case "missing-ids":
		j.env = []string{"MODE=missing", fmt.Sprintf("KEYPREFIX=m%d", round), "TOKENS=" + c.missing}
	case "bad-signature":
		j.env = []string{"MODE=forged", product, fmt.Sprintf("KEYPREFIX=f%d", round), "FORGED=" + c.forged, "FORGED_LAST=" + c.forgedLast}
	case "one-customer":
		j.env = []string{"MODE=order", product, fmt.Sprintf("KEYPREFIX=o%d", round), "TOKENS=" + c.one}
	case noPassKind:
		j.env = noPassEnv(c, round)
	}
	return j
}

// seedPastOrders writes n confirmed orders of one unit of product straight into the database
// at dbURL, a day old, in batches (progress is called after each), and adds n to the product's
// initial stock so that received − sold = stock still holds. Then it vacuums and analyzes the
// two tables, as autovacuum would have long since done to a production database.
func seedPastOrders(ctx context.Context, dbURL string, product int64, n int, progress func(done int)) error {
	if n == 0 {
		return nil
	}
	conn, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("connect to seed orders: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	const batch = 100_000
	for from := 1; from <= n; from += batch {
		to := min(n, from+batch-1)
		_, err := conn.Exec(ctx, `
			WITH o AS (
			  INSERT INTO orders (id, customer_id, status, created_at)
			  SELECT gen_random_uuid(), 'seed-' || g, 'confirmed', now() - interval '1 day'
			    FROM generate_series($1::bigint, $2::bigint) g
			  RETURNING id)
			INSERT INTO order_items (order_id, product_id, quantity) SELECT id, $3, 1 FROM o`, from, to, product)
		if err != nil {
			return fmt.Errorf("seed orders %d–%d: %w", from, to, err)
		}
		progress(to)
	}
	if _, err := conn.Exec(ctx, `UPDATE products SET initial_stock = initial_stock + $1 WHERE id = $2`, n, product); err != nil {
		return fmt.Errorf("seed orders: raise the initial stock: %w", err)
	}
	if _, err := conn.Exec(ctx, `VACUUM (ANALYZE) orders, order_items`); err != nil {
		return fmt.Errorf("seed orders: vacuum: %w", err)
	}
	return nil
}

// floodLine is one kind's figures over its rounds.
type floodLine struct {
	kind      floodKind
	confirmed float64 // median of the buyers' confirmed/s
	ratio     float64 // confirmed ÷ the healthz flood's confirmed (NaN without a baseline)
	low, high float64 // the lowest and highest ratio of a round to the healthz round of its turn
	floodRate float64 // median of the flood's answers/s
	flood     map[int]int
	buyers    map[int]int // the buyers' answers, all rounds
}

// summariseFlood reduces the rounds to one line per kind, in kinds' order.
func summariseFlood(kinds []floodKind, rounds []floodRound) []floodLine {
	baseline := map[int]float64{}
	var base []float64
	for _, r := range rounds {
		if r.kind == floodBaseline {
			baseline[r.round] = r.confirmed()
			base = append(base, r.confirmed())
		}
	}
	baseMedian := median(base)
	var lines []floodLine
	for _, k := range kinds {
		l := floodLine{kind: k, flood: map[int]int{}, buyers: map[int]int{}, low: -1}
		var confirmed, floodRates, ratios []float64
		for _, r := range rounds {
			if r.kind != k.name {
				continue
			}
			confirmed = append(confirmed, r.confirmed())
			floodRates = append(floodRates, r.flood.perSecond(0))
			addStatuses(l.flood, r.flood.statuses, r.flood.failed)
			addStatuses(l.buyers, r.buyers.statuses, r.buyers.failed)
			if b := baseline[r.round]; b > 0 {
				ratio := r.confirmed() / b
				ratios = append(ratios, ratio)
				if l.low < 0 || ratio < l.low {
					l.low = ratio
				}
				l.high = max(l.high, ratio)
			}
		}
		l.confirmed, l.floodRate = median(confirmed), median(floodRates)
		// The median of the rounds' ratios, each to the healthz round of its own turn: a
		// shared machine drifts over a run, and a turn's rounds run a few seconds apart.
		l.ratio = l.confirmed / baseMedian
		if len(ratios) > 0 {
			l.ratio = median(ratios)
		}
		lines = append(lines, l)
	}
	return lines
}

// addStatuses adds answers by status into sum, and socket errors under 0 (no answer).
func addStatuses(sum, statuses map[int]int, failed int) {
	for st, n := range statuses {
		sum[st] += n
	}
	if failed > 0 {
		sum[0] += failed
	}
}

// floodChecks returns the targets missed, and a baseline that measured nothing.
func floodChecks(lines []floodLine) []string {
	var failed []string
	for _, l := range lines {
		switch {
		case l.kind.name == floodBaseline && !(l.confirmed > 0):
			failed = append(failed, "the buyers confirmed nothing under the healthz flood: no baseline to compare with")
		case l.kind.target > 0 && !(l.ratio >= l.kind.target):
			failed = append(failed, fmt.Sprintf("under the %s flood the sale confirmed %.0f orders/s, %.2f× its rate under the healthz flood (target ≥ %.1f×)",
				l.kind.name, l.confirmed, l.ratio, l.kind.target))
		}
	}
	return failed
}

// floodReport renders the benchmark as markdown (flood.md).
func floodReport(replicas int, f FloodOptions, hot int64, lines []floodLine, rounds []floodRound) string {
	var b strings.Builder
	fmt.Fprintf(&b, "One run: %d replicas behind HAProxy, verifying customer tokens (token mode, the default limits). In every round, %d wrk connections buy product %d (stock %d, %d past orders seeded) "+
		"in a closed loop, each order a fresh Idempotency-Key and the token of one of %d customers at random, beside %d wrk connections flooding. Rounds of %v, %d of each flood, taking turns "+
		"after a %v warm-up of each; rates are medians over the rounds; a ratio is the median over the turns of each round's rate to the healthz round of its turn.",
		replicas, f.Buyers, hot, throughputStock, f.Orders, floodBuyerCustomers, f.Conns, f.Round, f.Rounds, floodWarmUp)
	if f.Rate > 0 {
		fmt.Fprintf(&b, " Every flood was paced to at most %.0f requests/s (`-flood-rate`).", f.Rate)
	}
	b.WriteString("\n\n")
	b.WriteString("| flood | buyers' confirmed/s | ÷ healthz flood | rounds | target | flood answers/s | the flood's answers | the buyers' answers |\n")
	b.WriteString("| --- | ---: | ---: | --- | --- | ---: | --- | --- |\n")
	for _, l := range lines {
		target := "baseline"
		if l.kind.name != floodBaseline {
			target = "for information"
			if l.kind.target > 0 {
				target = fmt.Sprintf("≥ %.1f×: %s", l.kind.target, targetVerdict(l.ratio, l.kind.target))
			}
		}
		span := "–"
		if l.low >= 0 && l.kind.name != floodBaseline {
			span = fmt.Sprintf("%.2f–%.2f×", l.low, l.high)
		}
		// The ratio shown is the one judged: the median of each turn's ratio, not the ratio of
		// the medians, which pairs rounds that did not run side by side.
		shown := "**1.00×**"
		if l.kind.name != floodBaseline {
			shown = fmt.Sprintf("**%.2f×**", l.ratio)
		}
		fmt.Fprintf(&b, "| %s | %.0f | %s | %s | %s | %.0f | %s | %s |\n", l.kind.about, l.confirmed, shown,
			span, target, l.floodRate, answersOf(l.flood), answersOf(l.buyers))
	}
	b.WriteString("\nRounds, in the order they ran:\n\n| round | flood | buyers' confirmed/s | buyers p50 / p99 | flood answers/s | flood p50 / p99 |\n| --- | --- | ---: | --- | ---: | --- |\n")
	for _, r := range rounds {
		fmt.Fprintf(&b, "| %d | %s | %.0f | %.1f / %.1f ms | %.0f | %.1f / %.1f ms |\n", r.round, r.kind, r.confirmed(),
			r.buyers.p50, r.buyers.p99, r.flood.perSecond(0), r.flood.p50, r.flood.p99)
	}
	b.WriteString("\nThe p50 / p99 are wrk's, over all answers of the process. The ratio range is each round's ratio to the healthz round of its turn.\n")
	return b.String()
}
