package async

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Store keeps the orders accepted for later — their lines, their decisions, the counts the
// metrics show — and runs the jobs that decide them: what the queue needs of storage, and all
// it knows of it. Package asyncpg is the Store over Postgres and River.
//
// An order's decision is the stock domain's: the idempotency record the purchase path stores
// under its stock.AcceptedKey (or one the Store stores for it: a refusal the purchase path
// answered without storing, or the order given up). The Store copies it into the order once it
// exists. Every error a method returns is one it names — stock's sentinels, which the
// transport already answers, possibly wrapped — or the context's.
type Store interface {
	// Accept writes orders of one product each, in the order given — each behind every order of
	// its product accepted before it — and a job to drain the line of each of their products,
	// in one transaction, and returns what became of each order, in the same order. An order
	// whose key already has an outcome (or was claimed by an order before it in orders) is not
	// written (KeyTaken), nor is one for a product that does not exist (NoSuchProduct). A
	// product's orders become visible in the order they were accepted. Errors:
	// stock.ErrUnavailable (nothing was accepted; or, with stock.ErrOutcomeUnknown, the commit
	// was answered without a synchronous standby: a retry under the same key finds the order
	// once a standby has it), the context's error.
	Accept(ctx context.Context, orders []NewOrder) ([]AcceptOutcome, error)
	// AcceptCart writes an order of several products (in no line) and a job to decide it, in
	// one transaction, and returns when it was accepted. Errors: ErrKeyTaken (its key already
	// has an outcome: nothing was written), *stock.ProductNotFoundError, and Accept's.
	AcceptCart(ctx context.Context, o NewOrder) (time.Time, error)
	// Order returns the order accepted as id as it stands: decided when its record is stored,
	// even before the decision is copied into it. Errors: stock.ErrOrderNotFound,
	// stock.ErrUnavailable.
	Order(ctx context.Context, id uuid.UUID) (Stored, error)

	// ClaimLine claims product's line for this drain, if no other drain has it: nil, nil when
	// one does. A claim lasts while its holder reads the line at least once a lease, and ends
	// at once when its holder dies. Errors: stock.ErrUnavailable, the context's error.
	ClaimLine(ctx context.Context, product int64, lease time.Duration) (Line, error)
	// Waiting reports whether product's line has an order pending, claimed or not. Errors:
	// stock.ErrUnavailable, the context's error.
	Waiting(ctx context.Context, product int64) (bool, error)
	// Record makes orders' decisions final: a refusal for lack of stock the purchase path did
	// not store is stored as their record, and every order with a record has its decision
	// copied, once. Orders in rejects, whose refusal is no record (a product gone, a rule), are
	// rejected with the reason given. It returns what this call decided. Errors:
	// stock.ErrUnavailable (what was decided before it failed is returned), the context's.
	Record(ctx context.Context, orders []stock.Accepted, decisions []stock.Decision, rejects map[uuid.UUID]Reason) ([]Decided, error)
	// Fail counts an unexpected failure to decide o, keeping cause for operators, and gives o
	// up at the failure that reaches maxAttempts: its rejection (ReasonInternal) is stored as
	// its record and copied, unless a decision was stored first (then nothing is written, and
	// the decision is copied by the next Record). A zero Failure: o was no longer pending, or
	// had a record. Errors: stock.ErrUnavailable, the context's error.
	Fail(ctx context.Context, o stock.Accepted, maxAttempts int, cause string) (Failure, error)
	// Sweep makes a drain job for every line whose front has waited longer than line, and a
	// job for every cart that has waited undecided longer than cart, and returns how many
	// jobs it made. Errors: stock.ErrUnavailable, the context's error.
	Sweep(ctx context.Context, line, cart time.Duration) (int, error)
	// ScheduleExpiries makes jobs that end holds at their time (Worker.ExpireHolds): one per
	// moment of expiry. Errors: stock.ErrUnavailable, the context's error.
	ScheduleExpiries(ctx context.Context, holds map[uuid.UUID]time.Time) error
	// PurgeRecords deletes the records of orders accepted for later — the client keys they
	// claimed, their decision records — created more than retention ago on the store's clock,
	// except those of orders still pending, and returns how many it deleted, also when it
	// fails part way. Errors: stock.ErrUnavailable, the context's error.
	PurgeRecords(ctx context.Context, retention time.Duration) (int64, error)

	// Pending counts the orders pending, across every replica. Errors: stock.ErrUnavailable.
	Pending(ctx context.Context) (int64, error)
	// OldestPending returns the limit lines whose front has waited longest, longest first,
	// the carts counting as one line. Errors: stock.ErrUnavailable.
	OldestPending(ctx context.Context, limit int) ([]LineAge, error)

	// Start runs the jobs — those made by the calls above, and the periodic sweeps — with w,
	// as c says, until Stop; jobs of every replica's store run on whichever replica's store
	// runs. Errors: stock.ErrUnavailable.
	Start(ctx context.Context, w Worker, c RunConfig) error
	// Stop stops taking jobs and waits, until ctx ends, for the running ones; those still
	// running then are cancelled, and run again. Errors: stock.ErrUnavailable.
	Stop(ctx context.Context) error
}

