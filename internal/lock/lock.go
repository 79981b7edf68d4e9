package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/clock"
)

var (
	// ErrNotObtained means the lock is held by someone else and could not be taken within the
	// caller's deadline (or retry strategy). It never stands for a Redis failure or a cancelled
	// context: those come back as the underlying error, wrapped.
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrNotHeld means the caller no longer holds the lock: its lease expired, or someone
	// deleted the key.
	ErrNotHeld = errors.New("lock: not held")
)

// recheck bounds how long a waiter sleeps between looks at the lock, so that a lost grant
// message costs at most that.
const (
	recheck = 200 * time.Millisecond
	// listKeep is how long the line of waiters outlives its last update. A waiter that
	// crashed while in line may be given the lock once, which then expires with the lease it
	// asked for — as if it had crashed holding it.
	listKeep = time.Minute
)

// releaseTimeout bounds Release. Release deliberately ignores its caller's cancellation (a lock
// left behind blocks everyone until its TTL), so it needs a bound of its own.
const releaseTimeout = 2 * time.Second

// Client obtains locks. It is safe for concurrent use. A Client that has waited for a lock
// (Options.Wait) holds one Redis subscription for grant messages: Close it when done.
type Client struct {
	rdb       redis.UniversalClient
	id        string // starts the id of each of the client's waiters
	namespace string
	obs       Observer
	recheck   time.Duration
	seq       atomic.Uint64 // numbers the client's waiters

	mu      sync.Mutex
	waiters map[string]*waiter // by waiter id: the waits a grant message may be for
	sub     *subscription      // started on the first wait
	closed  bool
	// orphans are, by lock key, attempts whose outcome is unknown and whose clean-up failed
	// too: Redis may still run them. The next attempt on the key sweeps them.
	orphans map[string][]orphan
}

// orphan is an attempt that may have left its token in the lock or its entry in the line.
type orphan struct{ token, entry string }

// Option configures a Client.
type Option func(*Client)

// WithNamespace makes the client listen only to grant messages of locks whose names start with
// ns — the prefix its own names share — instead of every grant published on the Redis server.
func WithNamespace(ns string) Option { return func(c *Client) { c.namespace = ns } }

// WithObserver sends the client's events to o, for metrics.
func WithObserver(o Observer) Option { return func(c *Client) { c.obs = o } }

