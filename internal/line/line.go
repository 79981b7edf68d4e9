package line

import (
	"errors"
	"fmt"
	"time"
)

// State is what a ticket's status says, as the API shows it.
type State string

// The states of a ticket's status. Queued, Waiting and Admitted are in line; the others are
// outcomes. SoldOut and SaleEnded are the product's, for every ticket still in line.
const (
	// Queued: joined before the draw; the place is drawn at the opening.
	Queued State = "queued"
	// Waiting: placed (or, a late arrival, about to be), waiting for an admission.
	Waiting State = "waiting"
	// Admitted: may order until the admission runs out; the status carries the pass.
	Admitted State = "admitted"
	// Used: the admission's order was confirmed or held.
	Used State = "used"
	// Expired: the admission ran out unused; its room passed to the next in line.
	Expired State = "expired"
	// Left: the customer left the line.
	Left State = "left"
	// SoldOut: no units are left; Status.MayReturn says whether held units may come back.
	SoldOut State = "sold_out"
	// SaleEnded: the product's sale has ended.
	SaleEnded State = "sale_ended"
)

// Final reports whether a ticket in state s is out of line for good: Used, Expired, Left or
// SaleEnded. (SoldOut is not: units may come back.)
func (s State) Final() bool {
	return s == Used || s == Expired || s == Left || s == SaleEnded
}

// TicketStatus is a ticket's row status in the store.
type TicketStatus string

// The statuses a store keeps. Waiting and Admitted are open: one open ticket per customer and
// product.
const (
	TicketWaiting  TicketStatus = "waiting"
	TicketAdmitted TicketStatus = "admitted"
	TicketUsed     TicketStatus = "used"
	TicketExpired  TicketStatus = "expired"
	TicketLeft     TicketStatus = "left"
)

// Open reports whether a ticket with status s is still in line.
func (s TicketStatus) Open() bool { return s == TicketWaiting || s == TicketAdmitted }

// Ticket is a customer's place in a product's line, as the store keeps it.
type Ticket struct {
	ID         int64
	ProductID  int64
	CustomerID string
	Status     TicketStatus
	// Place is the ticket's place, from 1; 0 until the draw (or, for a late arrival, the
	// next advance) gives one.
	Place    int64
	JoinedAt time.Time
	// AdmittedUntil is when its admission runs out; zero when it was never admitted.
	AdmittedUntil time.Time
	// UsedKey is the Idempotency-Key of the order that used the admission, if it had one.
	UsedKey string
	// Changed is the line version that last changed the ticket; 0 for none since it was made.
	Changed int64
}

// Status is what a customer is told of a ticket.
type Status struct {
	ProductID  int64
	Ticket     int64
	CustomerID string
	State      State
	// Place is the ticket's place (0: not drawn or placed yet); Ahead how many tickets still
	// wait before it; Estimate how long its turn may take at the pace observed (or, with none
	// observed, the settings' pace).
	Place    int64
	Ahead    int64
	Estimate time.Duration
	// Queued is how many tickets wait for the draw (Queued state).
	Queued int64
	// AdmittedUntil is when an admission runs out (Admitted, Used, Expired).
	AdmittedUntil time.Time
	// Pass is the signed pass of an Admitted ticket: the Line-Pass an order sends.
	Pass string
	// MayReturn says, when SoldOut, that units are held and may come back to the stock.
	MayReturn bool
	// ETag changes when the state, the place, the admission or the sold-out flag change, and
	// each time Ahead halves (a long-poll answers a few times on the way to the front, not at
	// every admission). It is a quoted strong entity tag, the same on every replica.
	ETag string
}

// Joined is what Service.Join answers.
type Joined struct {
	Status
	// Token is the ticket: the Line-Ticket of every later call about it.
	Token string
	// Created is false when the customer already had an open ticket, which is answered.
	Created bool
}

// Admission is an order's right to buy one lined product: a verified pass.
type Admission struct {
	ProductID int64
	Ticket    int64
	Customer  string
	Until     time.Time
}

// Cleared is what an order's passes admit: the customer they were issued to, and one
// admission per lined product of the order (none when no product of the order is lined).
type Cleared struct {
	Customer   string
	Admissions []Admission
	// LockWait is how long the order may wait for its products' locks
	// (stock.OrderRequest.LockWait): the shortest time any of its admissions has left, at most
	// Config.MaxWait; 0 with no admission. Admitted orders are at most the units left, so the
	// line itself bounds their wait, and answering one busy would only leave its unit waiting
	// for its retry.
	LockWait time.Duration
}

