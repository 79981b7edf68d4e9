package lock_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/lock"
	"github.com/stocksvc/stocksvc/internal/testenv"
)

// fencedSet is storage that checks fencing tokens, on the test's private Redis: it stores
// ARGV[2] at KEYS[1] only if the fence ARGV[1] is at least the largest fence it accepted
// (kept at KEYS[2]). Returns 1 when written, 0 when refused.
var fencedSet = redis.NewScript(`
local highest = tonumber(redis.call('GET', KEYS[2]) or '0')
if tonumber(ARGV[1]) < highest then
  return 0
end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
return 1
`)

const (
	storageKey   = "storage"
	storageFence = "storage:fence"
	// pausedHolderEnv tells the test binary to act as the holder of TestPausedHolderIsFencedOff;
	// its value is the address of the Redis to use.
	pausedHolderEnv = "LOCK_TEST_PAUSED_HOLDER_REDIS"
)

// write stores value with fence in the fenced storage and says what became of it.
func write(ctx context.Context, rdb *redis.Client, fence int64, value string) string {
	n, err := fencedSet.Run(ctx, rdb, []string{storageKey, storageFence}, fence, value).Int()
	switch {
	case err != nil:
		return "error " + err.Error()
	case n == 1:
		return "written"
	default:
		return "refused"
	}
}

// TestHelperPausedHolder is the holder process of TestPausedHolderIsFencedOff; run on its own
// it does nothing. It obtains the lock with a short lease and no refresh, prints its fence,
// and once told to go on (a line on stdin), writes to the fenced storage and releases,
// printing what became of each.
func TestHelperPausedHolder(t *testing.T) {
	addr := os.Getenv(pausedHolderEnv)
	if addr == "" {
		t.Skip("runs only as the child process of TestPausedHolderIsFencedOff")
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	l, err := lock.New(rdb).Obtain(ctx, lockName("", "paused"), 500*time.Millisecond, nil)
	if err != nil {
		t.Fatalf("Obtain: %v", err)
	}
	fmt.Printf("fence %d\n", l.Fence())
	if !bufio.NewScanner(os.Stdin).Scan() {
		t.Fatal("stdin closed before the go-ahead")
	}
	fmt.Printf("write %s\n", write(ctx, rdb, l.Fence(), "child"))
	switch err := l.Release(ctx); {
	case err == nil:
		fmt.Println("release ok")
	case errors.Is(err, lock.ErrNotHeld):
		fmt.Println("release not-held")
	default:
		fmt.Printf("release error %v\n", err)
	}
}

// TestPausedHolderIsFencedOff stops a holder process (SIGSTOP) until its lease runs out, takes
// the lock and writes, then lets the holder go on: its late write carries a smaller fence and
// the storage refuses it, and its late Release reports ErrNotHeld and leaves the new holder's
// lock in place.
func TestPausedHolderIsFencedOff(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	name := lockName("", "paused")

	child := exec.Command(os.Args[0], "-test.run=^TestHelperPausedHolder$", "-test.count=1", "-test.timeout=60s")
	child.Env = append(os.Environ(), pausedHolderEnv+"="+srv.Addr())
	child.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	child.Stderr = &stderr
	stdin, err := child.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatalf("start holder process: %v", err)
	}
	exited := false
	t.Cleanup(func() {
		if !exited {
			_ = child.Process.Signal(syscall.SIGCONT)
			_ = child.Process.Kill()
			_ = child.Wait()
		}
	})
	lines := bufio.NewScanner(stdout)
	// next returns the value of the child's next line that starts with key.
	next := func(key string) string {
		t.Helper()
		for lines.Scan() {
			if v, ok := strings.CutPrefix(lines.Text(), key+" "); ok {
				return v
			}
		}
		t.Fatalf("holder process ended without printing %q; stderr:\n%s", key, stderr.String())
		return ""
	}

	childFence, err := strconv.ParseInt(next("fence"), 10, 64)
	if err != nil {
		t.Fatalf("holder's fence: %v", err)
	}
	if err := child.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP holder: %v", err)
	}
	waitExpired(t, rdb, name)

	l := obtain(t, lock.New(rdb), name, time.Minute, nil)
	if l.Fence() <= childFence {
		t.Errorf("new holder's fence %d is not above the paused holder's %d", l.Fence(), childFence)
	}
	if got := write(t.Context(), rdb, l.Fence(), "parent"); got != "written" {
		t.Fatalf("new holder's write: %s", got)
	}

	if err := child.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("SIGCONT holder: %v", err)
	}
	if _, err := io.WriteString(stdin, "go on\n"); err != nil {
		t.Fatalf("tell holder to go on: %v", err)
	}
	if got, want := next("write"), "refused"; got != want {
		t.Errorf("paused holder's late write: %s, want %s", got, want)
	}
	if got, want := next("release"), "not-held"; got != want {
		t.Errorf("paused holder's late Release: %s, want %s", got, want)
	}
	_ = stdin.Close()
	err = child.Wait()
	exited = true
	if err != nil {
		t.Errorf("holder process: %v; stderr:\n%s", err, stderr.String())
	}

	if got := value(t, rdb, storageKey); got != "parent" {
		t.Errorf("storage holds %q, want the new holder's write", got)
	}
	if got := value(t, rdb, name); got != l.Token() {
		t.Errorf("lock key holds %q after the paused holder's Release, want the new holder's token", got)
	}
	if err := l.Release(t.Context()); err != nil {
		t.Errorf("new holder's Release: %v", err)
	}
}

