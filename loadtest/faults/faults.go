package faults

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stocksvc/stocksvc/internal/clock"
	"github.com/stocksvc/stocksvc/internal/stock/stocklock"
	"github.com/stocksvc/stocksvc/loadtest/cluster"
	"github.com/stocksvc/stocksvc/loadtest/model"
)

// scenario is one fault drill.
type scenario struct {
	name  string
	about string
	// Servers of the run's own, for faults that stop them, and proxies between the victim
	// replica and a server, for faults that hit one replica's connections.
	ownRedis, ownPostgres     bool
	proxyPostgres, proxyRedis bool
	// postgresHA runs the database on a Patroni topology of the run's own (ha.go), and
	// sentinel Redis under Sentinel of the run's own.
	postgresHA, sentinel bool
	// redlock is how many Redlock nodes of its own the scenario needs at least (-redlock
	// may ask for more); 0 runs on one Redis unless -redlock says otherwise.
	redlock int
	// expected is about how long the fault lasts, and extraLoad how many seconds of base-rate
	// load it adds: together they size the hot product's stock.
	expected  time.Duration
	extraLoad float64
	// buyers is how many closed-loop buyers of the hot product run beside the drill's load
	// (client.Client.Buy: a 429 ends an order, Go's own resends are on); 0 runs none. With
	// buyers, the hot product has stock enough never to sell out.
	buyers int
	// lockWait, when set, is the replicas' STOCKSVC_LOCK_WAIT instead of -lock-wait.
	lockWait time.Duration
	// holds adds a product sold with a short hold (issue #21, holds.go) whose buyers pay,
	// cancel or walk away.
	holds bool
	// inject causes the fault and returns once it has healed.
	inject func(ctx context.Context, d *drillEnv) error
	// check judges what only this scenario demands (e.g. no failed request); it returns
	// failures and notes.
	check func(d *drillEnv, ops []*model.Op, a availability) (failed, notes []string)
}

