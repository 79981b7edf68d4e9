package bench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
)

// TTL is the lease every implementation takes: far longer than any critical section here, so
// that no lease ever runs out during a measurement.
const TTL = 5 * time.Second

// namespace prefixes every lock name the benchmarks use.
const namespace = "bench:"

// errGaveUp means an implementation stopped waiting while the lock was still held by someone
// else (its retry strategy ran out, or its own deadline passed). The harness then asks again,
// keeping the time of the first ask, as a caller that must have the lock would.
var errGaveUp = errors.New("bench: gave up while the lock was held")

// locker is what a worker sees of an implementation.
type locker interface {
	// acquire waits for the lock called key as the implementation waits, until ctx ends or it
	// gives up (errGaveUp), and returns the function that releases it.
	acquire(ctx context.Context, key string) (release func(context.Context) error, err error)
	// close frees what the locker holds beyond its Redis client.
	close() error
}

// Contender is one implementation in one configuration.
type Contender struct {
	// Name is short and without spaces: it names benchmarks and table rows.
	Name string
	// Settings says in words how it waits.
	Settings string
	// Peer marks the other libraries, against whose best figure ours are compared.
	Peer bool
	// Clients is how many Redis clients (and lock clients over them) the workers are spread
	// over, as if they were that many replicas of a service; worker i uses client i%Clients.
	Clients int
	// open makes the locker that the workers of one Redis client share.
	open func(rdb *redis.Client) locker
}

// Raw is the floor: SET NX PX to take the lock, and a compare-and-delete script to release it.
// It makes a single attempt and does not wait.
func Raw() Contender {
	return Contender{Name: "raw", Settings: "SET NX PX + compare-and-delete script, one attempt", Clients: 1,
		open: func(rdb *redis.Client) locker { return rawLocker{rdb: rdb} }}
}

// RawScript is Raw with the SET NX PX inside a script: it shows what running a script instead
// of a plain command costs, for the analysis.
func RawScript() Contender {
	return Contender{Name: "raw-script", Settings: "SET NX PX inside a script + compare-and-delete script", Clients: 1,
		open: func(rdb *redis.Client) locker { return rawLocker{rdb: rdb, script: true} }}
}

// Ours is package lock. wait selects Options.Wait; fenceless selects Options.Fenceless.
func Ours(name string, clients int, wait, fenceless bool) Contender {
	settings := "single attempt"
	if wait {
		settings = "Options.Wait: one line per lock in Redis, each waiter in it, grant by message"
	}
	if fenceless {
		settings += ", Fenceless"
	}
	if clients > 1 {
		settings += fmt.Sprintf(", %d clients", clients)
	}
	opt := &lock.Options{Wait: wait, Fenceless: fenceless}
	return Contender{Name: name, Settings: settings, Clients: clients,
		open: func(rdb *redis.Client) locker {
			return oursLocker{c: lock.New(rdb, lock.WithNamespace(namespace)), opt: opt}
		}}
}

// BSM is bsm/redislock with a retry strategy made afresh for every Obtain (its strategies
// count attempts, so they cannot be shared).
func BSM(name, settings string, strategy func() redislock.RetryStrategy) Contender {
	return Contender{Name: name, Settings: settings, Peer: true, Clients: 1,
		open: func(rdb *redis.Client) locker { return bsmLocker{c: redislock.New(rdb), strategy: strategy} }}
}

// Redsync is go-redsync/redsync over one go-redis pool, with a fresh Mutex per acquisition (a
// Mutex remembers its value, so it serves one holder at a time).
func Redsync(name, settings string, opts ...redsync.Option) Contender {
	return Contender{Name: name, Settings: settings, Peer: true, Clients: 1,
		open: func(rdb *redis.Client) locker {
			return redsyncLocker{rs: redsync.New(goredis.NewPool(rdb)), opts: append([]redsync.Option{redsync.WithExpiry(TTL)}, opts...)}
		}}
}