// TestFenceGrowsAcrossRestart restarts Redis empty (no persistence) between grants: the fences
// issued afterwards are still larger than every fence issued before.
func TestFenceGrowsAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.StartRedis(t)
	rdb := srv.Client()
	c := lock.New(rdb)
	name := lockName("", "restart")
	var highest int64
	for restart := range 3 {
		if restart > 0 {
			srv.Restart()
			if exists(t, rdb, fenceKey(name)) {
				t.Fatal("the fencing counter survived a restart without persistence: the test restarts nothing")
			}
		}
		for i := range 20 {
			l := obtain(t, c, name, time.Minute, nil)
			if l.Fence() <= highest {
				t.Errorf("after %d restarts, grant %d: fence %d is not above the highest before, %d", restart, i, l.Fence(), highest)
			}
			highest = max(highest, l.Fence())
			if err := l.Release(t.Context()); err != nil {
				t.Fatalf("Release: %v", err)
			}
		}
	}
}

// events records what happened, in order, from any goroutine.
type events struct {
	mu   sync.Mutex
	list []string
}

func (e *events) add(ev string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.list = append(e.list, ev)
}

func (e *events) get() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]string(nil), e.list...)
}

// TestPausedRedisCancelsHolder pauses Redis (SIGSTOP) while A works under WithLocks with a short
// lease, and B polls for the same lock. A cannot refresh; its work must be cancelled with
// ErrNotHeld by the time its lease ends — without an answer from Redis, however long the
// client's calls would hang — and before B obtains the lock once Redis resumes.
func TestPausedRedisCancelsHolder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opt  redis.Options // for A's client; Addr is filled in
	}{
		{name: "default client"},
		{name: "client without read timeout", opt: redis.Options{ReadTimeout: -1}},
		{name: "client honouring contexts", opt: redis.Options{ContextTimeoutEnabled: true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			opt := tt.opt
			opt.Addr = srv.Addr()
			rdbA := redis.NewClient(&opt)
			defer rdbA.Close()
			rdbB := srv.Client()
			name := lockName("", "paused-redis")
			const ttl = 300 * time.Millisecond
			var ev events
			var fenceA, fenceB int64
			var causeA, errA, errB error

			working := make(chan struct{})
			cancelled := make(chan struct{})
			var wg sync.WaitGroup
			wg.Go(func() {
				errA = withLock(t.Context(), lock.New(rdbA), name, ttl, func(ctx context.Context, l *lock.Lock) error {
					fenceA = l.Fence()
					ev.add("A obtained")
					close(working)
					select {
					case <-ctx.Done():
					case <-time.After(guard):
						return errGuard
					}
					causeA = context.Cause(ctx)
					ev.add("A cancelled") // and its work stops here
					close(cancelled)
					return ctx.Err()
				}, nil)
			})
			select {
			case <-working:
			case <-time.After(guard):
				t.Fatal("A never started working")
			}
			// B's connection is up before the pause, so nothing but the pause holds B up.
			if err := rdbB.Ping(t.Context()).Err(); err != nil {
				t.Fatal(err)
			}
			srv.Pause()
			paused := time.Now()
			wg.Go(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				l, err := lock.New(rdbB).Obtain(ctx, name, time.Minute, &lock.Options{Retry: lock.Linear(time.Millisecond, 5*time.Millisecond)})
				if err != nil {
					errB = err
					return
				}
				ev.add("B obtained")
				fenceB = l.Fence()
				errB = l.Release(ctx)
			})
			// Redis answers nothing until A's work is cancelled: A must notice on its own.
			select {
			case <-cancelled:
				t.Logf("A's work was cancelled %v after Redis paused (lease %v)", time.Since(paused), ttl)
			case <-time.After(guard):
				t.Error("A's work was not cancelled while Redis was paused")
			}
			srv.Resume()
			wg.Wait()

			if !errors.Is(causeA, lock.ErrNotHeld) {
				t.Errorf("cause of A's cancellation = %v, want ErrNotHeld", causeA)
			}
			if !errors.Is(errA, lock.ErrNotHeld) {
				t.Errorf("A's WithLocks = %v, want an error matching ErrNotHeld", errA)
			}
			if errB != nil {
				t.Fatalf("B: %v", errB)
			}
			if got, want := ev.get(), []string{"A obtained", "A cancelled", "B obtained"}; !slices.Equal(got, want) {
				t.Errorf("events %q, want %q", got, want)
			}
			if fenceB <= fenceA {
				t.Errorf("B's fence %d is not above A's %d", fenceB, fenceA)
			}
		})
	}
}

