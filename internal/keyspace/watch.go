package keyspace

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stocksvc/stocksvc/internal/clock"
)

// Replica is a running replica as a Register records it.
type Replica struct {
	// ID is the replica's own, random for each process.
	ID string
	// Host, Prefix and Redis say where it runs and which key space it uses, for people:
	// its host name, its key prefix, and its Redis URL with the secrets masked.
	Host, Prefix, Redis string
	// Space holds the tokens of the key spaces it takes its product locks in: one, or one per
	// Redlock node it has reached. Two replicas whose tokens have one in common share a lock
	// space.
	Space []string
	// Seen is when the Register last heard from it, by the Register's clock.
	Seen time.Time
}

func (r Replica) String() string {
	return fmt.Sprintf("%s (host %s, prefix %q on %s)", r.ID, r.Host, r.Prefix, r.Redis)
}

// Register records the running replicas of a database and the lock space of each. Its clock
// alone says when a replica was seen, so that the replicas' clocks do not matter.
type Register interface {
	// Beat records that r is running now, in lock space r.Space, and returns every replica
	// heard from within window (r included). Errors: the store's.
	Beat(ctx context.Context, r Replica, window time.Duration) ([]Replica, error)
	// Leave forgets replica id: it is stopping. Errors: the store's.
	Leave(ctx context.Context, id string) error
}

// Node is one Redis client of a replica and the binding of its key space.
type Node struct {
	Client  redis.StringCmdable
	Binding *Binding
	// Locks says that the replica takes its product locks through this client, so that its
	// key space is part of the replica's lock space. (A Redlock replica keeps its views on the
	// first node, through a client of their own.)
	Locks bool
}

// Config configures a Watch. Zero fields take the defaults documented on each.
type Config struct {
	// Self describes this replica; its Space is filled in by the Watch.
	Self Replica
	// Nodes are the replica's Redis clients.
	Nodes []Node
	// Register is where the database's replicas record their lock spaces.
	Register Register
	// Every is the time between two beats. A replica not heard from for three beats is taken
	// for stopped. Default 5s.
	Every time.Duration
	// Logger says when a key space turns out to be another database's, and when the replicas
	// are found in more than one lock space (and when either ends). Default: slog.Default().
	Logger *slog.Logger
}

// ErrSplit is the error of replicas of one database that take their locks in more than one
// lock space.
var ErrSplit = errors.New("keyspace: the replicas of one database take their locks in more than one lock space")

// SplitError says which running replicas take their locks in another lock space than this
// one. It matches ErrSplit.
type SplitError struct {
	Self   Replica
	Others []Replica
}

func (e *SplitError) Error() string {
	others := make([]string, len(e.Others))
	for i, r := range e.Others {
		others[i] = r.String()
	}
	return fmt.Sprintf("keyspace: this replica takes its locks under prefix %q on %s, and %d running replicas of its database take theirs in another lock space: %s; "+
		"each lock space has fencing counters of its own, and Postgres refuses the writes of the one whose tokens are lower, for ever",
		e.Self.Prefix, e.Self.Redis, len(e.Others), strings.Join(others, ", "))
}

func (e *SplitError) Is(target error) bool { return target == ErrSplit }

// Watch checks, at every beat, that each of a replica's key spaces is still its database's (and
// binds again one that lost its binding), and records in the Register which lock space the
// replica uses, so that replicas in different lock spaces are seen.
type Watch struct {
	cfg      Config
	spaces   prometheus.Gauge
	conflict prometheus.GaugeFunc

	mu sync.Mutex // held by a beat: one at a time
	// known holds, per node, the last token its binding had: a lock node that cannot be
	// asked still counts in the lock space with the token it had.
	known []string

	// What Run last reported (only Run's goroutine touches them): the number of lock spaces
	// the last beat counted and the number reported (see reportSpaces), and whether some key
	// space was another database's.
	last, reported int
	foreign        bool
}