// New returns a Client over rdb: a *redis.Client, a *redis.ClusterClient, a Sentinel failover
// client, or any redis.UniversalClient.
func New(rdb redis.UniversalClient, opts ...Option) *Client {
	c := &Client{rdb: rdb, id: rand.Text(), obs: noObserver{}, recheck: recheck, waiters: map[string]*waiter{}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Namespace returns the prefix given with WithNamespace: the one the names of the client's
// locks start with.
func (c *Client) Namespace() string { return c.namespace }

// Close stops the client's grant subscription, if it has one. Waiters still waiting fall back
// to looking every 200 ms (or at the holder's remaining lease). Locks are not released.
func (c *Client) Close() error {
	c.mu.Lock()
	sub := c.sub
	c.sub, c.closed = nil, true
	c.mu.Unlock()
	if sub != nil {
		return sub.close()
	}
	return nil
}

// Options tune one Obtain or WithLocks call. The zero value makes a single attempt and issues a
// fencing token.
type Options struct {
	// Wait makes Obtain wait for the lock until ctx's deadline (or cancellation), without
	// polling: a waiter that finds the lock held joins the lock's line in Redis, and a holder
	// letting go gives the lock to the waiter at the front and tells it by a message. Waiters
	// are served in the order they asked, whichever Client they belong to; each looks again
	// every 200 ms at most (sooner if the holder's lease ends sooner) in case a message was
	// lost. Callers that want one waiter per process and name, as a batching service does,
	// queue their own requests before calling. Wait takes precedence over Retry.
	Wait bool

	// Retry polls instead: it decides whether and when to try again while the lock is held by
	// someone else. Nil means NoRetry. Ignored when Wait is set.
	Retry RetryStrategy

	// Fenceless skips the fencing counter: Lock.Fence reports 0 and no counter key is created.
	// Use it for locks whose holders write nowhere a fencing token could be checked (claims on
	// short-lived names, for example), so that Redis keeps no counter per name.
	Fenceless bool

	// Detached keeps the work started by WithLocks running when the caller's context is
	// cancelled after the locks were obtained; only losing a lock cancels it then. Use it when
	// work that has begun must be allowed to finish (a database commit whose outcome the caller
	// must learn). The work should bound itself with a timeout.
	Detached bool
}

func (o *Options) retry() RetryStrategy {
	if o == nil || o.Retry == nil {
		return NoRetry()
	}
	return o.Retry
}

func (o *Options) fenced() bool { return o == nil || !o.Fenceless }

// Lock is a held lock: on one Redis (Client.Obtain) or on a quorum of independent nodes
// (Redlock.Obtain). Its methods are safe for concurrent use.
type Lock struct {
	on    holder // the Client or the Redlock that holds it
	obs   Observer
	name  string
	keys  keys
	token string
	fence int64
	note  string // what the last holder left (Note)

	mu       sync.Mutex
	until    time.Time // local, conservative end of the lease (monotonic clock)
	leave    string    // the note Release leaves (LeaveNote)
	released bool
	lost     bool // the observer was told the lock was lost
}

// holder is where a Lock is held — one Redis (a Client) or a quorum of nodes (a Redlock) —
// and does the Redis side of keeping and letting go of it. The Lock does the rest once for
// both kinds: the lease it counts, release only once, a loss reported once, the observer.
// Both methods read only what never changes in l (its name, keys and token).
type holder interface {
	// extend sets l's lease to ttl from now and returns the local time by which it then ends.
	// An error matching ErrNotHeld means the lock is lost; any other, that Redis could not be
	// asked, and the lease ends as before.
	extend(ctx context.Context, l *Lock, ttl time.Duration) (until time.Time, err error)
	// drop lets l's lock go, leaving note for the next holder where notes are kept, and
	// reports whether l still held it. An error means Redis could not be asked: the lock
	// then expires with its lease.
	drop(ctx context.Context, l *Lock, note string) (held bool, err error)
}

// reportLost tells the observer that the lock was found lost, once per lock: WithLocks'
// refresh and its release both find a lost lock gone, and that is one loss. l.mu must be held.
func (l *Lock) reportLost() {
	if !l.lost {
		l.lost = true
		l.obs.Lost(l.name)
	}
}

// Obtain takes the lock called name for ttl.
//
// With Options.Wait it waits until ctx's deadline, in line with every other waiter for name,
// woken by the message of the holder that gives it the lock rather than by polling; otherwise
// it tries again as Options.Retry says, never past the deadline. It returns ErrNotObtained
// when the lock stayed held by others; the context's error (wrapped) when ctx was cancelled,
// or when its deadline passed during a Redis call before the lock was ever found held; and the
// Redis error (wrapped) when Redis could not be reached. ttl must be at least one millisecond.
func (c *Client) Obtain(ctx context.Context, name string, ttl time.Duration, opt *Options) (*Lock, error) {
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("lock: obtain %q: ttl %v is below 1ms", name, ttl)
	}
	start := time.Now()
	var l *Lock
	var held bool
	var err error
	if opt != nil && opt.Wait {
		l, held, err = c.obtainWaiting(ctx, name, ttl, opt)
	} else {
		l, held, err = c.obtainPolling(ctx, name, ttl, opt)
	}
	switch {
	case err == nil:
		c.obs.Obtained(name, time.Since(start), held)
	case errors.Is(err, ErrNotObtained):
		c.obs.NotObtained(name, time.Since(start))
	}
	return l, err
}

// attempt is one try at the lock in Redis.
type attempt struct {
	obtained bool
	fence    int64
	note     string        // the last holder's note, when obtained
	pttl     time.Duration // the holder's remaining lease, when not obtained
}

// try runs the obtain script once. A waiter passes its entry (see obtainScript), which puts it
// in the lock's line when the lock is held; entry is "" for an attempt that does not wait.
func (c *Client) try(ctx context.Context, k keys, token string, ttl time.Duration, opt *Options, entry string) (attempt, error) {
	reply, err := obtainScript.Run(ctx, c.rdb, k.all(), token, ttl.Milliseconds(),
		flag(opt.fenced()), entry, listKeep.Milliseconds()).Slice()
	if err != nil {
		return attempt{}, err
	}
	if len(reply) < 2 {
		return attempt{}, fmt.Errorf("unexpected reply %v", reply)
	}
	code, _ := reply[0].(int64)
	n, ok := reply[1].(int64)
	if !ok {
		return attempt{}, fmt.Errorf("unexpected reply %v", reply)
	}
	if code == 0 {
		return attempt{pttl: time.Duration(n) * time.Millisecond}, nil
	}
	a := attempt{obtained: true, fence: n}
	if len(reply) > 2 {
		a.note, _ = reply[2].(string)
	}
	return a, nil
}

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func (c *Client) newLock(name string, k keys, token string, fence int64, note string, ttl time.Duration, start time.Time) *Lock {
	// The lease is measured from before the request: Redis may set the key at any point
	// until the reply arrives, so this is the latest the lease can safely be assumed to end.
	return &Lock{on: c, obs: c.obs, name: name, keys: k, token: token, fence: fence, note: note, until: start.Add(ttl)}
}

// obtainPolling is Obtain without Wait: one attempt, then as the retry strategy says. held
// reports whether the lock was ever found held by someone else.
func (c *Client) obtainPolling(ctx context.Context, name string, ttl time.Duration, opt *Options) (l *Lock, held bool, err error) {
	k := keysFor(name)
	token := rand.Text()
	retry := opt.retry()
	deadline, hasDeadline := ctx.Deadline()
	c.sweep(ctx, k)
	for failed := 1; ; failed++ {
		start := time.Now()
		a, err := c.try(ctx, k, token, ttl, opt, "")
		if err != nil {
			c.abandon(k, orphan{token: token})
			return nil, held, attemptError(ctx, name, err, held)
		}
		if a.obtained {
			return c.newLock(name, k, token, a.fence, a.note, ttl, start), held, nil
		}
		held = true
		pause := retry.Backoff(failed)
		if pause < 0 || hasDeadline && time.Until(deadline) <= pause {
			return nil, held, ErrNotObtained
		}
		if clock.Sleep(ctx, pause) != nil {
			return nil, held, waitError(name, ctx.Err())
		}
	}
}

// attemptError classifies a failed attempt. A deadline that strikes mid-call after the key was
// seen held ends a wait for a holder, not a Redis failure — whatever error the client made of
// it (a context error, or an i/o timeout when it applies deadlines to the connection).
func attemptError(ctx context.Context, name string, err error, wasHeld bool) error {
	if wasHeld && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return ErrNotObtained
	}
	return fmt.Errorf("lock: obtain %q: %w", name, err)
}