// lostReply makes the next obtain script a client runs whose reply matches want reach Redis
// twice, as when its reply is lost and go-redis sends the command again (it retries timeouts
// and broken connections by itself, scripts included).
type lostReply struct {
	armed atomic.Bool
	want  func(code int64) bool // on the first element of the obtain script's reply
}

func (h *lostReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *lostReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *lostReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); err != nil || name != "evalsha" && name != "eval" || !h.armed.Load() {
			return err // a NOSCRIPT error: Script.Run tries again with EVAL
		}
		c, ok := cmd.(*redis.Cmd)
		if !ok {
			return err
		}
		reply, rerr := c.Slice()
		if rerr != nil || len(reply) < 2 {
			return err
		}
		if code, ok := reply[0].(int64); ok && h.want(code) && h.armed.CompareAndSwap(true, false) {
			return next(ctx, cmd)
		}
		return err
	}
}

func granted(code int64) bool { return code == 1 }
func heldBy(code int64) bool  { return code == 0 }

// TestLostReplyIsRecognised sends a script twice, as a client retrying after a lost reply does.
// When the first run granted the lock, the second must see that it went to the same caller,
// instead of reporting it held by someone else (the caller would then wait for itself until
// the lease ran out, and nobody would hold the lock meanwhile). When the first run put a waiter
// in line, the second must not put it there again (the lock would later be given a second time
// to a token nobody holds any more).
func TestLostReplyIsRecognised(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	tests := []struct {
		name string
		want func(code int64) bool // the reply of the script sent twice (its first element)
		// run obtains a lock with h armed, and releases it; it returns the lock's token and
		// fence.
		run func(t *testing.T, rdb *redis.Client, prefix string, h *lostReply) (name, token string, fence int64, err error)
	}{
		{
			name: "single attempt", want: granted,
			run: func(t *testing.T, rdb *redis.Client, prefix string, h *lostReply) (string, string, int64, error) {
				name := lockName(prefix, "once")
				h.armed.Store(true)
				l, err := lock.New(rdb).Obtain(ctx, name, time.Minute, nil)
				if err != nil {
					return name, "", 0, err
				}
				return name, l.Token(), l.Fence(), l.Release(ctx)
			},
		},
		{
			name: "wait, free", want: granted,
			run: func(t *testing.T, rdb *redis.Client, prefix string, h *lostReply) (string, string, int64, error) {
				name := lockName(prefix, "wait")
				c := newWaitingClient(t, rdb, prefix, nil)
				h.armed.Store(true)
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				l, err := c.Obtain(wctx, name, time.Minute, &lock.Options{Wait: true})
				if err != nil {
					return name, "", 0, err
				}
				return name, l.Token(), l.Fence(), l.Release(ctx)
			},
		},
		{
			// The waiter's look after the holder's key was deleted takes the lock.
			name: "wait, freed while in line", want: granted,
			run: func(t *testing.T, rdb *redis.Client, prefix string, h *lostReply) (string, string, int64, error) {
				name := lockName(prefix, "freed")
				c := lock.New(rdb, lock.WithNamespace(prefix), lock.WithRecheck(50*time.Millisecond))
				t.Cleanup(func() { _ = c.Close() })
				obtain(t, lock.New(rdb), name, time.Minute, nil)
				h.armed.Store(true)
				w := startWaiter(t, c, name, time.Minute)
				waitFor(t, func() bool { return listLen(t, rdb, name+":waiters") == 1 })
				del(t, rdb, name)
				l, err := w.result()
				if err != nil {
					return name, "", 0, err
				}
				if n := listLen(t, rdb, name+":waiters"); n != 0 {
					t.Errorf("%d entries left in line by the waiter that took the lock", n)
				}
				return name, l.Token(), l.Fence(), l.Release(ctx)
			},
		},
		{
			// The waiter's first attempt finds the lock held and puts it in line, twice.
			name: "wait, held", want: heldBy,
			run: func(t *testing.T, rdb *redis.Client, prefix string, h *lostReply) (string, string, int64, error) {
				name := lockName(prefix, "held")
				c := newWaitingClient(t, rdb, prefix, nil)
				holder := obtain(t, lock.New(rdb), name, time.Minute, nil)
				h.armed.Store(true)
				w := startWaiter(t, c, name, time.Minute)
				waitFor(t, func() bool { return !h.armed.Load() })
				if n := listLen(t, rdb, name+":waiters"); n != 1 {
					t.Errorf("waiter is %d times in line, want once", n)
				}
				release(t, holder)
				l, err := w.result()
				if err != nil {
					return name, "", 0, err
				}
				return name, l.Token(), l.Fence(), l.Release(ctx)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			h := &lostReply{want: tt.want}
			rdb.AddHook(h)
			name, token, fence, err := tt.run(t, rdb, prefix, h)
			if err != nil {
				t.Fatalf("got %v, want the lock", err)
			}
			if h.armed.Load() {
				t.Fatal("no script was sent twice: the test tested nothing")
			}
			if token == "" || fence <= 0 {
				t.Errorf("lock with token %q and fence %d", token, fence)
			}
			if got, want := value(t, rdb, fenceKey(name)), strconv.FormatInt(fence, 10); got != want {
				t.Errorf("fencing counter %s, want the lock's fence %s", got, want)
			}
			if exists(t, rdb, name) {
				t.Errorf("lock still held after Release (value %q): given to a token nobody holds?", value(t, rdb, name))
			}
		})
	}
}

