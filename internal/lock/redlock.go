package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/clock"
)

// Redlock takes locks on a majority of independent Redis nodes (no replication between them),
// following the Redlock algorithm: the lock is held when more than half the nodes granted it,
// for the lease less the time the grants took and an allowance for clock drift.
//
// What it adds over one node: surviving the loss of a minority of nodes. What it does not add
// is safety against a paused holder — no lease-based lock can — or against a node that
// restarts empty while a holder counts on it (the restarted node can grant the lock again;
// see the package README). Fencing tokens are what makes both harmless to storage that checks
// them, and they strictly increase from one holder to the next: each node issues its own, the
// holder takes the largest its quorum issued, and then raises the counter to that token on
// every node that still holds its lock. The lock counts as obtained only when a quorum did so
// within the validity time. Any two quorums share a node; on that node the earlier holder
// raised the counter while its lock was still there, and the later holder's grant, and so its
// increment, came after that lock was gone. A node that restarts empty re-seeds its counter
// from its clock in microseconds, which keeps tokens increasing as long as no node's clock is
// behind the largest token issued (the clocks of the nodes agree to within the time a restart
// takes and never step back).
type Redlock struct {
	nodes       []*Client
	addrs       []string
	quorum      int
	nodeTimeout time.Duration
	obs         Observer
	// afterGrant, when set (by tests), runs between a round's grants and its raising of the
	// fencing counters, to lose the lock on some nodes exactly there.
	afterGrant func()
}

// RedlockOptions tune a Redlock. Zero fields take the defaults documented on each.
type RedlockOptions struct {
	// NodeTimeout bounds each request to one node; it must be far below the lease so a dead
	// node costs little of it. Default 50ms.
	NodeTimeout time.Duration
	// Observer receives acquisitions, give-ups, losses and refresh failures, as a Client's
	// does (WithObserver). Nil observes nothing.
	Observer Observer
}

// NewRedlock returns a Redlock over nodes, each an independent Redis server.
func NewRedlock(nodes []*redis.Client, opt RedlockOptions) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, errors.New("lock: redlock needs at least one node")
	}
	if opt.NodeTimeout <= 0 {
		opt.NodeTimeout = 50 * time.Millisecond
	}
	r := &Redlock{quorum: len(nodes)/2 + 1, nodeTimeout: opt.NodeTimeout, obs: opt.Observer}
	if r.obs == nil {
		r.obs = noObserver{}
	}
	for _, n := range nodes {
		r.nodes = append(r.nodes, New(n))
		r.addrs = append(r.addrs, n.Options().Addr)
	}
	return r, nil
}

// nodeError is one node's failure in a Redlock operation.
type nodeError struct {
	addr string
	// err is ErrNotObtained when the node's lock was held by someone else, ErrNotHeld (maybe
	// wrapped) when the node no longer held this holder's lock, and otherwise why the node
	// could not be asked.
	err error
}

// answered reports whether the node answered about the lock, as opposed to not answering.
func (n nodeError) answered() bool {
	return errors.Is(n.err, ErrNotObtained) || errors.Is(n.err, ErrNotHeld)
}

// QuorumError reports a Redlock operation that did not reach a quorum. errors.Is(err,
// ErrNotObtained) holds for a failed obtain, and errors.Is(err, ErrNotHeld) for a failed
// refresh; Unreachable tells a lock held by someone else from nodes that could not be asked. A
// release fails with one only when fewer than a quorum of nodes answered (Unreachable). Its
// message names every node that failed and why.
type QuorumError struct {
	op     string // "obtain", "refresh" or "release"
	name   string
	got    int // nodes that succeeded
	total  int
	needed int
	nodes  []nodeError // the nodes that failed
	kind   error
}

func (e *QuorumError) Error() string {
	return fmt.Sprintf("lock: redlock %s %q: %d of %d nodes, %d needed (%s)", e.op, e.name, e.got, e.total, e.needed, joinNodeErrors(e.nodes))
}

// joinNodeErrors names each node's failure, for an error message.
func joinNodeErrors(nodes []nodeError) string {
	parts := make([]string, len(nodes))
	for i, n := range nodes {
		parts[i] = fmt.Sprintf("%s: %v", n.addr, n.err)
	}
	return strings.Join(parts, "; ")
}

// Unwrap returns ErrNotObtained or ErrNotHeld, or nil for a refresh or a release whose nodes
// could not be asked.
func (e *QuorumError) Unwrap() error { return e.kind }

// Unreachable reports whether fewer than a quorum of nodes answered at all (granting the lock,
// or saying who holds it): the nodes are down, cut off or too slow, so nothing can be said
// about the lock itself. A caller tells "unavailable" from "busy" by it.
func (e *QuorumError) Unreachable() bool {
	answered := e.got
	for _, n := range e.nodes {
		if n.answered() {
			answered++
		}
	}
	return answered < e.needed
}