// UncontendedSet is what the uncontended benchmark compares: the floor first.
func UncontendedSet() []Contender {
	return []Contender{
		Raw(),
		RawScript(),
		Ours("ours-wait", 1, true, false),
		Ours("ours-nowait", 1, false, false),
		Ours("ours-nowait-fenceless", 1, false, true),
		BSM("redislock", "Obtain, no retry", redislock.NoRetry),
		Redsync("redsync", "defaults (one pool)"),
	}
}

// HotKeySet is what the hot-key benchmark compares: ours in two layouts, and each peer waiting
// the way its documentation suggests and with the tight polling that gave it its best p99 wait
// among the settings in Catalog.
func HotKeySet() []Contender {
	return []Contender{
		Ours("ours-1client", 1, true, false),
		Ours("ours-4clients", 4, true, false),
		BSM("redislock-exp16-256ms", "ExponentialBackoff(16ms, 256ms): its doc's recommended minimum of 16ms",
			func() redislock.RetryStrategy {
				return redislock.ExponentialBackoff(16*time.Millisecond, 256*time.Millisecond)
			}),
		BSM("redislock-linear1ms", "LinearBackoff(1ms): tight polling",
			func() redislock.RetryStrategy { return redislock.LinearBackoff(time.Millisecond) }),
		Redsync("redsync-default", "defaults: 32 tries, random 50-250ms delay"),
		Redsync("redsync-jitter1-3ms", "WithRetryDelayFunc random 1-3ms, WithTries(1<<30): tight polling",
			redsync.WithTries(1<<30), redsync.WithRetryDelayFunc(jitter(time.Millisecond, 3*time.Millisecond))),
	}
}

// Catalog is every hot-key contender there is, HotKeySet's and the other peer settings tried
// while choosing them, by name.
func Catalog() map[string]Contender {
	cs := append(HotKeySet(),
		BSM("redislock-linear2ms", "LinearBackoff(2ms)",
			func() redislock.RetryStrategy { return redislock.LinearBackoff(2 * time.Millisecond) }),
		BSM("redislock-linear5ms", "LinearBackoff(5ms)",
			func() redislock.RetryStrategy { return redislock.LinearBackoff(5 * time.Millisecond) }),
		BSM("redislock-exp4-64ms", "ExponentialBackoff(4ms, 64ms)",
			func() redislock.RetryStrategy {
				return redislock.ExponentialBackoff(4*time.Millisecond, 64*time.Millisecond)
			}),
		BSM("redislock-linear100ms", "LinearBackoff(100ms): the README example's interval",
			func() redislock.RetryStrategy { return redislock.LinearBackoff(100 * time.Millisecond) }),
		Redsync("redsync-fixed1ms", "WithRetryDelay(1ms), WithTries(1<<30)",
			redsync.WithTries(1<<30), redsync.WithRetryDelay(time.Millisecond)),
		Redsync("redsync-jitter1-10ms", "WithRetryDelayFunc random 1-10ms, WithTries(1<<30)",
			redsync.WithTries(1<<30), redsync.WithRetryDelayFunc(jitter(time.Millisecond, 10*time.Millisecond))),
		Redsync("redsync-jitter5-25ms", "WithRetryDelayFunc random 5-25ms, WithTries(1<<30)",
			redsync.WithTries(1<<30), redsync.WithRetryDelayFunc(jitter(5*time.Millisecond, 25*time.Millisecond))),
		Ours("ours-1client-fenceless", 1, true, true),
		Ours("ours-4clients-fenceless", 4, true, true),
	)
	m := make(map[string]Contender, len(cs))
	for _, c := range cs {
		m[c.Name] = c
	}
	return m
}

// jitter returns a redsync delay function drawing uniformly from [lo, hi].
func jitter(lo, hi time.Duration) redsync.DelayFunc {
	return func(int) time.Duration { return lo + time.Duration(mrand.Int64N(int64(hi-lo)+1)) }
}

type rawLocker struct {
	rdb    *redis.Client
	script bool // SET NX PX inside a script
}

var rawObtain = redis.NewScript(`return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`)

// rawRelease is the compare-and-delete every Redis lock releases with.
var rawRelease = redis.NewScript(`if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`)