// droppedReply lets the next script a client runs reach Redis and run there, then reports a
// timeout instead of its reply: what a caller sees when its deadline strikes mid-call.
type droppedReply struct{ armed atomic.Bool }

func (h *droppedReply) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *droppedReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h *droppedReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); (name == "evalsha" || name == "eval") && err == nil && h.armed.CompareAndSwap(true, false) {
			return errDropped
		}
		return err
	}
}

var errDropped = errors.New("i/o timeout (reply dropped by the test)")

// TestDroppedReplyLeavesNoLock: an attempt whose script granted the lock but whose reply never
// came back fails — and must not leave the lock held by a token nobody has, which would stop
// everyone for the whole lease. The lock is freed, or given to the next client in line. When
// the clean-up is lost too, the lock stays held under that token, and the client's next attempt
// on the name sweeps it instead of waiting out the lease (a minute, against a wait of 5 s).
func TestDroppedReplyLeavesNoLock(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		opt         *lock.Options
		cleanupLost bool
	}{
		{"single attempt", nil, false},
		{"wait", &lock.Options{Wait: true}, false},
		{"single attempt, clean-up lost", nil, true},
		{"wait, clean-up lost", &lock.Options{Wait: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, prefix := testenv.Redis(t)
			h := &lostCleanup{lose: tc.cleanupLost}
			rdb.AddHook(h)
			name := lockName(prefix, "dropped")
			c := newWaitingClient(t, rdb, prefix, nil)
			h.armed.Store(true)
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
			defer cancel()
			if l, err := c.Obtain(ctx, name, time.Minute, tc.opt); err == nil {
				t.Fatalf("Obtain = %v, nil; want the dropped reply's error", l.Token())
			}
			if h.armed.Load() {
				t.Fatal("no reply was dropped: the test tested nothing")
			}
			if !tc.cleanupLost {
				if exists(t, rdb, name) {
					t.Fatalf("the lock is held by the attempt whose reply was dropped (value %q)", value(t, rdb, name))
				}
				// Anyone can take it at once.
				other := newWaitingClient(t, rdb, prefix, nil)
				release(t, obtain(t, other, name, time.Minute, nil))
				return
			}
			if !exists(t, rdb, name) {
				t.Fatal("the lock is free: the clean-up was not lost, and the test tests nothing")
			}
			l, err := c.Obtain(ctx, name, time.Minute, &lock.Options{Wait: true})
			if err != nil {
				t.Fatalf("next Obtain with the orphaned lock still on its lease: %v", err)
			}
			release(t, l)
		})
	}
}