// Obtain takes the lock called name on a quorum of nodes, trying again as opt.Retry says (Wait
// is not supported across nodes) and never past ctx's deadline. A failed round releases
// whatever it took. It returns a *QuorumError (matching ErrNotObtained) when no round reached a
// quorum in time, and the context's error when ctx was cancelled.
//
// When ctx's deadline cuts the last round short, the error is that of the last round in which
// a quorum of nodes answered, if any did: the lock was found held, and the nodes only ran out
// of time on the last try, which says nothing about whether they can be reached.
func (r *Redlock) Obtain(ctx context.Context, name string, ttl time.Duration, opt *Options) (*Lock, error) {
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("lock: redlock obtain %q: ttl %v is below 1ms", name, ttl)
	}
	start := time.Now()
	l, contended, err := r.obtain(ctx, name, ttl, opt)
	switch {
	case err == nil:
		r.obs.Obtained(name, time.Since(start), contended)
	case errors.Is(err, ErrNotObtained):
		r.obs.NotObtained(name, time.Since(start))
	}
	return l, err
}

// obtain is Obtain without the observer. contended reports whether a round found the lock held
// by someone else.
func (r *Redlock) obtain(ctx context.Context, name string, ttl time.Duration, opt *Options) (l *Lock, contended bool, err error) {
	retry := opt.retry()
	deadline, hasDeadline := ctx.Deadline()
	token := rand.Text()
	var answered *QuorumError // the last round's error in which a quorum of nodes answered
	giveUp := func(err error) error {
		var qe *QuorumError
		if answered != nil && errors.As(err, &qe) && qe.Unreachable() && ctx.Err() != nil {
			return answered
		}
		return err
	}
	for failed := 1; ; failed++ {
		l, err := r.round(ctx, name, token, ttl, opt)
		if err == nil {
			return l, contended, nil
		}
		if qe := (*QuorumError)(nil); errors.As(err, &qe) && !qe.Unreachable() {
			answered, contended = qe, true
		}
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, contended, fmt.Errorf("lock: redlock obtain %q: %w", name, ctx.Err())
		}
		pause := retry.Backoff(failed)
		if pause < 0 || hasDeadline && time.Until(deadline) <= pause {
			return nil, contended, giveUp(err)
		}
		if clock.Sleep(ctx, pause) != nil {
			serr := ctx.Err()
			if errors.Is(serr, context.DeadlineExceeded) {
				return nil, contended, giveUp(err)
			}
			return nil, contended, fmt.Errorf("lock: redlock obtain %q: %w", name, serr)
		}
	}
}

// round asks every node at once and keeps the lock if a quorum granted it, and then (for a
// fenced lock) raised its fencing counter to the lock's token, in time.
func (r *Redlock) round(ctx context.Context, name, token string, ttl time.Duration, opt *Options) (*Lock, error) {
	start := time.Now()
	k := keysFor(name)
	type result struct {
		a   attempt
		err error
	}
	results := make([]result, len(r.nodes))
	r.each(ctx, nil, func(ctx context.Context, i int, c *Client) {
		a, err := c.try(ctx, k, token, ttl, opt, "")
		if err == nil && !a.obtained {
			err = ErrNotObtained
		}
		results[i] = result{a, err}
	})
	var granted []int
	fence := int64(0)
	var failures []nodeError
	for i, res := range results {
		if res.err != nil {
			failures = append(failures, nodeError{addr: r.addrs[i], err: res.err})
			continue
		}
		granted = append(granted, i)
		fence = max(fence, res.a.fence)
	}
	got := len(granted)
	if got >= r.quorum && opt.fenced() {
		if r.afterGrant != nil {
			r.afterGrant()
		}
		var raiseFailures []nodeError
		got, raiseFailures = r.raise(ctx, k, token, fence, granted)
		failures = append(failures, raiseFailures...)
	}
	validity := ttl - time.Since(start) - r.drift(ttl)
	if got >= r.quorum && validity > 0 {
		return &Lock{on: r, obs: r.obs, name: name, keys: k, token: token, fence: fence, until: start.Add(ttl - r.drift(ttl))}, nil
	}
	// Not enough: give back what was taken, on every node (a grant may have been applied
	// although its reply was lost).
	r.release(context.WithoutCancel(ctx), k, token)
	if got >= r.quorum {
		failures = append(failures, nodeError{addr: "(all)", err: fmt.Errorf("quorum reached too late: %v of the %v lease left", validity, ttl)})
	}
	return nil, &QuorumError{op: "obtain", name: name, got: got, total: len(r.nodes), needed: r.quorum, nodes: failures, kind: ErrNotObtained}
}

// raise sets the fencing counter of every node in granted that still holds token to at least
// fence, and reports on how many it did so. A quorum of them makes fence larger than the token
// of any later holder can miss: that holder's quorum shares a node with this one, and there
// its grant, and the counter's increment, can only come after this lock is gone, which is
// after the raise.
func (r *Redlock) raise(ctx context.Context, k keys, token string, fence int64, granted []int) (int, []nodeError) {
	return r.tally(ctx, granted, func(ctx context.Context, c *Client) error {
		n, err := raiseScript.Run(ctx, c.rdb, []string{k.lock, k.fence}, token, strconv.FormatInt(fence, 10)).Int64()
		if err == nil && n != 1 {
			err = fmt.Errorf("fence not raised: %w", ErrNotHeld)
		}
		return err
	})
}

