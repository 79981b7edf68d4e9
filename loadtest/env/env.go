// Package env is what every mode of the load harness shares within one invocation: the
// deployment's options, where the run writes, the binaries it drives, where it prints, and
// the verdicts a mode returns.
package env

import (
	"errors"
	"fmt"
	"io"
	"time"
)

// DefaultDefense is the replicas' STOCKSVC_DEFENSE in production; any other value is a
// demonstration, which the replicas only run with STOCKSVC_DEMO_UNSAFE=1.
const DefaultDefense = "lock,version,guard"

var (
	// ErrFailed means the run completed and found violations; the summary already said which.
	ErrFailed = errors.New("verdict: FAIL")
	// ErrStopped means a signal ended the load early and what ran broke no invariant.
	ErrStopped = errors.New("verdict: stopped early")
)

// ClusterOptions are the deployment's flags, shared by every mode.
type ClusterOptions struct {
	Replicas    int
	Defense     string        // the replicas' STOCKSVC_DEFENSE
	LockWait    time.Duration // the replicas' STOCKSVC_LOCK_WAIT
	Redlock     int           // Redlock nodes of the run's own (0: the one Redis of -redis-url)
	DatabaseURL string        // the Postgres server the runs' databases are created on
	RedisURL    string
	Keep        bool // keep the runs' databases
}

// Harness is what every mode of one invocation shares.
type Harness struct {
	Cluster ClusterOptions
	Out     string // the invocation's directory
	Binary  string // the stocksvc binary built for it
	K6      string // only for the sales
	HAProxy string
	Wrk     string // only for -throughput, -cache, -flood and -replays
	Script  string // the k6 script
	W       io.Writer
	Args    []string // the command line's flags, which the report pages repeat
}

// Printf writes progress and reports to the harness's output.
func (h *Harness) Printf(format string, args ...any) { fmt.Fprintf(h.W, format, args...) }