// abandon undoes an attempt whose outcome is unknown (its reply never came: a timeout, a broken
// connection), or the wait of a waiter that gives up. The script may have run and granted the
// lock to o's token, or a holder may have given it to the waiter meanwhile; nobody would then
// hold or release it until the lease ran out. So o's entry leaves the line and the lock, if it
// holds o's token, goes to the next waiter or is freed. Best effort, on a context of its own:
// the caller's may be what ended the attempt. What it cannot undo is swept later.
func (c *Client) abandon(k keys, o orphan) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := c.forget(ctx, k, o); err != nil {
		c.addOrphans(k, o)
	}
}

// addOrphans records attempts on k that Redis may still run.
func (c *Client) addOrphans(k keys, orphans ...orphan) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.orphans == nil {
		c.orphans = map[string][]orphan{}
	}
	c.orphans[k.lock] = append(c.orphans[k.lock], orphans...)
}

func (c *Client) forget(ctx context.Context, k keys, o orphan) error {
	return forgetScript.Run(ctx, c.rdb, k.all(), o.token, o.entry, k.channel).Err()
}

// sweep clears, before an attempt on k, what earlier attempts of this client left when their
// clean-up failed too: without it, a lock that a paused Redis granted to an attempt nobody
// waits for any more would stop everyone until its lease ran out. Orphans it cannot sweep now
// are kept for the next time.
func (c *Client) sweep(ctx context.Context, k keys) {
	c.mu.Lock()
	orphans := c.orphans[k.lock]
	delete(c.orphans, k.lock)
	c.mu.Unlock()
	for i, o := range orphans {
		if err := c.forget(ctx, k, o); err != nil {
			c.addOrphans(k, orphans[i:]...)
			return
		}
	}
}

// waitError classifies the end of a wait for a holder: a deadline means the lock was not
// obtained in time; a cancellation is the caller's.
func waitError(name string, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return ErrNotObtained
	}
	return fmt.Errorf("lock: obtain %q: %w", name, err)
}

