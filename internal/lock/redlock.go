package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redlock takes locks on a majority of independent Redis nodes (no replication between them),
// following the Redlock algorithm: the lock is held when more than half the nodes granted it,
// for the lease less the time the grants took and an allowance for clock drift.
//
// What it adds over one node: surviving the loss of a minority of nodes. What it does not add
// is safety against a paused holder — no lease-based lock can — or against a node that
// restarts empty while a holder counts on it (the restarted node can grant the lock again;
// see the package README). Each node issues its own fencing tokens; QuorumLock.Fence is the
// largest of those the quorum returned, which grows in practice because counters are seeded
// from the nodes' clocks, but is not strictly monotonic under every interleaving. Use the lock
// to avoid duplicate work, and let storage conditions decide correctness.
type Redlock struct {
	nodes       []*Client
	addrs       []string
	quorum      int
	nodeTimeout time.Duration
	driftFactor float64
}

// RedlockOptions tune a Redlock. Zero fields take the defaults documented on each.
type RedlockOptions struct {
	// NodeTimeout bounds each request to one node; it must be far below the lease so a dead
	// node costs little of it. Default 50ms.
	NodeTimeout time.Duration
	// DriftFactor is the share of the lease allowed for clock drift between nodes, on top of
	// a fixed 2ms. Default 0.01.
	DriftFactor float64
}

// NewRedlock returns a Redlock over nodes, each an independent Redis server.
func NewRedlock(nodes []*redis.Client, opt RedlockOptions) (*Redlock, error) {
	if len(nodes) == 0 {
		return nil, errors.New("lock: redlock needs at least one node")
	}
	if opt.NodeTimeout <= 0 {
		opt.NodeTimeout = 50 * time.Millisecond
	}
	if opt.DriftFactor <= 0 {
		opt.DriftFactor = 0.01
	}
	r := &Redlock{quorum: len(nodes)/2 + 1, nodeTimeout: opt.NodeTimeout, driftFactor: opt.DriftFactor}
	for _, n := range nodes {
		r.nodes = append(r.nodes, New(n))
		r.addrs = append(r.addrs, n.Options().Addr)
	}
	return r, nil
}

// NodeError is one node's failure in a Redlock operation.
type NodeError struct {
	Addr string
	Err  error // ErrNotObtained when the node's lock was held by someone else
}

// QuorumError reports a Redlock operation that did not reach a quorum, with each failing node.
// errors.Is(err, ErrNotObtained) holds for a failed obtain, and errors.Is(err, ErrNotHeld) for
// a failed refresh; the node errors are in Nodes.
type QuorumError struct {
	Op     string
	Name   string
	Got    int // nodes that succeeded
	Total  int
	Needed int
	Nodes  []NodeError
	kind   error
}

func (e *QuorumError) Error() string {
	parts := make([]string, len(e.Nodes))
	for i, n := range e.Nodes {
		parts[i] = fmt.Sprintf("%s: %v", n.Addr, n.Err)
	}
	return fmt.Sprintf("lock: redlock %s %q: %d of %d nodes, %d needed (%s)", e.Op, e.Name, e.Got, e.Total, e.Needed, strings.Join(parts, "; "))
}

// Unwrap returns ErrNotObtained or ErrNotHeld.
func (e *QuorumError) Unwrap() error { return e.kind }

// QuorumLock is a lock held on a quorum of Redlock nodes.
type QuorumLock struct {
	r     *Redlock
	name  string
	token string
	fence int64
	ttl   time.Duration

	mu    sync.Mutex
	until time.Time
}

// Obtain takes the lock called name on a quorum of nodes, trying again as opt.Retry says (Wait
// is not supported across nodes) and never past ctx's deadline. A failed round releases
// whatever it took. It returns a *QuorumError (matching ErrNotObtained) when no round reached a
// quorum in time, and the context's error when ctx was cancelled.
func (r *Redlock) Obtain(ctx context.Context, name string, ttl time.Duration, opt *Options) (*QuorumLock, error) {
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("lock: redlock obtain %q: ttl %v is below 1ms", name, ttl)
	}
	retry := opt.retry()
	deadline, hasDeadline := ctx.Deadline()
	token := rand.Text()
	for failed := 1; ; failed++ {
		l, err := r.round(ctx, name, token, ttl, opt)
		if err == nil {
			return l, nil
		}
		if ctx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, fmt.Errorf("lock: redlock obtain %q: %w", name, ctx.Err())
		}
		pause := retry.Backoff(failed)
		if pause < 0 || hasDeadline && time.Until(deadline) <= pause {
			return nil, err
		}
		if serr := sleep(ctx, pause); serr != nil {
			if errors.Is(serr, context.DeadlineExceeded) {
				return nil, err
			}
			return nil, fmt.Errorf("lock: redlock obtain %q: %w", name, serr)
		}
	}
}

