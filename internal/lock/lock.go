package lock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	// ErrNotObtained means the lock is held by someone else and could not be taken within the
	// caller's retry strategy and deadline. It never stands for a Redis failure or a cancelled
	// context: those come back as the underlying error, wrapped.
	ErrNotObtained = errors.New("lock: not obtained")

	// ErrNotHeld means the caller no longer holds the lock: its lease expired, or someone
	// deleted the key.
	ErrNotHeld = errors.New("lock: not held")
)

// releaseTimeout bounds Release. Release deliberately ignores its caller's cancellation (a lock
// left behind blocks everyone until its TTL), so it needs a bound of its own.
const releaseTimeout = 2 * time.Second

// Client obtains locks. It is safe for concurrent use.
type Client struct {
	rdb redis.Scripter
}

// New returns a Client over rdb: a *redis.Client, *redis.ClusterClient, a Sentinel failover
// client or any other redis.Scripter.
func New(rdb redis.Scripter) *Client {
	return &Client{rdb: rdb}
}

// Options tune one Obtain or WithLock call. The zero value makes a single attempt and issues a
// fencing token.
type Options struct {
	// Retry decides whether and when to try again while the lock is held by someone else.
	// Nil means NoRetry.
	Retry RetryStrategy

	// Fenceless skips the fencing counter: Lock.Fence reports 0 and no counter key is created.
	// Use it for locks whose holders write nowhere a fencing token could be checked (claims on
	// short-lived names, for example), so that Redis keeps no counter per name.
	Fenceless bool

	// Detached keeps the work started by WithLock or WithLocks running when the caller's
	// context is cancelled after the locks were obtained; only losing a lock cancels it then.
	// Use it when work that has begun must be allowed to finish (a database commit whose
	// outcome the caller must learn). The work should bound itself with a timeout.
	Detached bool
}

func (o *Options) retry() RetryStrategy {
	if o == nil || o.Retry == nil {
		return NoRetry()
	}
	return o.Retry
}

// Lock is a held lock. Its methods are safe for concurrent use.
type Lock struct {
	client  *Client
	name    string
	lockKey string
	token   string
	fence   int64
	ttl     time.Duration

	mu       sync.Mutex
	until    time.Time // local, conservative end of the lease (monotonic clock)
	released bool
}

// Obtain takes the lock called name for ttl, trying again as opt.Retry says while someone else
// holds it, and never past ctx's deadline.
//
// It returns ErrNotObtained when the lock stayed held by others; the context's error (wrapped)
// when ctx was cancelled, or when its deadline passed during a Redis call; and the Redis error
// (wrapped) when Redis could not be reached. ttl must be at least one millisecond.
func (c *Client) Obtain(ctx context.Context, name string, ttl time.Duration, opt *Options) (*Lock, error) {
	if ttl < time.Millisecond {
		return nil, fmt.Errorf("lock: obtain %q: ttl %v is below 1ms", name, ttl)
	}
	lockKey, fenceKey := keysFor(name)
	token := rand.Text()
	fenced := "1"
	if opt != nil && opt.Fenceless {
		fenced = "0"
	}
	retry := opt.retry()
	deadline, hasDeadline := ctx.Deadline()
	contended := false

	for failed := 1; ; failed++ {
		// The lease is measured from before the request: Redis may set the key at any point
		// until the reply arrives, so this is the latest the lease can safely be assumed to end.
		start := time.Now()
		reply, err := obtainScript.Run(ctx, c.rdb, []string{lockKey, fenceKey}, token, ttl.Milliseconds(), fenced).Int64Slice()
		if err != nil {
			// A deadline that strikes mid-call after the key was seen held ends a wait for a
			// holder, not a Redis failure.
			if contended && ctx.Err() != nil && errors.Is(err, context.DeadlineExceeded) {
				return nil, ErrNotObtained
			}
			return nil, fmt.Errorf("lock: obtain %q: %w", name, err)
		}
		if len(reply) != 2 {
			return nil, fmt.Errorf("lock: obtain %q: unexpected reply %v", name, reply)
		}
		if reply[0] == 1 {
			return &Lock{
				client: c, name: name, lockKey: lockKey, token: token,
				fence: reply[1], ttl: ttl, until: start.Add(ttl),
			}, nil
		}

		contended = true
		pause := retry.Backoff(failed)
		if pause < 0 || hasDeadline && time.Until(deadline) <= pause {
			return nil, ErrNotObtained
		}
		if err := sleep(ctx, pause); err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				return nil, ErrNotObtained
			}
			return nil, fmt.Errorf("lock: obtain %q: %w", name, err)
		}
	}
}

// sleep waits for d or until ctx ends, whichever comes first.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Name returns the name the lock was obtained under.
func (l *Lock) Name() string { return l.name }

// Token returns the random value that identifies this holder in Redis.
func (l *Lock) Token() string { return l.token }

// Fence returns the fencing token issued with the lock: larger than every token issued earlier
// for the same name. It is 0 for locks obtained with Options.Fenceless.
func (l *Lock) Fence() int64 { return l.fence }

// Until returns the local time by which the lease ends unless refreshed. It is conservative:
// measured from before the request that set or extended the lease.
func (l *Lock) Until() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.until
}

// TTL returns the remaining lease as Redis sees it. It returns ErrNotHeld when the lock is no
// longer held by this holder, and the Redis error (wrapped) when Redis could not be asked.
func (l *Lock) TTL(ctx context.Context) (time.Duration, error) {
	ms, err := ttlScript.Run(ctx, l.client.rdb, []string{l.lockKey}, l.token).Int64()
	if err != nil {
		return 0, fmt.Errorf("lock: ttl %q: %w", l.name, err)
	}
	if ms < 0 {
		return 0, ErrNotHeld
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// Refresh extends the lease to ttl from now. It returns ErrNotHeld when the lock was lost or
// released, and the Redis error (wrapped) when Redis could not be reached; the lease then ends
// as before.
func (l *Lock) Refresh(ctx context.Context, ttl time.Duration) error {
	if ttl < time.Millisecond {
		return fmt.Errorf("lock: refresh %q: ttl %v is below 1ms", l.name, ttl)
	}
	l.mu.Lock()
	released := l.released
	l.mu.Unlock()
	if released {
		return ErrNotHeld
	}
	start := time.Now()
	n, err := refreshScript.Run(ctx, l.client.rdb, []string{l.lockKey}, l.token, ttl.Milliseconds()).Int64()
	if err != nil {
		return fmt.Errorf("lock: refresh %q: %w", l.name, err)
	}
	if n != 1 {
		return ErrNotHeld
	}
	l.mu.Lock()
	l.until = start.Add(ttl)
	l.mu.Unlock()
	return nil
}

// Release deletes the lock if this holder still holds it. It is safe to call more than once:
// calls after a successful one do nothing and return nil.
//
// Release does not inherit ctx's cancellation — a request that was cancelled must still give
// its lock back — and is bounded by a short timeout of its own instead. It returns ErrNotHeld
// when the lease had already ended (someone else may hold the lock now; their lock is left
// alone), and the Redis error (wrapped) when Redis could not be reached, in which case the
// lock expires with its lease.
func (l *Lock) Release(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.released {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), releaseTimeout)
	defer cancel()
	n, err := releaseScript.Run(ctx, l.client.rdb, []string{l.lockKey}, l.token).Int64()
	if err != nil {
		return fmt.Errorf("lock: release %q: %w", l.name, err)
	}
	l.released = true
	if n != 1 {
		return ErrNotHeld
	}
	return nil
}
