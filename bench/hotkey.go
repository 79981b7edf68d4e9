package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// HotKeyConfig describes one hot-key measurement.
type HotKeyConfig struct {
	// Workers take turns on the one lock. Each asks for it, holds it for Hold, releases it and
	// asks again at once: a closed loop with no think time, the harshest case for fairness.
	Workers int
	// Hold is the critical section (a sleep standing for work).
	Hold time.Duration
	// Acquisitions ends the measurement after that many turns; 0 means no limit.
	Acquisitions int
	// Duration ends the measurement after that long; 0 means no limit. One of the two must be
	// set.
	Duration time.Duration
}

// HotKeyResult is what one hot-key measurement found.
type HotKeyResult struct {
	Acquisitions int
	Elapsed      time.Duration
	// Waits are the times from asking to holding, one per acquisition, followed by the waits
	// still going on when the measurement ended (Censored of them): those count with the time
	// they had waited so far, a lower bound, so that a worker starved until the end is not left
	// out of the tail.
	Waits    []time.Duration
	Censored int
	// MaxStreak is the longest run of turns won back to back by one worker while at least one
	// other worker was waiting.
	MaxStreak int
	// Wins are the turns each worker had; MinWins and MaxWins the fewest and most.
	Wins             []int
	MinWins, MaxWins int
	// GaveUp counts the times an implementation stopped waiting while the lock was held (its
	// retry budget ran out); the worker then asked again, its wait still running.
	GaveUp int
	// Overlaps counts turns that began while another worker held the lock. It must be 0.
	Overlaps int
	// Calls are the Redis commands run, by command, from INFO commandstats (commands run by
	// scripts included); RoundTrips are the requests the clients sent.
	Calls      map[string]CommandStat
	RoundTrips int64
	// ServerTime is the time Redis spent running the commands the clients sent (a script's
	// time including that of the commands it ran).
	ServerTime time.Duration
}

// Throughput is acquisitions per second.
func (r HotKeyResult) Throughput() float64 { return float64(r.Acquisitions) / r.Elapsed.Seconds() }

// WaitQuantile returns the q-quantile (0 < q ≤ 1) of the waits, nearest rank.
func (r HotKeyResult) WaitQuantile(q float64) time.Duration { return quantile(r.Waits, q) }

// CallsPerAcquisition is the Redis commands run per acquisition.
func (r HotKeyResult) CallsPerAcquisition() float64 {
	return float64(sum(r.Calls)) / float64(max(r.Acquisitions, 1))
}

// ServerTimePerAcquisition is the time Redis spent per acquisition.
func (r HotKeyResult) ServerTimePerAcquisition() time.Duration {
	return r.ServerTime / time.Duration(max(r.Acquisitions, 1))
}

// RoundTripsPerAcquisition is the requests sent to Redis per acquisition.
func (r HotKeyResult) RoundTripsPerAcquisition() float64 {
	return float64(r.RoundTrips) / float64(max(r.Acquisitions, 1))
}

// HotKey runs cfg against c on srv: it empties srv and resets its statistics first, so nothing
// else may use srv meanwhile.
func HotKey(ctx context.Context, srv *Server, c Contender, cfg HotKeyConfig) (HotKeyResult, error) {
	if cfg.Workers < 1 || cfg.Acquisitions <= 0 && cfg.Duration <= 0 {
		return HotKeyResult{}, fmt.Errorf("hot key: bad config %+v", cfg)
	}
	if err := srv.Reset(ctx); err != nil {
		return HotKeyResult{}, err
	}
	f := openFleet(c, srv.Addr(), cfg.Workers)
	// A first obtain and release per client loads the obtain and release scripts and opens a
	// connection, so that the measurement sees neither. (Scripts used only under contention,
	// such as package lock's forget script, load on first use: one EVAL per case.)
	for i := range f.lockers {
		if err := warmUp(ctx, f.locker(i), namespace+"warm-up"); err != nil {
			_ = f.close()
			return HotKeyResult{}, fmt.Errorf("%s: %w", c.Name, err)
		}
	}
	if err := srv.Reset(ctx); err != nil {
		_ = f.close()
		return HotKeyResult{}, err
	}
	f.count.n.Store(0)

	h := &hotKey{cfg: cfg, key: namespace + "hot", wins: make([]int, cfg.Workers), last: -1}
	var runCtx context.Context
	var stop context.CancelFunc
	if cfg.Duration > 0 {
		runCtx, stop = context.WithTimeout(ctx, cfg.Duration)
	} else {
		runCtx, stop = context.WithCancel(ctx)
	}
	h.stop = stop
	start := time.Now()
	h.stopAt = start.Add(cfg.Duration)
	var wg sync.WaitGroup
	errs := make([]error, cfg.Workers)
	for i := range cfg.Workers {
		wg.Go(func() { errs[i] = h.work(runCtx, i, f.locker(i)) })
	}
	wg.Wait()
	stop()
	res := h.result(start)
	if err := errors.Join(errs...); err != nil {
		_ = f.close()
		return res, fmt.Errorf("%s: %w", c.Name, err)
	}
	if err := f.close(); err != nil {
		return res, fmt.Errorf("%s: close: %w", c.Name, err)
	}
	res.RoundTrips = f.count.n.Load()
	calls, err := srv.CommandStats(ctx)
	if err != nil {
		return res, err
	}
	res.Calls = calls
	res.ServerTime = serverTime(calls, f.count.sentNames())
	return res, nil
}