// scenarios returns every drill, by name, in the order they run with -fault all.
func scenarios() []scenario {
	return []scenario{
		{name: "pause-replica", about: "SIGSTOP a replica mid-purchase for twice the lock TTL, then SIGCONT; three times", expected: 15 * time.Second, inject: pauseReplica},
		{name: "kill-replica", about: "SIGKILL a replica mid-sale, restart it", expected: 5 * time.Second, inject: killReplica},
		{name: "kill-replica-rush", about: "48 closed-loop buyers (a 429 ends an order, Go's own resends on), lock wait 1 s: SIGKILL a replica the moment one of its writes has committed, restart it",
			proxyPostgres: true, expected: 5 * time.Second, buyers: 48, lockWait: time.Second, inject: killAtCommit},
		{name: "rolling-restart", about: "SIGTERM each replica in turn and restart it; no request may fail",
			ownPostgres: true, expected: 25 * time.Second, inject: rollingRestart, check: noFailedRequests},
		{name: "pause-redis", about: "SIGSTOP Redis for twice the lock TTL, then SIGCONT; product reads meanwhile must be answered 200",
			ownRedis: true, expected: 5 * time.Second, inject: pauseRedis, check: readsWhileRedisHung},
		{name: "restart-redis", about: "kill Redis and start it empty (no persistence)", ownRedis: true, expected: 3 * time.Second, inject: restartRedis},
		{name: "restart-redlock-node", about: "Redlock over 3 nodes (or -redlock N): kill one node mid-sale and start it again empty",
			redlock: 3, expected: 2 * time.Second, inject: restartRedlockNode, check: noFenceCatches},
		{name: "expire-locks", about: "delete the product locks under their holders, every 20–80 ms for 5 s", expected: 5 * time.Second, inject: expireLocks},
		{name: "restart-postgres", about: "stop Postgres immediately (no checkpoint), start it again", ownPostgres: true, expected: 8 * time.Second, inject: restartPostgres},
		{name: "pg-reset-at-commit", about: "cut one replica's Postgres connections at commit (answer lost after the commit), for 6 s",
			proxyPostgres: true, expected: 6 * time.Second, inject: pgResetAtCommit},
		{name: "redis-latency", about: "400±200 ms on one replica's Redis answers for 6 s", proxyRedis: true, expected: 6 * time.Second, inject: redisLatency},
		{name: "redis-partition", about: "one replica's Redis connections go silent for 5 s", proxyRedis: true, expected: 5 * time.Second, inject: redisPartition},
		{name: "burst", about: "10× the arrival rate for 2 s", expected: 2 * time.Second, extraLoad: 20, inject: burst},
		{name: "slowloris", about: "200 connections sending headers and bodies a byte at a time, for 8 s", expected: 8 * time.Second,
			inject: slowloris, check: keptSelling},
		{name: "bad-input", about: "malformed requests beside the sale for 5 s: 4xx, never 5xx, and selling goes on", expected: 5 * time.Second,
			inject: badInput, check: badInputAnswers},
		{name: "holds-expiry", about: "holds of 3 s, buyers who pay, cancel or walk away: SIGKILL a replica and SIGSTOP Redis for twice the lock TTL while holds expire; every hold ends once, its units back once",
			ownRedis: true, holds: true, expected: 6 * time.Second, inject: holdsExpiry, check: holdsChecked},
		{name: "pg-failover", about: "Patroni, synchronous_mode_strict: SIGKILL the primary's Postgres mid-sale; the synchronous standby takes over",
			postgresHA: true, expected: 8 * time.Second, inject: pgFailover, check: haReport},
		{name: "pg-switchover", about: "Patroni, synchronous_mode_strict: a planned switchover (REST POST /switchover) to the synchronous standby mid-sale",
			postgresHA: true, expected: 8 * time.Second, inject: pgSwitchover, check: haReport},
		{name: "pg-sync-standby-lost", about: "Patroni, synchronous_mode_strict: SIGKILL the synchronous standby (agent and Postgres) mid-sale, then the primary's Postgres: the other standby must have every acknowledged order",
			postgresHA: true, expected: 12 * time.Second, inject: pgSyncStandbyLost, check: haReport},
		{name: "redis-sentinel-failover", about: "Redis under Sentinel (a master, a replica, three sentinels): SIGKILL the master mid-sale; the sentinels promote the replica; the old master comes back empty",
			sentinel: true, expected: 5 * time.Second, inject: redisSentinelFailover, check: haReport},
		killReplicaOpening, pauseRedisOpening, // line.go
	}
}

// pickScenarios resolves -fault: a comma-separated list of names, or "all".
func pickScenarios(spec string) ([]scenario, error) {
	all := scenarios()
	if spec == "all" {
		return all, nil
	}
	var out []scenario
	for _, name := range strings.Split(spec, ",") {
		i := slices.IndexFunc(all, func(s scenario) bool { return s.name == strings.TrimSpace(name) })
		if i < 0 {
			var names []string
			for _, s := range all {
				names = append(names, s.name)
			}
			return nil, fmt.Errorf("unknown fault %q (want all, or some of %s)", name, strings.Join(names, ", "))
		}
		out = append(out, all[i])
	}
	return out, nil
}

// pauseReplica stops the victim three times, each time for twice the lock TTL and in the
// middle of purchases, with a second between: a holder that wakes after its lease ran out
// must find its writes refused.
func pauseReplica(ctx context.Context, d *drillEnv) error {
	r := d.c.Replicas[d.victim]
	pause := 2 * d.plan.lockTTL
	opts, err := redis.ParseURL(d.firstRedisURL())
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	caught := 0
	defer func() { d.note("%d of 3 pauses caught %s holding a product lock", caught, r.Name) }()
	for i := range 3 {
		if i > 0 {
			if err := clock.Sleep(ctx, time.Second); err != nil {
				return err
			}
		}
		d.primeVictim(ctx, r)
		start := d.rec.Now()
		d.event("SIGSTOP %s for %v (lock TTL %v)", r.Name, pause, d.plan.lockTTL)
		r.Proc.Signal(syscall.SIGSTOP)
		held, err := d.heldByPaused(ctx, rdb)
		if held {
			caught++
			d.event("%s was holding a product lock: its lease runs out while it sleeps", r.Name)
		}
		if err == nil {
			err = clock.Sleep(ctx, pause-d.plan.lockTTL/2)
		}
		r.Proc.Signal(syscall.SIGCONT)
		d.event("SIGCONT %s", r.Name)
		d.faultWindow(start)
		if err != nil {
			return err
		}
	}
	return nil
}