// Records reads the stock domain's idempotency records, for the orders whose key turns out to
// have an outcome already: stock.Store has this method.
type Records interface {
	// Records returns the records stored under each key in keys that has one; a record of an
	// order, confirmed or accepted for later, only once it is kept as an acknowledged write must
	// be (on a synchronous standby). Errors: stock.ErrUnavailable.
	Records(ctx context.Context, keys []stock.RecordKey) (map[stock.RecordKey]stock.IdempotencyRecord, error)
}

var _ Records = stock.Store(nil)

// ErrKeyTaken is AcceptCart's answer when the order's Idempotency-Key already has an outcome:
// nothing was written, and the key's record (Records) is the answer.
var ErrKeyTaken = errors.New("async: the idempotency key already has an outcome")

// NewOrder is an order to accept: the id the queue gave it, and the request.
type NewOrder struct {
	ID      uuid.UUID
	Request stock.Prepared
}

// AcceptState is what became of an order a Store was asked to accept.
type AcceptState int

// What became of an order given to Store.Accept.
const (
	// Accepted: in its product's line.
	Accepted AcceptState = iota + 1
	// KeyTaken: its key already had an outcome, or an order earlier in the group claimed it;
	// nothing was written for it.
	KeyTaken
	// NoSuchProduct: its product does not exist; nothing was written for it.
	NoSuchProduct
)

// AcceptOutcome is what became of one order given to Store.Accept, and when it was accepted.
type AcceptOutcome struct {
	State AcceptState
	At    time.Time // zero unless Accepted
}

// Stored is an order accepted for later as its Store holds it.
type Stored struct {
	Order
	// Copied is false while the order's own row still says pending: its decision, if it has
	// one, is only in its record (Order.Status shows it), and still to be copied.
	Copied bool
}

// Line is a product's line, claimed by a drain (Store.ClaimLine).
type Line interface {
	// Front reads the front of the line, oldest first, at most limit orders, and renews the
	// claim's lease. Errors: stock.ErrUnavailable, the context's error.
	Front(ctx context.Context, limit int) ([]stock.Accepted, error)
	// Release lets go of the line; safe to call twice.
	Release()
}

// Decided is one order's decision as copied into it, and how long the order waited for it (on
// the store's clock, the one that stamped its acceptance).
type Decided struct {
	Status string
	Waited time.Duration
}

// Failure is what counting a failed attempt did (Store.Fail): the order's status — "" when it
// was no longer pending, or had a record — its attempts, and, when rejected, how long it waited.
type Failure struct {
	Status   string
	Attempts int
	Waited   time.Duration
}

// LineAge is how long the front of a line — a product's (its id), or "cart" for the carts — has
// waited.
type LineAge struct {
	Line    string
	Seconds float64
}

// Worker is the queue's side of the jobs its Store runs: each method is one kind of job, called
// by whichever replica's Store runs it, and its error says what becomes of the job: nil, done;
// a *SnoozeError, run again after its delay; anything else, tried again soon, as long as it
// fails (a retry policy of the Store's).
type Worker interface {
	// DrainLine decides product's line (a job made by Accept and Sweep). attempt counts the
	// job's runs as the Store's runner does, 1 the first.
	DrainLine(ctx context.Context, product int64, attempt int) error
	// DecideCart decides the cart id (a job made by AcceptCart and Sweep). Errors:
	// stock.ErrOrderNotFound when no such cart was accepted: its job ends, not retried.
	DecideCart(ctx context.Context, id uuid.UUID) error
	// SweepLines looks for lines and carts waiting without a job (Store.Sweep): periodic, every
	// RunConfig.Sweep, on one replica at a time, and not retried.
	SweepLines(ctx context.Context) error
	// ExpireHolds ends the holds among orders that are past their time (a job made by
	// ScheduleExpiries, due then).
	ExpireHolds(ctx context.Context, orders []uuid.UUID) error
	// SweepHolds ends the holds a little past their time: periodic, as SweepLines.
	SweepHolds(ctx context.Context) error
}

// RunConfig says how a Store runs the jobs (Store.Start).
type RunConfig struct {
	// Workers is how many jobs the replica runs at once (Config.Workers).
	Workers int
	// JobTimeout bounds one job (Config.JobTimeout).
	JobTimeout time.Duration
	// Sweep is how often the periodic jobs run (Config.Sweep).
	Sweep time.Duration
	// Logger takes the runner's warnings and errors.
	Logger *slog.Logger
}

// SnoozeError is a job's answer when it is to run again after After, not as a failure: its line
// handed on (After 0), or the lock it needs busy.
type SnoozeError struct {
	After time.Duration
}

func (e *SnoozeError) Error() string {
	return fmt.Sprintf("async: run the job again after %v", e.After)
}