func warmUp(ctx context.Context, l locker, key string) error {
	release, err := l.acquire(ctx, key)
	if err != nil {
		return fmt.Errorf("warm up: %w", err)
	}
	return release(ctx)
}

// hotKey is the shared state of one measurement's workers.
type hotKey struct {
	cfg     HotKeyConfig
	key     string
	stop    context.CancelFunc
	asking  atomic.Int64 // workers between asking and holding
	holders atomic.Int64 // workers holding the lock (more than one is an overlap)
	overlap atomic.Int64

	mu       sync.Mutex
	acquired int
	stopAt   time.Time // when the measurement was to end (the limit of turns or of time)
	lastWin  time.Time
	waits    []time.Duration
	censored []time.Duration
	gaveUp   int
	wins     []int
	last     int // the worker that won the last turn
	streak   int
	best     int
}

// work is one worker's loop. It returns an error only for failures other than contention.
func (h *hotKey) work(ctx context.Context, id int, l locker) error {
	for ctx.Err() == nil {
		asked := time.Now()
		h.asking.Add(1)
		var release func(context.Context) error
		for {
			var err error
			release, err = l.acquire(ctx, h.key)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				h.asking.Add(-1)
				h.mu.Lock()
				h.censored = append(h.censored, time.Since(asked))
				h.mu.Unlock()
				return nil
			}
			if !errors.Is(err, errGaveUp) {
				h.asking.Add(-1)
				h.stop()
				return fmt.Errorf("worker %d: %w", id, err)
			}
			h.mu.Lock()
			h.gaveUp++
			h.mu.Unlock()
		}
		waited := time.Since(asked)
		h.asking.Add(-1)
		if h.holders.Add(1) != 1 {
			h.overlap.Add(1)
		}
		h.won(id, waited, h.asking.Load() > 0)
		time.Sleep(h.cfg.Hold)
		h.holders.Add(-1)
		// The release must happen even after the measurement ended: other workers may still
		// be in a call that is about to return.
		if err := release(context.WithoutCancel(ctx)); err != nil {
			h.stop()
			return fmt.Errorf("worker %d: release: %w", id, err)
		}
	}
	return nil
}

// won records a turn. othersWaiting says whether another worker was waiting for it.
func (h *hotKey) won(id int, waited time.Duration, othersWaiting bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.acquired++
	h.waits = append(h.waits, waited)
	h.wins[id]++
	if id == h.last && othersWaiting {
		h.streak++
	} else {
		h.streak = 1
	}
	h.last = id
	h.best = max(h.best, h.streak)
	h.lastWin = time.Now()
	if h.cfg.Acquisitions > 0 && h.acquired == h.cfg.Acquisitions {
		h.stopAt = h.lastWin
		h.stop()
	}
}

// result sums up a measurement that started at start. Turns won just after the end (by
// workers whose call was already returning) count, and so does the time they took.
func (h *hotKey) result(start time.Time) HotKeyResult {
	h.mu.Lock()
	defer h.mu.Unlock()
	end := h.stopAt
	if h.lastWin.After(end) {
		end = h.lastWin
	}
	r := HotKeyResult{
		Acquisitions: h.acquired,
		Elapsed:      end.Sub(start),
		Waits:        append(slices.Clone(h.waits), h.censored...),
		Censored:     len(h.censored),
		MaxStreak:    h.best,
		Wins:         slices.Clone(h.wins),
		MinWins:      slices.Min(h.wins),
		MaxWins:      slices.Max(h.wins),
		GaveUp:       h.gaveUp,
		Overlaps:     int(h.overlap.Load()),
	}
	return r
}

// quantile returns the q-quantile of ds by nearest rank, or 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// serverTime sums the time of the commands in sent: those a client sent itself, whose time
// includes that of the commands their scripts ran.
func serverTime(calls map[string]CommandStat, sent map[string]bool) time.Duration {
	var usec int64
	for name := range sent {
		usec += calls[name].Usec
	}
	return time.Duration(usec) * time.Microsecond
}

// sum returns the calls of all commands in m.
func sum(m map[string]CommandStat) int64 {
	var n int64
	for _, v := range m {
		n += v.Calls
	}
	return n
}
