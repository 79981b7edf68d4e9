package lock

import "time"

// Observer receives what a Client does, for metrics. Its methods are called synchronously on
// the lock's hot path and must return quickly. name is the lock's name: mind its cardinality
// before using it as a metric label.
type Observer interface {
	// Obtained reports a lock obtained after waiting waited; contended says whether it was
	// ever found held by someone else (a waiter given the lock by its holder was).
	Obtained(name string, waited time.Duration, contended bool)
	// NotObtained reports an Obtain that ended without the lock after waiting waited.
	NotObtained(name string, waited time.Duration)
	// Lost reports a holder that found its lock gone: taken, expired or deleted.
	Lost(name string)
	// RefreshFailed reports a refresh that could not reach Redis.
	RefreshFailed(name string, err error)
}

// noObserver observes nothing.
type noObserver struct{}

func (noObserver) Obtained(string, time.Duration, bool) {}
func (noObserver) NotObtained(string, time.Duration)    {}
func (noObserver) Lost(string)                          {}
func (noObserver) RefreshFailed(string, error)          {}
