package sale

import "time"

// Options configure the k6 sale (the default mode) and -compare, which runs it side by
// side in several configurations.
type Options struct {
	Stock          int
	Rate           int
	Duration       time.Duration
	VUs            int
	RaceStock      int
	Scenarios      string
	LockRetry      string
	LockMaxRetries int
	KillAfter      time.Duration
	PGBenchClients int // -compare's anchor
	// CustomerAuth is how the orders name their customer: "token" (a token per k6 VU, of an
	// issuer of the run's own, which the replicas verify) or "body" (the body's customer_id).
	CustomerAuth string
}