// TestRedisFailureIsNotContention: when Redis fails, a crowd of waiters for one lock in one
// client is told so, each by its own attempt, never ErrNotObtained (which means the lock was
// seen held) — with Redis gone (refused connections, however long go-redis's default dial
// retries take), and with Redis paused (connections taken, nothing answered: the waits end with
// their deadline). Once Redis is back, the client works: the attempts a paused Redis ran late,
// after their clean-up failed, are swept.
func TestRedisFailureIsNotContention(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		fail, recover func(*testenv.RedisServer)
		budget        time.Duration
		wantDeadline  bool
	}{
		{"down", (*testenv.RedisServer).Kill, (*testenv.RedisServer).Restart, 5 * time.Second, false},
		{"paused", (*testenv.RedisServer).Pause, (*testenv.RedisServer).Resume, time.Second, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := testenv.StartRedis(t)
			c := newWaitingClient(t, srv.Client(), "", nil)
			wait := &lock.Options{Wait: true}
			release(t, obtain(t, c, "failing", time.Minute, wait)) // Redis was up

			tc.fail(srv)
			errs := make([]error, 8)
			var wg sync.WaitGroup
			for i := range errs {
				wg.Go(func() {
					ctx, cancel := context.WithTimeout(t.Context(), tc.budget)
					defer cancel()
					// A short lease: a paused server runs the unanswered attempts when it
					// resumes, possibly after the client's clean-up.
					l, err := c.Obtain(ctx, "failing", 2*time.Second, wait)
					if err == nil {
						_ = l.Release(context.Background())
					}
					errs[i] = err
				})
			}
			wg.Wait()
			for i, err := range errs {
				if err == nil || errors.Is(err, lock.ErrNotObtained) || errors.Is(err, context.DeadlineExceeded) != tc.wantDeadline {
					t.Errorf("waiter %d: %v, want Redis's failure (a deadline: %v), not ErrNotObtained", i, err, tc.wantDeadline)
				}
			}

			tc.recover(srv)
			testenv.Poll(t, 30*time.Second, "the lock to be obtainable once Redis is back", func() bool {
				l, err := c.Obtain(t.Context(), "failing", time.Minute, wait)
				return err == nil && l.Release(context.Background()) == nil
			})
		})
	}
}

