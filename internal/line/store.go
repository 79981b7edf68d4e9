package line

import (
	"context"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// Store keeps lines and their tickets: package linepg on Postgres, linetest in memory. Every
// error a method returns is one of the package's (possibly wrapped): ErrUnavailable for a
// store that cannot be reached, the context's error, or those the method names.
//
// A line's version moves with every change to its tickets but a join, in the transaction
// that makes it, and the tickets the change touched are stamped with it (Ticket.Changed), so
// that a replica reads what changed since the version it knows (Line). Each such change is
// announced to every Listen once committed.
type Store interface {
	// Join gives customer a ticket in product's line, making the line if there is none yet:
	// the customer's open ticket (waiting or admitted) if it has one (created false), else a
	// new waiting one. drawn says whether the line had been drawn when the ticket was made:
	// a ticket made before the draw is in it, one made after is a late arrival, placed by
	// the next advance.
	Join(ctx context.Context, product int64, customer string) (t Ticket, created, drawn bool, err error)
	// Leave ends ticket id of product's line if it is open, moving the line's version, and
	// returns it as it then stands (as it was, if it was not open). An admission still running
	// passes, in the same change, to the first waiting placed ticket, for as long as the
	// admissions the line last gave: one ends, one begins, the rule's count is unchanged.
	// Errors: ErrTicketNotFound.
	Leave(ctx context.Context, product, id int64) (Ticket, error)
	// Advance advances product's line, in one transaction under the line's lock: it marks
	// used the tickets of used that are admitted; ends the admissions that have run out by the
	// store's clock; calls plan with the line as it then stands; draws the line with the
	// plan's seed, when it has one and the line was not drawn (Rank orders the tickets made
	// before the draw); places the late arrivals after the last place; admits up to
	// Plan.Admit of the waiting placed tickets in place order, for Plan.AdmissionFor; records
	// the plan's stock and holding; and, when anything changed, moves the version and
	// announces it. Nothing is written when plan or the context fails first. A product whose
	// line was never made (nobody joined) is Advanced{} and nothing else. Errors: ErrBusy when
	// another advance of the line runs — replicas that all advance at once do not queue
	// behind each other, each to find nothing left to do: the one that runs announces what
	// it did, and the others try again for what it may not have done (their used marks).
	Advance(ctx context.Context, product int64, used []Use, plan func(context.Context, Standing) (Plan, error)) (Advanced, error)
	// Line reads product's line and, in Snapshot.Tickets, every ticket changed after version
	// since (0: every ticket placed or ended); with countWaiting, also how many tickets wait
	// without a place. A line never made is Snapshot{}.
	Line(ctx context.Context, product, since int64, countWaiting bool) (Snapshot, error)
	// Ticket reads ticket id of product's line. Errors: ErrTicketNotFound.
	Ticket(ctx context.Context, product, id int64) (Ticket, error)
	// Versions reads the version of each line of products that exists.
	Versions(ctx context.Context, products []int64) (map[int64]int64, error)
	// Drawn reads product's draw: its seed and time and the tickets placed by it, in place
	// order. Errors: ErrNotDrawn (also for a line never made).
	Drawn(ctx context.Context, product int64) (Draw, error)
	// Keys returns the keys that sign tickets and passes, making the first (id 1, KeySize
	// random bytes) when there is none.
	Keys(ctx context.Context) ([]Key, error)
	// Listen announces every committed change of a line to changed, from the moment it calls
	// listening until ctx ends or its connection fails, and returns then. Announcements made
	// while no Listen runs are lost: a caller reads what it knows of again after listening.
	Listen(ctx context.Context, listening func(), changed func(product, version int64)) error
}

// Use marks an admission used by an order (Store.Advance).
type Use struct {
	Ticket int64
	// Key is the order's Idempotency-Key, if it had one: a retry of that order with the same
	// pass and key is let through, to be answered with the order.
	Key string
}

// Standing is a line as Advance's plan sees it, after the used marks and the expiries.
type Standing struct {
	// Now is the store's clock, which decides the opening.
	Now     time.Time
	Version int64
	Drawn   bool
	// Active is how many admissions are running.
	Active int64
}

// Plan is what an advance does, decided from the Standing and the product.
type Plan struct {
	// Seed, when not nil, draws the line (if it was not drawn).
	Seed []byte
	// Admit is how many waiting tickets to admit, each for AdmissionFor.
	Admit        int64
	AdmissionFor time.Duration
	// Stock and Holding are the product's, as the advance read it: recorded on the line, so
	// that every replica's statuses say the same about its stock.
	Stock   int64
	Holding bool
}

// Advanced is what an advance did.
type Advanced struct {
	// Exists is false for a product whose line was never made.
	Exists bool
	// Version is the line's version after the advance; Changed whether it moved.
	Version int64
	Changed bool
	// Drawn is how many tickets the advance's draw placed (0: it drew nothing), Placed how
	// many late arrivals it placed, Admitted how many tickets it admitted, Used and Expired
	// how many admissions it ended so.
	Drawn, Placed, Admitted, Used, Expired int64
}

// Snapshot is a line as one read of the store saw it.
type Snapshot struct {
	// Exists is false for a product whose line was never made.
	Exists  bool
	Version int64
	DrawnAt time.Time // zero before the draw
	// Drawn is how many tickets the draw placed, Placed the highest place given, Admissions
	// how many admissions were made in all.
	Drawn, Placed, Admissions int64
	// Stock and Holding are what the last advance read of the product; StockKnown is false
	// before the first.
	Stock      int64
	StockKnown bool
	Holding    bool
	// Unplaced is how many tickets wait without a place (before the draw: every ticket in
	// line), when the read was asked to count them; -1 when it was not.
	Unplaced int64
	// Tickets are the tickets changed after the version the read was asked about.
	Tickets []Ticket
}

// Products is what the line reads of products from Postgres, exactly: stockpg.Store (and
// stocktest.MemStore) implement it.
type Products interface {
	// Product returns the product with id. Errors: *stock.ProductNotFoundError,
	// stock.ErrUnavailable.
	Product(ctx context.Context, id int64) (stock.Product, error)
	// Holding reports whether units of product id are held now. Errors: stock.ErrUnavailable.
	Holding(ctx context.Context, id int64) (bool, error)
}

// Views is what the line reads of products on the paths that must not query Postgres — an
// order's check, a status — from this replica's views: *stock.Service implements it.
type Views interface {
	// Product returns product id's view. Errors: *stock.ProductNotFoundError,
	// stock.ErrUnavailable, the context's error.
	Product(ctx context.Context, id int64) (stock.ProductView, error)
}