func (r rawLocker) acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	token := rand.Text()
	var ok bool
	var err error
	if r.script {
		err = rawObtain.Run(ctx, r.rdb, []string{key}, token, TTL.Milliseconds()).Err()
		ok = err == nil
		if errors.Is(err, redis.Nil) {
			err = nil
		}
	} else {
		ok, err = r.rdb.SetNX(ctx, key, token, TTL).Result()
	}
	if err != nil {
		return nil, fmt.Errorf("set nx: %w", err)
	}
	if !ok {
		return nil, errGaveUp
	}
	return func(ctx context.Context) error {
		n, err := rawRelease.Run(ctx, r.rdb, []string{key}, token).Int64()
		if err != nil {
			return fmt.Errorf("release: %w", err)
		}
		if n != 1 {
			return errors.New("release: not held")
		}
		return nil
	}, nil
}

func (rawLocker) close() error { return nil }

type oursLocker struct {
	c   *lock.Client
	opt *lock.Options
}

func (o oursLocker) acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := o.c.Obtain(ctx, key, TTL, o.opt)
	if errors.Is(err, lock.ErrNotObtained) {
		return nil, errGaveUp
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (o oursLocker) close() error { return o.c.Close() }

type bsmLocker struct {
	c        *redislock.Client
	strategy func() redislock.RetryStrategy
}

func (b bsmLocker) acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	l, err := b.c.Obtain(ctx, key, TTL, &redislock.Options{RetryStrategy: b.strategy()})
	// Without a deadline of the caller's, Obtain sets one of a TTL and reports its expiry as
	// context.DeadlineExceeded.
	if errors.Is(err, redislock.ErrNotObtained) || ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		return nil, errGaveUp
	}
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

func (bsmLocker) close() error { return nil }

type redsyncLocker struct {
	rs   *redsync.Redsync
	opts []redsync.Option
}

func (r redsyncLocker) acquire(ctx context.Context, key string) (func(context.Context) error, error) {
	m := r.rs.NewMutex(key, r.opts...)
	err := m.LockContext(ctx)
	var taken *redsync.ErrTaken
	if errors.Is(err, redsync.ErrFailed) || errors.As(err, &taken) {
		return nil, errGaveUp
	}
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := m.UnlockContext(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return errors.New("redsync: unlock: not held")
		}
		return nil
	}, nil
}

func (redsyncLocker) close() error { return nil }

// counter counts the requests a Redis client sends (a pipeline counts once): its round trips.
// It also remembers which commands were sent, to tell them from those scripts ran.
type counter struct {
	n atomic.Int64

	mu   sync.Mutex
	sent map[string]bool
}

func (c *counter) saw(name string) {
	c.mu.Lock()
	if c.sent == nil {
		c.sent = map[string]bool{}
	}
	c.sent[name] = true
	c.mu.Unlock()
}

// sentNames returns the names of the commands sent so far.
func (c *counter) sentNames() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.sent)
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.n.Add(1)
		c.saw(cmd.Name())
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		for _, cmd := range cmds {
			c.saw(cmd.Name())
		}
		return next(ctx, cmds)
	}
}

// fleet is a contender opened for one measurement: its Redis clients and lockers.
type fleet struct {
	clients []*redis.Client
	lockers []locker
	count   *counter
}

// openFleet connects c's clients to addr. Each gets a pool big enough for every worker, so
// that no implementation queues for connections.
func openFleet(c Contender, addr string, workers int) *fleet {
	f := &fleet{count: &counter{}}
	for range max(c.Clients, 1) {
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: max(workers, 10) + 4, MaxRetries: -1})
		rdb.AddHook(f.count)
		f.clients = append(f.clients, rdb)
		f.lockers = append(f.lockers, c.open(rdb))
	}
	return f
}

// locker returns worker i's locker.
func (f *fleet) locker(i int) locker { return f.lockers[i%len(f.lockers)] }

func (f *fleet) close() error {
	var errs []error
	for i := range f.lockers {
		errs = append(errs, f.lockers[i].close(), f.clients[i].Close())
	}
	return errors.Join(errs...)
}