// NewWatch returns a Watch over cfg. It is a prometheus.Collector of its metrics,
// stocksvc_lock_spaces and stocksvc_redis_key_space_conflict: register it where they are
// served.
func NewWatch(cfg Config) *Watch {
	if cfg.Every <= 0 {
		cfg.Every = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	w := &Watch{cfg: cfg, known: make([]string, len(cfg.Nodes))}
	w.spaces = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "stocksvc_lock_spaces",
		Help: "Lock spaces (a key prefix on a Redis, or on Redlock's nodes) that the running replicas of this replica's database take their product locks in: the smaller of what this replica's last two beats counted. 1 is right; more means that some replicas have every order refused by the fence and answer 429; 0 until this replica could check.",
	})
	w.conflict = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "stocksvc_redis_key_space_conflict",
		Help: "1 when the Redis keys under this replica's prefix (on one of its Redis nodes) belong to another database: the replica then sends that Redis nothing (without its Redis, orders and restocks answer 503 and reads come from Postgres).",
	}, func() float64 {
		if w.Foreign() != nil {
			return 1
		}
		return 0
	})
	return w
}

var _ prometheus.Collector = (*Watch)(nil)

// Describe implements prometheus.Collector.
func (w *Watch) Describe(ch chan<- *prometheus.Desc) {
	w.spaces.Describe(ch)
	w.conflict.Describe(ch)
}

// Collect implements prometheus.Collector.
func (w *Watch) Collect(ch chan<- prometheus.Metric) {
	w.spaces.Collect(ch)
	w.conflict.Collect(ch)
}

// Foreign returns a key space of this replica that its last check found to be another
// database's, nil when there is none.
func (w *Watch) Foreign() *ForeignError {
	for _, n := range w.cfg.Nodes {
		if f := n.Binding.Foreign(); f != nil {
			return f
		}
	}
	return nil
}

// Check checks the binding of every node at once, and returns each node's outcome, in the
// order of Config.Nodes: nil, *ForeignError, or the error of a node that could not be asked.
// Each node gets ctx's deadline.
func (w *Watch) Check(ctx context.Context) []error {
	errs := make([]error, len(w.cfg.Nodes))
	var wg sync.WaitGroup
	for i, n := range w.cfg.Nodes {
		wg.Go(func() {
			_, errs[i] = n.Binding.Check(ctx, n.Client)
		})
	}
	wg.Wait()
	return errs
}

// Settle is what a starting replica asks: it beats until no running replica of its database is
// found in another lock space than this one, or ctx ends. A replica whose Redis keys were just
// bound again (a Redis restarted empty) is recorded in the new lock space at its next beat, so
// one beat that finds two does not decide. It returns nil at once when no lock node could be
// asked (Redis down: the running Watch records the replica once it can). Errors:
// *ForeignError (ErrForeign) when a key space turns out to be another database's, *SplitError
// (ErrSplit) when ctx ends with the replicas still split, the Register's error.
func (w *Watch) Settle(ctx context.Context) error {
	var split *SplitError
	for {
		self, _, others, err := w.beat(ctx)
		switch {
		case w.Foreign() != nil:
			return w.Foreign()
		case err != nil && split != nil && ctx.Err() != nil:
			return split
		case err != nil:
			return err
		case len(self.Space) == 0 || len(others) == 0:
			return nil
		}
		split = &SplitError{Self: self, Others: others}
		if clock.Sleep(ctx, w.cfg.Every) != nil {
			return split
		}
	}
}

// Run beats at once and then every Config.Every until ctx ends, then takes the replica out of
// the Register. It logs, and sets the metrics, when what it finds changes; a beat that fails is
// logged and tried again at the next.
func (w *Watch) Run(ctx context.Context) {
	for {
		w.tick(ctx)
		if clock.Sleep(ctx, w.cfg.Every) != nil {
			break
		}
	}
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if err := w.cfg.Register.Leave(lctx, w.cfg.Self.ID); err != nil {
		w.cfg.Logger.WarnContext(lctx, "could not take this replica out of the replicas table", slog.Any("error", err))
	}
}

// tick is one of Run's beats, and what it reports.
func (w *Watch) tick(ctx context.Context) {
	self, count, others, err := w.beat(ctx)
	w.reportForeign(ctx)
	switch {
	case err != nil && ctx.Err() == nil:
		w.cfg.Logger.WarnContext(ctx, "lock space check failed", slog.Any("error", err))
	case err == nil && len(self.Space) > 0:
		w.reportSpaces(ctx, count, others)
	}
}