// Fence returns the fencing token issued with the lock: larger than every token issued earlier
// for the same name. A Redlock's lock has the largest token its quorum issued, which a quorum
// of nodes raised their counters to before the lock counted as obtained (see Redlock for the
// one assumption, about clocks, that a node restarted empty needs). It is 0 for locks obtained
// with Options.Fenceless.
func (l *Lock) Fence() int64 { return l.fence }

// leaseEnd returns the local time by which the lease ends unless refreshed. It is conservative:
// measured from before the request that set or extended the lease (less the drift allowance,
// on a Redlock).
func (l *Lock) leaseEnd() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// refresh extends the lease to ttl from now (WithLocks keeps leases alive with it). It returns
// an error matching ErrNotHeld when the lock was lost or released, and otherwise the error of
// a Redis that could not be asked (a Redlock's *QuorumError); the lease then ends as before.
func (l *Lock) refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("lock: refresh %q: ttl %v is below 1ms", l.name, ttl)
	}
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return ErrNotHeld
	}
	until, err := l.on.extend(ctx, l, ttl)
	if err != nil && !errors.Is(err, ErrNotHeld) {
		l.obs.RefreshFailed(l.name, err)
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.reportLost()
		return err
	}
	l.until = until
	return nil
}

// extend runs the refresh script on the client's Redis.
func (c *Client) extend(ctx context.Context, l *Lock, ttl time.Duration) (time.Time, error) {
	start := time.Now()
	held, err := c.pexpire(ctx, l.keys, l.token, ttl)
	switch {
	case err != nil:
		return time.Time{}, fmt.Errorf("lock: refresh %q: %w", l.name, err)
	case !held:
		return time.Time{}, ErrNotHeld
	}
	return start.Add(ttl), nil
}

// pexpire runs the refresh script, and reports whether token still held the lock.
func (c *Client) pexpire(ctx context.Context, k keys, token string, ttl time.Duration) (held bool, err error) {
	n, err := refreshScript.Run(ctx, c.rdb, []string{k.lock}, token, ttl.Milliseconds()).Int64()
	return n == 1, err
}

// Release gives the lock up if this holder still holds it: on one Redis to the waiter at the
// front of the lock's line, if there is one (of any Client), or back to Redis; on a Redlock by
// deleting it on every node that still holds it. It is safe to call more than once: calls
// after a successful one do nothing and return nil.
//
// Release does not inherit ctx's cancellation — a request that was cancelled must still give
// its lock back — and is bounded by a short timeout of its own instead. It returns ErrNotHeld
// when the lease had already ended (someone else may hold the lock now; their lock is left
// alone; on a Redlock, no node held it any more), and the Redis error (wrapped) when Redis
// could not be reached (on a Redlock, no node answered), in which case the lock expires with
// its lease.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	held, err := l.on.drop(ctx, l, l.leave)
	if err != nil {
		return err
	}
	l.released = true
	if !held {
		l.reportLost()
		return ErrNotHeld
	}
	return nil
}

// drop runs the release script on the client's Redis.
func (c *Client) drop(ctx context.Context, l *Lock, note string) (bool, error) {
	held, err := c.release(ctx, l.keys, l.token, note)
	if err != nil {
		return false, fmt.Errorf("lock: release %q: %w", l.name, err)
	}
	return held, nil
}

// release runs the release script, leaving note, and reports whether token still held the lock.
func (c *Client) release(ctx context.Context, k keys, token, note string) (held bool, err error) {
	n, err := releaseScript.Run(ctx, c.rdb, k.all(), token, k.channel, note, noteKeep.Milliseconds()).Int64()
	return n == 1, err
}

// noteKeep is how long a note outlives the release that left it: long enough for the next
// holder in any sane wait, short enough that a product nobody buys does not keep one for good.
const noteKeep = time.Hour

// Note returns what the last holder of the lock left for the next one (LeaveNote) when it let
// the lock go, or "" when it left nothing. It comes with the lock, in the same reply or message
// as the grant. A note is a hint from another process, never a fact: a holder that died, or
// whose lease ran out, left none, and anything written without the lock is not in it. A
// Redlock's locks carry no notes: Note is "" and LeaveNote leaves nothing.
func (l *Lock) Note() string { return l.note }

// LeaveNote sets what Release leaves for the next holder (a short string), in place of the
// note this holder found. A holder that leaves none takes the old note away when it releases:
// whatever it did may have made it wrong.
func (l *Lock) LeaveNote(note string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leave = note
}