// driftFactor is the share of a lease allowed for clock drift between the nodes, on top of a
// fixed 2ms.
const driftFactor = 0.01

func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*driftFactor) + 2*time.Millisecond
}

// each runs fn against the nodes at indexes (every node when indexes is nil) concurrently,
// each bounded by the node timeout.
func (r *Redlock) each(ctx context.Context, indexes []int, fn func(ctx context.Context, i int, c *Client)) {
	var wg sync.WaitGroup
	for i, c := range r.nodes {
		if indexes != nil && !slices.Contains(indexes, i) {
			continue
		}
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
			fn(nctx, i, c)
		})
	}
	wg.Wait()
}

// tally runs fn against the nodes at indexes (every node when indexes is nil), as each does,
// and reports on how many it succeeded and how it failed on the others.
func (r *Redlock) tally(ctx context.Context, indexes []int, fn func(ctx context.Context, c *Client) error) (ok int, failures []nodeError) {
	errs := make([]error, len(r.nodes))
	r.each(ctx, indexes, func(ctx context.Context, i int, c *Client) { errs[i] = fn(ctx, c) })
	for i, err := range errs {
		switch {
		case indexes != nil && !slices.Contains(indexes, i):
		case err != nil:
			failures = append(failures, nodeError{addr: r.addrs[i], err: err})
		default:
			ok++
		}
	}
	return ok, failures
}

// release deletes the lock on every node that still holds token, and reports on how many it
// did; a node that answered without it fails with ErrNotHeld.
func (r *Redlock) release(ctx context.Context, k keys, token string) (int, []nodeError) {
	return r.tally(ctx, nil, func(ctx context.Context, c *Client) error {
		held, err := c.release(ctx, k, token, "")
		if err == nil && !held {
			err = ErrNotHeld
		}
		return err
	})
}

// extend refreshes the lease on every node that still holds l; the lock stays valid only if a
// quorum did so in time. Otherwise the error is a *QuorumError: matching ErrNotHeld when a
// quorum of nodes answered (the lock is lost, or the refresh came too late), and matching
// nothing else when they could not be asked (Unreachable): the lock then stays valid until its
// lease ends, as before, and a later refresh may still succeed.
func (r *Redlock) extend(ctx context.Context, l *Lock, ttl time.Duration) (time.Time, error) {
	start := time.Now()
	got, failures := r.tally(ctx, nil, func(ctx context.Context, c *Client) error {
		held, err := c.pexpire(ctx, l.keys, l.token, ttl)
		if err == nil && !held {
			err = ErrNotHeld
		}
		return err
	})
	if got >= r.quorum && ttl-time.Since(start)-r.drift(ttl) > 0 {
		return start.Add(ttl - r.drift(ttl)), nil
	}
	qe := &QuorumError{op: "refresh", name: l.name, got: got, total: len(r.nodes), needed: r.quorum, nodes: failures, kind: ErrNotHeld}
	if qe.Unreachable() {
		qe.kind = nil
	}
	return time.Time{}, qe
}

// drop deletes l's lock on every node where l still holds it: l held it if any node did. When
// none did, the lock is lost only if a quorum of nodes said so; with fewer answers nothing is
// known about it, and the error is an Unreachable *QuorumError. A Redlock keeps no notes: note
// is left nowhere.
func (r *Redlock) drop(ctx context.Context, l *Lock, _ string) (bool, error) {
	held, failures := r.release(ctx, l.keys, l.token)
	if held > 0 {
		return true, nil
	}
	if qe := (&QuorumError{op: "release", name: l.name, total: len(r.nodes), needed: r.quorum, nodes: failures}); qe.Unreachable() {
		return false, qe
	}
	return false, nil
}

// WithLocks obtains the lock of every name on a quorum of nodes, one by one in the order given
// (see Client.WithLocks for why callers must agree on one), runs fn while keeping their leases
// alive, and releases them afterwards — also when fn fails or panics. locks[i] passed to fn is
// the lock for names[i].
//
// While fn runs, the leases are refreshed every ttl/3. If a lock is lost (a quorum of nodes
// answers without it, or refreshes keep failing until its validity has run out) fn's context is
// cancelled at once, with ErrNotHeld as its cause, and a non-nil error from fn is returned
// wrapped so that errors.Is(err, ErrNotHeld) holds. With Options.Detached, fn's context is not
// cancelled with ctx once the locks are held. Duplicate names, and no names at all, are an
// error; other errors before fn runs are those of Obtain.
func (r *Redlock) WithLocks(ctx context.Context, names []string, ttl time.Duration, fn func(ctx context.Context, locks []*Lock) error, opt *Options) error {
	return withLocks(ctx, names, ttl, r.Obtain, fn, opt)
}