// checkTimeout bounds a beat's check of each node.
const checkTimeout = time.Second

// beat checks every node, records the replica's lock space in the Register, and returns it,
// the number of lock spaces of the running replicas, and those of them that are in another
// lock space than this one. A replica none of whose lock nodes has been reached yet has no
// lock space, and is not recorded.
func (w *Watch) beat(ctx context.Context) (self Replica, spaces int, others []Replica, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, checkTimeout)
	errs := w.Check(cctx)
	cancel()
	self = w.cfg.Self
	for i, n := range w.cfg.Nodes {
		switch {
		case errs[i] == nil:
			w.known[i] = n.Binding.Space()
		case errors.Is(errs[i], ErrForeign):
			w.known[i] = "" // its commands are refused: no lock is taken there
		}
		if n.Locks && w.known[i] != "" && !slices.Contains(self.Space, w.known[i]) {
			self.Space = append(self.Space, w.known[i])
		}
	}
	if len(self.Space) == 0 {
		return self, 0, nil, nil
	}
	running, err := w.cfg.Register.Beat(ctx, self, 3*w.cfg.Every)
	if err != nil {
		return self, 0, nil, fmt.Errorf("keyspace: record this replica's lock space: %w", err)
	}
	spaces, others = split(self, running)
	return self, spaces, others, nil
}

// reportForeign logs a key space that turned out to be another database's, or that is this
// database's again.
func (w *Watch) reportForeign(ctx context.Context) {
	f := w.Foreign()
	switch {
	case f != nil && !w.foreign:
		w.cfg.Logger.ErrorContext(ctx, "redis key space holds another database's data; this replica does not use it",
			slog.String("redis_prefix", f.Prefix), slog.String("bound_to", f.Bound.String()), slog.String("database", f.Owner.String()), slog.Any("error", f))
	case f == nil && w.foreign:
		w.cfg.Logger.InfoContext(ctx, "redis key space is this database's again")
	}
	w.foreign = f != nil
}

// reportSpaces sets the gauge and logs a change. What is reported is the smaller of this
// beat's count and the last one's: after a Redis restarted empty, the replicas that have not
// beaten since are still recorded in the lock space before it for one beat.
func (w *Watch) reportSpaces(ctx context.Context, count int, others []Replica) {
	now := count
	if w.last > 0 {
		now = min(count, w.last)
	}
	w.last = count
	w.spaces.Set(float64(now))
	switch {
	case now > 1 && w.reported <= 1:
		names := make([]string, len(others))
		for i, r := range others {
			names[i] = r.String()
		}
		w.cfg.Logger.ErrorContext(ctx, "replicas of this database take their locks in more than one lock space",
			slog.Int("lock_spaces", now), slog.String("redis_prefix", w.cfg.Self.Prefix), slog.String("redis", w.cfg.Self.Redis),
			slog.String("other_replicas", strings.Join(names, ", ")))
	case now == 1 && w.reported > 1:
		w.cfg.Logger.InfoContext(ctx, "replicas of this database take their locks in one lock space again")
	}
	w.reported = now
}

// split counts the lock spaces of the running replicas — two replicas are in one when their
// tokens have one in common, directly or through other replicas — and returns the replicas
// that are not in self's.
func split(self Replica, running []Replica) (spaces int, others []Replica) {
	all := append([]Replica{self}, slices.DeleteFunc(slices.Clone(running), func(r Replica) bool { return r.ID == self.ID })...)
	group := make([]int, len(all)) // union-find over the replicas
	for i := range group {
		group[i] = i
	}
	find := func(i int) int {
		for group[i] != i {
			group[i] = group[group[i]]
			i = group[i]
		}
		return i
	}
	owner := map[string]int{} // token → a replica that has it
	for i, r := range all {
		for _, tok := range r.Space {
			if j, ok := owner[tok]; ok {
				group[find(i)] = find(j)
			} else {
				owner[tok] = i
			}
		}
	}
	for i, r := range all {
		if find(i) == i {
			spaces++
		}
		if i > 0 && find(i) != find(0) {
			others = append(others, r)
		}
	}
	return spaces, others
}