func killReplica(ctx context.Context, d *drillEnv) error {
	r := d.c.Replicas[d.victim]
	d.primeVictim(ctx, r)
	d.event("SIGKILL %s", r.Name)
	r.Proc.Signal(syscall.SIGKILL)
	<-r.Proc.Done()
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return err
	}
	return d.restart(ctx, r)
}

// killAtCommit SIGKILLs the victim the moment Postgres has committed one of its writes — a
// batch of orders, mostly — before the victim hears of it, so that the batch is sold and its
// buyers never answered by it (issue #18 item 11: the moment the kill of a random moment hit
// in a quarter of the runs). Their requests, sent again, reach replicas that must not
// refuse them. Without a commit point within commitWait it kills anyway, and notes so.
func killAtCommit(ctx context.Context, d *drillEnv) error {
	r := d.c.Replicas[d.victim]
	killed := make(chan time.Duration, 1)
	d.pgProxy.Cut.AtNextCommit(func() {
		r.Proc.Signal(syscall.SIGKILL)
		killed <- d.rec.Now()
	})
	select {
	case at := <-killed:
		d.event("SIGKILL %s at a commit point (%.3fs): its write committed, its answers not sent", r.Name, at.Seconds())
	case <-time.After(commitWait):
		if !d.pgProxy.Cut.CancelNextCommit() { // a commit point came meanwhile
			at := <-killed
			d.event("SIGKILL %s at a commit point (%.3fs): its write committed, its answers not sent", r.Name, at.Seconds())
			break
		}
		r.Proc.Signal(syscall.SIGKILL)
		d.event("SIGKILL %s: no commit point within %v", r.Name, commitWait)
		d.note("%s made no commit within %v; it was killed at a random moment instead", r.Name, commitWait)
	case <-ctx.Done():
		d.pgProxy.Cut.CancelNextCommit()
		return ctx.Err()
	}
	<-r.Proc.Done()
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return err
	}
	return d.restart(ctx, r)
}

// commitWait bounds how long killAtCommit waits for the victim to commit.
const commitWait = 5 * time.Second

// rollingRestart stops each replica the way an orchestrator does (SIGTERM, wait) and starts
// it again, waiting until the balancer has it back before going on to the next.
// heldByPaused watches the product locks for half the lock TTL after the victim was
// stopped: a lock that keeps the same token and is not refreshed (a holder refreshes every
// third of the TTL) belongs to the stopped replica. It returns after half the TTL.
func (d *drillEnv) heldByPaused(ctx context.Context, rdb *redis.Client) (bool, error) {
	keys := []string{stocklock.Name(d.c.Prefix, d.hot), stocklock.Name(d.c.Prefix, d.scarce)}
	type seen struct {
		token string
		ttl   time.Duration
	}
	look := func() []seen {
		out := make([]seen, len(keys))
		for i, k := range keys {
			out[i].token, _ = rdb.Get(ctx, k).Result()
			out[i].ttl, _ = rdb.PTTL(ctx, k).Result()
		}
		return out
	}
	before := look()
	if err := clock.Sleep(ctx, d.plan.lockTTL/2); err != nil {
		return false, err
	}
	after := look()
	for i := range keys {
		if before[i].token != "" && before[i].token == after[i].token && after[i].ttl < before[i].ttl-d.plan.lockTTL/3 {
			return true, nil
		}
	}
	return false, nil
}