// stalledDials holds every new connection's dial, once armed, until released: what a client
// sees of a Redis that takes connections and never answers, on new connections only.
type stalledDials struct {
	armed   atomic.Bool
	stalled chan struct{} // closed at the first stalled dial
	release chan struct{}
	once    sync.Once
}

func (h *stalledDials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if h.armed.Load() {
			h.once.Do(func() { close(h.stalled) })
			select {
			case <-h.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		return next(ctx, network, addr)
	}
}

func (h *stalledDials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *stalledDials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestStalledSubscriptionBlocksNoOtherLock: a waiter's first wait starts the client's
// subscription to grant messages. If Redis does not answer it, the client's other locks
// must go on regardless: nothing may wait on Redis while holding what every lock of the client
// shares.
func TestStalledSubscriptionBlocksNoOtherLock(t *testing.T) {
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	c := newWaitingClient(t, rdb, prefix, nil)
	wait := &lock.Options{Wait: true}
	held, free := lockName(prefix, "held"), lockName(prefix, "free")
	release(t, obtain(t, c, free, time.Minute, wait)) // a pooled connection for what follows

	other := newWaitingClient(t, rdb, prefix, nil)
	holder := obtain(t, other, held, time.Minute, nil)

	h := &stalledDials{stalled: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(h)
	h.armed.Store(true)
	var unstall sync.Once
	defer unstall.Do(func() { close(h.release) })

	// obtainAndRelease reports, on the channel it returns, how a turn on name went.
	obtainAndRelease := func(name string) <-chan error {
		result := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			l, err := c.Obtain(ctx, name, time.Minute, wait)
			if err == nil {
				err = l.Release(ctx)
			}
			result <- err
		}()
		return result
	}

	// A waiter for the held lock subscribes, on a new connection: its dial stalls.
	waiting := obtainAndRelease(held)
	<-h.stalled

	// Meanwhile the free lock is had and let go, over the connection already pooled. (If it
	// waits for the stalled dial instead, the guard below lets the dial go, so that the test
	// fails rather than hangs.)
	done := obtainAndRelease(free)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("another lock while the subscription stalls: %v", err)
		}
	case <-time.After(guard):
		unstall.Do(func() { close(h.release) })
		t.Errorf("another lock of the client waited for the stalled subscription (%v, released after %v)", <-done, guard)
	}
	h.armed.Store(false)
	unstall.Do(func() { close(h.release) })
	release(t, holder) // the waiter gets it once the subscription is through, or by its timer
	if err := <-waiting; err != nil {
		t.Errorf("the waiter behind the stalled subscription: %v", err)
	}
}

// lostCleanup is droppedReply that, with lose, also fails the next script, the attempt's
// clean-up, without running it: an attempt that took the lock, whose caller never learned it,
// and whose clean-up never reached Redis — what a paused Redis can leave when it runs them in
// the wrong order.
type lostCleanup struct {
	droppedReply
	lose    bool
	dropped atomic.Bool // the reply was dropped; the next script is the clean-up
}

func (h *lostCleanup) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	dropping := h.droppedReply.ProcessHook(next)
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name != "evalsha" && name != "eval" {
			return next(ctx, cmd)
		}
		if h.lose && h.dropped.CompareAndSwap(true, false) {
			return errors.New("connection reset (clean-up lost by the test)")
		}
		armed := h.armed.Load()
		err := dropping(ctx, cmd)
		if armed && !h.armed.Load() {
			h.dropped.Store(true)
		}
		return err
	}
}
