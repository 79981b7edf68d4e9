package model

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What the clients record: an operation and its attempts, and the recorder that collects them.

// Attempt is one HTTP request of an operation.
type Attempt struct {
	Start, End time.Duration // since the recorder's start
	Status     int           // 0: no answer (timeout, connection error)
	Code       string        // the problem code, when the answer was one
	Replica    bool          // the answer came from a replica (problem+json or JSON), not the balancer
	// Server is the replica that answered, as the balancer names it (its X-Served-By header:
	// r1, r2...); empty when the balancer did not say (no answer, or a request sent to a
	// replica directly).
	Server string `json:",omitempty"`
	Err    string
	// Resent: Go's transport sent the request again on a new connection after the first one
	// broke (it does so by itself for a request with an Idempotency-Key); the answer is the
	// second sending's.
	Resent bool
}

// Op is one logical operation: all the attempts made for it (with the same Idempotency-Key,
// for orders), and what they add up to.
type Op struct {
	ID       int
	Client   int // lane in the visualization; a client whose operation never ended gets a new one
	In       Input
	Out      Output
	Invoke   time.Duration
	Return   time.Duration // of the last attempt
	Attempts []Attempt
	Customer string // orders: the customer id, unique to the operation
	Key      string // orders: the Idempotency-Key of every attempt
	OrderID  string // orders: the id a 201 gave
	// Final marks the read of the stock in the database once every replica has stopped: it
	// belongs to the writes-only history too, as the state all the writes add up to.
	Final bool
	// NotBefore, when positive, is the earliest the operation can have taken effect, as the
	// database recorded it (see verdict.Orders).
	NotBefore time.Duration
	// Txn is the Postgres transaction that wrote the order's items (their xmin), when the
	// order is in the database: the orders of one batch share it, and took effect at its
	// commit, together (see History).
	Txn string
	// RefusedButSold marks an order refused to its client (429) that the database holds: a
	// violation, checked by the model as an order that happened (see verdict.Orders).
	RefusedButSold bool
	// Hold marks an order that is a hold (answered held, or found in the database with an
	// expires_at): History starts a partition of its own for it, by OrderID.
	Hold bool
	// Expires is a hold's expires_at as its answer gave it, on the recorder's clock: when a
	// buyer who pays late is too late. Not saved: the check does not read it.
	Expires time.Duration
}

// Recorder collects operations from many goroutines.
type Recorder struct {
	Start time.Time
	mu    sync.Mutex
	ops   []*Op
	next  int
}

// NewRecorder returns a recorder whose clock starts now.
func NewRecorder() *Recorder { return &Recorder{Start: time.Now()} }

// Now is the time since the recorder started, on the monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.Start) }

// Add records o, giving it the next id.
func (r *Recorder) Add(o *Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	o.ID = r.next
	r.next++
	r.ops = append(r.ops, o)
}

// Snapshot returns the operations recorded so far, in the order they were added.
func (r *Recorder) Snapshot() []*Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ops)
}

// DescribeAttempts says what each attempt got, and when, with the customer and key: the
// metadata of the operation in Porcupine's picture and in the text history.
func (p *Op) DescribeAttempts() string {
	var parts []string
	for _, a := range p.Attempts {
		s := "no answer"
		if a.Status != 0 {
			s = strconv.Itoa(a.Status)
			if a.Code != "" {
				s += " " + a.Code
			}
		} else if a.Err != "" {
			s += " (" + a.Err + ")"
		}
		if a.Server != "" {
			s += " from " + a.Server
		}
		if a.Resent {
			s += " (sent again by Go's transport)"
		}
		parts = append(parts, fmt.Sprintf("%s at %.3fs", s, a.End.Seconds()))
	}
	desc := strings.Join(parts, "; ")
	if p.Key != "" {
		desc = "key " + p.Key + ": " + desc
	}
	if p.Customer != "" {
		desc = "customer " + p.Customer + ": " + desc
	}
	return desc
}