// primeVictim sends a stream of hot orders straight to replica r — one every 4 ms for 100 ms
// — and returns in the middle of it, so that a fault that follows at once finds r in the
// middle of purchases (queued for the product's lock, holding it, mid-transaction or
// committing) rather than idle, as it mostly is at the drill's rate. The orders are recorded
// like any other.
func (d *drillEnv) primeVictim(ctx context.Context, r *cluster.Replica) {
	base := fmt.Sprintf("http://127.0.0.1:%d", r.Port)
	stream, cancel := context.WithCancel(ctx)
	defer cancel()
	d.client.Go(func() {
		tick := time.NewTicker(4 * time.Millisecond)
		defer tick.Stop()
		for range 25 {
			d.client.Go(func() { d.client.OrderVia(context.WithoutCancel(ctx), base, d.hot, 1) })
			select {
			case <-stream.Done():
				return
			case <-tick.C:
			}
		}
	})
	_ = clock.Sleep(ctx, d.rng.Between(50*time.Millisecond, 90*time.Millisecond))
}

func rollingRestart(ctx context.Context, d *drillEnv) error {
	for _, r := range d.c.Replicas {
		d.event("SIGTERM %s", r.Name)
		if err := r.Proc.Stop(30 * time.Second); err != nil {
			d.fail("%s: %v", r.Name, err)
		}
		if err := r.Proc.Err(); err != nil {
			d.fail("%s exited with %v after SIGTERM", r.Name, err)
		}
		d.event("%s stopped", r.Name)
		if err := d.c.StartReplica(r); err != nil {
			return err
		}
		if err := d.c.WaitReplica(ctx, r); err != nil {
			return err
		}
		if err := waitBalancerUp(ctx, d.c.Stats, r.Name, 30*time.Second); err != nil {
			return err
		}
		d.event("%s back in the balancer", r.Name)
	}
	return nil
}

// pauseRedis stops the run's Redis for twice the lock TTL, and meanwhile reads the hot product
// a few times (redishang.go): reads must go on from Postgres while Redis hangs.
func pauseRedis(ctx context.Context, d *drillEnv) error {
	pause := 2 * d.plan.lockTTL
	d.event("SIGSTOP redis for %v (lock TTL %v)", pause, d.plan.lockTTL)
	if err := d.c.Redis.Pause(); err != nil {
		return err
	}
	probed := make(chan []hangRead, 1)
	go func() { probed <- d.probeReads(ctx) }()
	err := clock.Sleep(ctx, pause)
	if rerr := d.c.Redis.Resume(); rerr != nil {
		err = errors.Join(err, rerr)
	}
	resumed := d.rec.Now()
	d.event("SIGCONT redis")
	reads := <-probed
	d.mu.Lock()
	d.hang = &hangProbe{reads: reads, resumed: resumed}
	d.mu.Unlock()
	return err
}

func restartRedis(ctx context.Context, d *drillEnv) error {
	d.event("SIGKILL redis")
	d.c.Redis.Kill()
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return err
	}
	if err := d.c.Redis.Start(ctx); err != nil {
		return err
	}
	d.event("redis started again, empty")
	return nil
}

// expireLocks deletes the products' lock keys as if their leases had run out early. A DEL
// that removed a key removed a lock someone held.
func expireLocks(ctx context.Context, d *drillEnv) error {
	opts, err := redis.ParseURL(d.firstRedisURL())
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	keys := []string{stocklock.Name(d.c.Prefix, d.hot), stocklock.Name(d.c.Prefix, d.scarce)}
	d.event("deleting the lock keys for 5s")
	deadline := time.Now().Add(5 * time.Second)
	var deleted int64
	for time.Now().Before(deadline) {
		n, err := rdb.Del(ctx, keys...).Result()
		if err == nil {
			deleted += n
		}
		if err := clock.Sleep(ctx, d.rng.Between(20*time.Millisecond, 80*time.Millisecond)); err != nil {
			return err
		}
	}
	d.event("stopped deleting: %d held locks deleted", deleted)
	d.note("%d held locks deleted under their holders", deleted)
	if deleted == 0 {
		d.fail("no lock was held when deleted: the drill did not test premature expiry")
	}
	return nil
}