// round asks every node at once and keeps the lock if a quorum granted it in time.
func (r *Redlock) round(ctx context.Context, name, token string, ttl time.Duration, opt *Options) (*QuorumLock, error) {
	start := time.Now()
	k := keysFor(name)
	type result struct {
		a   attempt
		err error
	}
	results := make([]result, len(r.nodes))
	r.each(ctx, func(ctx context.Context, i int, c *Client) {
		a, err := c.try(ctx, k, token, ttl, opt, "")
		if err == nil && !a.obtained {
			err = ErrNotObtained
		}
		results[i] = result{a, err}
	})
	got, fence := 0, int64(0)
	var failures []NodeError
	for i, res := range results {
		if res.err != nil {
			failures = append(failures, NodeError{Addr: r.addrs[i], Err: res.err})
			continue
		}
		got++
		fence = max(fence, res.a.fence)
	}
	validity := ttl - time.Since(start) - r.drift(ttl)
	if got >= r.quorum && validity > 0 {
		return &QuorumLock{r: r, name: name, token: token, fence: fence, ttl: ttl, until: start.Add(ttl - r.drift(ttl))}, nil
	}
	// Not enough: give back what was taken, on every node (a grant may have been applied
	// although its reply was lost).
	r.release(context.WithoutCancel(ctx), k, token)
	if got >= r.quorum {
		failures = append(failures, NodeError{Addr: "(all)", Err: fmt.Errorf("quorum reached too late: %v of the %v lease left", validity, ttl)})
	}
	return nil, &QuorumError{Op: "obtain", Name: name, Got: got, Total: len(r.nodes), Needed: r.quorum, Nodes: failures, kind: ErrNotObtained}
}

func (r *Redlock) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*r.driftFactor) + 2*time.Millisecond
}

// each runs fn against every node concurrently, each bounded by the node timeout.
func (r *Redlock) each(ctx context.Context, fn func(ctx context.Context, i int, c *Client)) {
	var wg sync.WaitGroup
	for i, c := range r.nodes {
		wg.Go(func() {
			nctx, cancel := context.WithTimeout(ctx, r.nodeTimeout)
			defer cancel()
			fn(nctx, i, c)
		})
	}
	wg.Wait()
}

// release deletes the lock on every node that still holds token and reports how many did.
func (r *Redlock) release(ctx context.Context, k keys, token string) int {
	var n atomic.Int64
	r.each(ctx, func(ctx context.Context, _ int, c *Client) {
		if held, err := c.release(ctx, k, token, ""); err == nil && held {
			n.Add(1)
		}
	})
	return int(n.Load())
}

// Name returns the lock's name.
func (l *QuorumLock) Name() string { return l.name }

// Token returns the holder's token, the same on every node.
func (l *QuorumLock) Token() string { return l.token }

// Fence returns the largest fencing token the quorum issued (see Redlock for its limits).
func (l *QuorumLock) Fence() int64 { return l.fence }

// Until returns the local time by which the lock's validity ends unless refreshed: the lease
// from before the grants were asked for, less the drift allowance.
func (l *QuorumLock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// Refresh extends the lease on every node that still holds it; the lock stays valid only if a
// quorum did so in time. It returns a *QuorumError (matching ErrNotHeld) otherwise.
func (l *QuorumLock) Refresh(ctx context.Context, ttl time.Duration) error {
	start := time.Now()
	k := keysFor(l.name)
	errs := make([]error, len(l.r.nodes))
	l.r.each(ctx, func(ctx context.Context, i int, c *Client) {
		n, err := refreshScript.Run(ctx, c.rdb, []string{k.lock}, l.token, ttl.Milliseconds()).Int64()
		if err == nil && n != 1 {
			err = ErrNotHeld
		}
		errs[i] = err
	})
	got := 0
	var failures []NodeError
	for i, err := range errs {
		if err != nil {
			failures = append(failures, NodeError{Addr: l.r.addrs[i], Err: err})
		} else {
			got++
		}
	}
	if got >= l.r.quorum && ttl-time.Since(start)-l.r.drift(ttl) > 0 {
		l.mu.Lock()
		l.until = start.Add(ttl - l.r.drift(ttl))
		l.mu.Unlock()
		return nil
	}
	return &QuorumError{Op: "refresh", Name: l.name, Got: got, Total: len(l.r.nodes), Needed: l.r.quorum, Nodes: failures, kind: ErrNotHeld}
}

// Release deletes the lock on every node where this holder still holds it. It returns
// ErrNotHeld when no node did any more.
func (l *QuorumLock) Release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	if l.r.release(ctx, keysFor(l.name), l.token) == 0 {
		return ErrNotHeld
	}
	return nil
}