// Draw is a line's draw as an admin is shown it.
type Draw struct {
	ProductID int64
	Seed      []byte
	DrawnAt   time.Time
	// Tickets are the tickets that joined before the draw, in place order.
	Tickets []Drawn
}

// Drawn is one ticket of a draw.
type Drawn struct {
	Ticket     int64
	CustomerID string
	Place      int64
}

// Summary is a line as a whole, as this replica knows it.
type Summary struct {
	ProductID int64
	Version   int64
	DrawnAt   time.Time // zero before the draw
	// Drawn is how many tickets the draw placed; InLine how many wait (queued or waiting);
	// Active how many admissions are running; Admissions how many were made in all.
	Drawn, InLine, Active, Admissions int64
	SoldOut                           bool
}

var (
	// ErrNoLine means the product has no line: its orders need no admission.
	ErrNoLine = errors.New("line: the product has no line")
	// ErrInvalidTicket means a Line-Ticket is missing, malformed, not signed by this service,
	// or for another product.
	ErrInvalidTicket = errors.New("line: invalid ticket")
	// ErrTicketNotFound means a ticket this service signed is not in its store (a failover
	// lost its join): joining again gives a new one.
	ErrTicketNotFound = errors.New("line: ticket not found")
	// ErrNotDrawn means the line has not been drawn yet: the seed is not shown before.
	ErrNotDrawn = errors.New("line: not drawn yet")
	// ErrNotAdmitted means an order for a lined product came without a valid pass for it; the
	// error is a *NotAdmittedError.
	ErrNotAdmitted = errors.New("line: not admitted")
	// ErrAdmissionExpired means the order's pass ran out; the error is an
	// *AdmissionExpiredError.
	ErrAdmissionExpired = errors.New("line: admission expired")
	// ErrAdmissionUsed means the order's pass was used by another order; the error is an
	// *AdmissionUsedError.
	ErrAdmissionUsed = errors.New("line: admission used")
	// ErrUnavailable means the line's store could not be reached.
	ErrUnavailable = errors.New("line: store unavailable")
	// ErrBusy means another advance of the line was running when an advance asked for it:
	// the advance did nothing (Store.Advance).
	ErrBusy = errors.New("line: held by another advance")
)

// NotAdmittedError says which lined product an order has no admission for, why, and — when
// the order named its ticket (Line-Ticket) — where that ticket stands.
type NotAdmittedError struct {
	ProductID int64
	Reason    string
	// Status is the ticket's status when the order named a valid ticket of the product.
	Status *Status
	// Waited is how long the order waited in line for an admission that did not come before
	// its wait ran out (Admit with a wait), 0 for any other refusal.
	Waited time.Duration
}

func (e *NotAdmittedError) Error() string {
	return fmt.Sprintf("line: no admission for product %d: %s", e.ProductID, e.Reason)
}

// Is makes errors.Is(err, ErrNotAdmitted) hold.
func (e *NotAdmittedError) Is(target error) bool { return target == ErrNotAdmitted }

// SoldOutError says that an order waiting in line (Admit with a wait) for product learnt that
// its line is sold out: no admission will come.
type SoldOutError struct {
	ProductID int64
}

func (e *SoldOutError) Error() string {
	return fmt.Sprintf("line: product %d sold out while the order waited in line", e.ProductID)
}

// AdmissionExpiredError says when an order's admission ran out.
type AdmissionExpiredError struct {
	ProductID int64
	Until     time.Time
}

func (e *AdmissionExpiredError) Error() string {
	return fmt.Sprintf("line: the admission for product %d ran out at %s", e.ProductID, e.Until.UTC().Format(time.RFC3339))
}

// Is makes errors.Is(err, ErrAdmissionExpired) hold.
func (e *AdmissionExpiredError) Is(target error) bool { return target == ErrAdmissionExpired }

// AdmissionUsedError says that an order's admission was used by another order.
type AdmissionUsedError struct {
	ProductID int64
}

func (e *AdmissionUsedError) Error() string {
	return fmt.Sprintf("line: the admission for product %d was used by another order", e.ProductID)
}

// Is makes errors.Is(err, ErrAdmissionUsed) hold.
func (e *AdmissionUsedError) Is(target error) bool { return target == ErrAdmissionUsed }