func restartPostgres(ctx context.Context, d *drillEnv) error {
	d.event("postgres: immediate stop")
	d.c.Postgres.Crash()
	if err := clock.Sleep(ctx, time.Second); err != nil {
		return err
	}
	if err := d.c.Postgres.Start(ctx); err != nil {
		return err
	}
	d.event("postgres started again (crash recovery)")
	return nil
}

func pgResetAtCommit(ctx context.Context, d *drillEnv) error {
	cut := d.pgProxy.Cut
	d.event("cutting %s's Postgres connections at 30%% of its commits for 6s", d.c.Replicas[d.victim].Name)
	cut.Arm(0.3)
	err := clock.Sleep(ctx, 6*time.Second)
	cut.Disarm()
	d.event("stopped cutting: %d of %d commits cut", cut.Cuts(), cut.Commits())
	d.note("%d of %d commits on %s cut after the server committed", cut.Cuts(), cut.Commits(), d.c.Replicas[d.victim].Name)
	if cut.Cuts() == 0 {
		d.fail("no commit was cut: the drill did not test lost commit answers")
	}
	return err
}

func redisLatency(ctx context.Context, d *drillEnv) error {
	d.event("%s's Redis answers delayed 400±200ms for 6s", d.c.Replicas[d.victim].Name)
	if err := d.rdProxy.Add(`{"name":"latency","type":"latency","stream":"downstream","attributes":{"latency":400,"jitter":200}}`); err != nil {
		return err
	}
	err := clock.Sleep(ctx, 6*time.Second)
	d.rdProxy.Clear(context.WithoutCancel(ctx))
	d.event("latency removed")
	return err
}

func redisPartition(ctx context.Context, d *drillEnv) error {
	d.event("%s's Redis connections silent for 5s", d.c.Replicas[d.victim].Name)
	for _, stream := range []string{"up", "down"} {
		if err := d.rdProxy.Add(`{"name":"silence_` + stream + `","type":"timeout","stream":"` + stream + `stream","attributes":{"timeout":0}}`); err != nil {
			return err
		}
	}
	err := clock.Sleep(ctx, 5*time.Second)
	d.rdProxy.Clear(context.WithoutCancel(ctx))
	d.event("partition healed")
	return err
}

func burst(ctx context.Context, d *drillEnv) error {
	d.event("arrivals at 10× for 2s")
	d.load.SetFactor(10)
	err := clock.Sleep(ctx, 2*time.Second)
	d.load.SetFactor(1)
	d.event("arrivals back to 1×")
	return err
}

// noFailedRequests: through a rolling restart, every request gets an answer from a replica,
// and none is a 5xx (restart.go: those made while it ran).
func noFailedRequests(d *drillEnv, ops []*model.Op, a availability) (failed, notes []string) {
	attempts, n, kinds := failedDuring(ops, d.faults)
	if n > 0 {
		failed = append(failed, fmt.Sprintf("%d of %d requests failed during the rolling restart (%s)", n, attempts, kinds))
	}
	if outside := a.failedAttempts - n; outside > 0 {
		notes = append(notes, fmt.Sprintf("%d requests failed outside the rolling restart (not held against it)", outside))
	}
	return failed, notes
}

// waitBalancerUp waits until HAProxy's health checks have put server back in rotation.
func waitBalancerUp(ctx context.Context, statsPort int, server string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if st, err := cluster.HAProxyStatus(ctx, statsPort); err == nil && strings.HasPrefix(st[server], "UP") && !strings.Contains(st[server], "/") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("haproxy did not put %s back within %v", server, timeout)
		}
		if err := clock.Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

// restart starts replica r again after a fault stopped it, and waits until it is ready.
func (d *drillEnv) restart(ctx context.Context, r *cluster.Replica) error {
	if err := d.c.StartReplica(r); err != nil {
		return err
	}
	d.event("restarted %s", r.Name)
	if err := d.c.WaitReplica(ctx, r); err != nil {
		return err
	}
	d.event("%s ready", r.Name)
	return nil
}
