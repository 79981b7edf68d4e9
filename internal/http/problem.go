package stockhttp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// problem is an RFC 9457 problem details object. Code is a stable, machine-readable name for
// the problem type; Type is the URI reference that documents it.
type problem struct {
	Type     string `json:"type"`
	Title    string `json:"title"`
	Status   int    `json:"status"`
	Detail   string `json:"detail"`
	Code     string `json:"code"`
	Instance string `json:"instance,omitempty"`

	// Extension members, present only where they apply.
	Field     string `json:"field,omitempty"`
	ProductID int64  `json:"product_id,omitempty"`
	Requested int64  `json:"requested,omitempty"`
	Available *int64 `json:"available,omitempty"`
	// Prefer, on a busy order turned away because its product's queue was full, names the
	// preference that would have had it accepted and decided in turn instead.
	Prefer string `json:"prefer,omitempty"`
	// The sale rules that refused an order: when the sale opens (sale-not-open) or ended
	// (sale-ended); the limit per customer and what the customer has (customer-limit).
	SaleStartsAt   *time.Time `json:"sale_starts_at,omitempty"`
	SaleEndsAt     *time.Time `json:"sale_ends_at,omitempty"`
	MaxPerCustomer int64      `json:"max_per_customer,omitempty"`
	Bought         *int64     `json:"bought,omitempty"`
	// The cap on a customer's held units and what the customer holds (hold-limit).
	MaxHeldPerCustomer int64  `json:"max_held_per_customer,omitempty"`
	Held               *int64 `json:"held,omitempty"`
	// The line's refusals: the route to join (not-admitted), where the order's Line-Ticket
	// stands (its status, place and how many are ahead), when an admission ran out.
	Line          string     `json:"line,omitempty"`
	TicketStatus  string     `json:"ticket_status,omitempty"`
	Place         *int64     `json:"place,omitempty"`
	Ahead         *int64     `json:"ahead,omitempty"`
	AdmittedUntil *time.Time `json:"admitted_until,omitempty"`

	retryAfter   int    // seconds; sent as the Retry-After header when positive
	authenticate string // sent as the WWW-Authenticate header when set
	replayed     bool   // a stored idempotent outcome; sent as Idempotent-Replayed: true
	applied      string // sent as the Preference-Applied header when set (RFC 7240)
}

// problemType documents one problem code. The list is served at /problems/{code} and printed
// in docs/api.md; keep them in step.
type problemType struct {
	Status int
	Title  string
	About  string
}

var problemTypes = map[string]problemType{
	"invalid-request":        {422, "Invalid request", "A field breaks a rule; `field` names it and `detail` says which rule."},
	"malformed-json":         {400, "Malformed JSON", "The body is not a JSON object of the expected shape: a syntax error, a wrong type, an unknown field (names are case-sensitive: any name that is not exactly a field's), a field twice in one object, or trailing data."},
	"unsupported-media-type": {415, "Unsupported media type", "Request bodies must be sent as Content-Type: application/json."},
	"body-too-large":         {413, "Body too large", "Request bodies are limited to 1 MiB."},
	"unauthorized":           {401, "Unauthorized", "Admin routes need Authorization: Bearer <STOCKSVC_ADMIN_TOKEN>."},
	"admin-disabled":         {403, "Admin disabled", "No STOCKSVC_ADMIN_TOKEN is configured, so admin routes are off."},
	"unauthenticated":        {401, "Unauthenticated", "An order route needs the customer's credential (STOCKSVC_CUSTOMER_AUTH token: Authorization: Bearer <JWT>; gateway: the gateway's header), and none was sent or the one sent is refused; `detail` says why. WWW-Authenticate says Bearer, with error=\"invalid_token\" when a credential was refused."},
	"customer-mismatch":      {403, "Customer mismatch", "The request's customer_id (body or query) names another customer than the verified one; leave it out or send the verified customer's."},
	"product-not-found":      {404, "Product not found", "No product has this id; `product_id` names it when known."},
	"order-not-found":        {404, "Order not found", "No order has this id."},
	"not-found":              {404, "Not found", "No route matches this path."},
	"method-not-allowed":     {405, "Method not allowed", "The route exists but not for this method; see the Allow header."},
	"duplicate-sku":          {409, "Duplicate SKU", "Another product already uses this SKU."},
	"sold-out":               {409, "Sold out", "Not enough stock for the order; nothing was sold. `product_id` names the product that is short."},
	"sale-not-open":          {409, "Sale not open", "The product's sale has not opened yet; nothing was sold and nothing is stored under the Idempotency-Key. `sale_starts_at` says when it opens, and Retry-After how many seconds that is away."},
	"sale-ended":             {409, "Sale ended", "The product's sale has ended; nothing was sold. `sale_ends_at` says when it ended."},
	"hold-expired":           {409, "Hold expired", "The order's hold ended before it was confirmed: its units went back to the stock, and nothing was bought."},
	"order-cancelled":        {409, "Order cancelled", "The order was cancelled: its units went back to the stock."},
	"order-confirmed":        {409, "Order confirmed", "The order is confirmed (paid) and cannot be cancelled."},
	"customer-limit":         {409, "Customer limit reached", "The order would take the customer above the product's limit per customer; nothing was sold and nothing is stored under the Idempotency-Key. `max_per_customer` is the limit, `bought` what the customer already has and `requested` what the order asked for."},
	"hold-limit":             {409, "Hold limit reached", "The order would be held, and would take the units the customer holds of a product above what one customer may hold at once; nothing was sold and nothing is stored under the Idempotency-Key. `max_held_per_customer` is the cap, `held` what the customer holds now and `requested` what the order asked for: once a hold ends (confirmed, cancelled or expired), its units count no more."},
	"not-admitted":           {409, "Not admitted", "The product is sold through a line, and the order has no valid Line-Pass for it: join the line (`line` names the route), wait for the ticket's status to say admitted, and send its pass. Nothing was sold. With a Line-Ticket, `ticket_status`, `place` and `ahead` say where that ticket stands."},
	"admission-expired":      {409, "Admission expired", "The Line-Pass's admission ran out (`admitted_until`) before this order: its room passed to the next in line. Nothing was sold; join the line again."},
	"admission-used":         {409, "Admission used", "The Line-Pass's admission was used by another order (one admission, one order; a retry of that order with its Idempotency-Key is answered with it). Nothing was sold; join the line again to buy again."},
	"invalid-ticket":         {400, "Invalid ticket", "The Line-Ticket header is missing, malformed, not a ticket this service signed, or a ticket of another product's line."},
	"ticket-not-found":       {404, "Ticket not found", "The Line-Ticket is one this service signed but its line no longer has it (a failover lost the join): join again."},
	"line-not-found":         {404, "Line not found", "The product has no line: its orders need no admission."},
	"line-not-drawn":         {409, "Line not drawn", "The line has not been drawn yet: its seed is shown only once the opening has drawn it."},
	"idempotency-key-reused": {422, "Idempotency key reused", "This Idempotency-Key was first used with a different request body."},
	"rate-limited":           {429, "Too many requests", "A rate limit refused the request before anything was done: a customer's requests (per replica), refused credentials from one client address (per replica), or wrong admin tokens from one client address (across replicas); `detail` says which. Retry after Retry-After seconds. The Compose nginx answers its own limit per address with the same code."},
	"busy":                   {429, "Busy", "The product is contended and the order could not be attempted in time; nothing was sold (and an order sent with an Idempotency-Key has no stored outcome under it). Retry after Retry-After seconds."},
	"unavailable":            {503, "Unavailable", "Postgres or Redis could not be reached, the request timed out, the replica is still starting, or the outcome of a write is unknown. Nothing is promised either way: retry after Retry-After seconds, with the same Idempotency-Key."},
	"internal":               {500, "Internal error", "Something unexpected failed; the request id identifies it in the logs."},
}

func newProblem(code, detail string) *problem {
	pt, ok := problemTypes[code]
	if !ok {
		pt = problemTypes["internal"]
		code = "internal"
	}
	return &problem{Type: "/problems/" + code, Title: pt.Title, Status: pt.Status, Detail: detail, Code: code}
}

// requestError is an error found by the transport itself, before the service is called.
type requestError struct {
	code   string
	detail string
	field  string
	err    error
}

func (e *requestError) Error() string { return e.detail }
func (e *requestError) Unwrap() error { return e.err }

func badRequest(code, detail string) error { return &requestError{code: code, detail: detail} }

// problemFor maps an error to the problem the client sees. It is the only place where errors
// become statuses and codes, and it reads an error in this order, the first match winning:
//
//  1. what the transport found before the service was called (a customer credential missing
//     or refused: 401 unauthenticated; a rate limit: 429 rate-limited; malformed JSON, a
//     customer_id that is not the verified customer's, ...);
//  2. the request's own outcome: invalid input, sold out, a sale rule (not open, ended, the
//     customer's limit, the cap on what they hold), the line's refusals (not admitted, an
//     admission run out or used, a ticket invalid or lost, no line), product or order not
//     found, duplicate SKU, idempotency key reused;
//  3. unavailable (503) — a dependency down or slow, a deadline, or a write whose outcome is
//     unknown — whatever else the error holds: a lease lost while a commit's reply was lost
//     is still unknown, and "busy" would tell the buyer that nothing was sold;
//  4. busy (429): the product's queue, its lock or a lost lease refused the order, and the
//     service knows nothing was written (the service looks a keyed order's key up before it
//     says so);
//  5. anything else is internal (500).
func problemFor(err error) *problem {
	// errors.AsType, unlike errors.As, needs no target that escapes: no allocations on the
	// path every refusal takes.
	if authErr, ok := errors.AsType[*authError](err); ok {
		p := newProblem("unauthenticated", authErr.detail)
		p.authenticate = `Bearer realm="stocksvc"`
		if !errors.Is(err, identity.ErrNoCredential) {
			p.authenticate += `, error="invalid_token"`
		}
		return p
	}
	if limited, ok := errors.AsType[*limitedError](err); ok {
		p := newProblem("rate-limited", limited.detail())
		p.retryAfter = limited.retryAfter()
		return p
	}
	if reqErr, ok := errors.AsType[*requestError](err); ok {
		p := newProblem(reqErr.code, reqErr.detail)
		p.Field = reqErr.field
		return p
	}
	if invalid, ok := errors.AsType[*stock.ValidationError](err); ok {
		p := newProblem("invalid-request", invalid.Field+" "+invalid.Reason)
		p.Field = invalid.Field
		return p
	}
	if soldOut, ok := errors.AsType[*stock.SoldOutError](err); ok {
		p := newProblem("sold-out", "product "+strconv.FormatInt(soldOut.ProductID, 10)+" has "+
			strconv.FormatInt(soldOut.Available, 10)+" left; "+strconv.FormatInt(soldOut.Requested, 10)+" requested")
		available := soldOut.Available
		p.ProductID, p.Requested, p.Available = soldOut.ProductID, soldOut.Requested, &available
		p.replayed = soldOut.Replayed
		return p
	}
	if notOpen, ok := errors.AsType[*stock.SaleNotOpenError](err); ok {
		starts := notOpen.StartsAt.UTC()
		p := newProblem("sale-not-open", fmt.Sprintf("product %d is on sale from %s", notOpen.ProductID, starts.Format(time.RFC3339)))
		p.ProductID, p.SaleStartsAt = notOpen.ProductID, &starts
		p.retryAfter = max(1, int(math.Ceil(notOpen.Opens().Seconds())))
		return p
	}
	if ended, ok := errors.AsType[*stock.SaleEndedError](err); ok {
		ends := ended.EndsAt.UTC()
		p := newProblem("sale-ended", fmt.Sprintf("the sale of product %d ended at %s", ended.ProductID, ends.Format(time.RFC3339)))
		p.ProductID, p.SaleEndsAt = ended.ProductID, &ends
		return p
	}
	if limit, ok := errors.AsType[*stock.CustomerLimitError](err); ok {
		p := newProblem("customer-limit", fmt.Sprintf("a customer may buy at most %d of product %d and this one has %d; %d requested",
			limit.Limit, limit.ProductID, limit.Bought, limit.Requested))
		bought := limit.Bought
		p.ProductID, p.MaxPerCustomer, p.Bought, p.Requested = limit.ProductID, limit.Limit, &bought, limit.Requested
		return p
	}
	if hold, ok := errors.AsType[*stock.HoldLimitError](err); ok {
		p := newProblem("hold-limit", fmt.Sprintf("a customer may hold at most %d of product %d at once and this one holds %d; %d requested",
			hold.Limit, hold.ProductID, hold.Held, hold.Requested))
		held := hold.Held
		p.ProductID, p.MaxHeldPerCustomer, p.Held, p.Requested = hold.ProductID, hold.Limit, &held, hold.Requested
		return p
	}
	if p := lineProblem(err); p != nil {
		return p
	}
	if noProduct, ok := errors.AsType[*stock.ProductNotFoundError](err); ok {
		p := newProblem("product-not-found", fmt.Sprintf("product %d does not exist", noProduct.ProductID))
		p.ProductID = noProduct.ProductID
		return p
	}
	busy, isBusy := errors.AsType[*stock.BusyError](err)
	switch {
	case errors.Is(err, stock.ErrProductNotFound):
		return newProblem("product-not-found", "the product does not exist")
	case errors.Is(err, stock.ErrHoldExpired):
		return newProblem("hold-expired", "the order's hold expired before it was confirmed; its units went back to the stock")
	case errors.Is(err, stock.ErrOrderCancelled):
		return newProblem("order-cancelled", "the order was cancelled; its units went back to the stock")
	case errors.Is(err, stock.ErrOrderConfirmed):
		return newProblem("order-confirmed", "the order is confirmed and cannot be cancelled")
	case errors.Is(err, stock.ErrOrderNotFound):
		return newProblem("order-not-found", "the order does not exist")
	case errors.Is(err, stock.ErrDuplicateSKU):
		return newProblem("duplicate-sku", "another product already uses this sku")
	case errors.Is(err, stock.ErrIdempotencyKeyReused):
		return newProblem("idempotency-key-reused", "this Idempotency-Key was first used with a different request")
	case errors.Is(err, stock.ErrOutcomeUnknown):
		p := newProblem("unavailable", "the outcome is unknown: Postgres did not answer whether it was written, or cannot yet show its standby has it; try again")
		p.retryAfter = 2
		return p
	case errors.Is(err, stock.ErrUnavailable), errors.Is(err, line.ErrUnavailable), errors.Is(err, context.DeadlineExceeded), errors.Is(err, identity.ErrKeysUnavailable):
		p := newProblem("unavailable", "Postgres or Redis could not be reached or did not answer in time; try again")
		p.retryAfter = 2
		return p
	case isBusy:
		p := newProblem("busy", "the product is contended; nothing was sold, try again")
		p.retryAfter = max(1, int(math.Ceil(busy.RetryAfter.Seconds())))
		return p
	case errors.Is(err, stock.ErrBusy):
		p := newProblem("busy", "the product is contended; nothing was sold, try again")
		p.retryAfter = 1
		return p
	case errors.Is(err, stock.ErrLockLost):
		p := newProblem("busy", "the product lock expired during the purchase and a newer holder took over; nothing was sold, try again")
		p.retryAfter = 1
		return p
	}
	return newProblem("internal", "an unexpected error occurred")
}

// lineProblem is the problem of the line's refusals (package line), nil for another error.
func lineProblem(err error) *problem {
	if no, ok := errors.AsType[*line.NotAdmittedError](err); ok {
		id := strconv.FormatInt(no.ProductID, 10)
		p := newProblem("not-admitted", "product "+id+" is sold through a line: "+no.Reason)
		p.ProductID, p.Line = no.ProductID, "/v1/products/"+id+"/line"
		if st := no.Status; st != nil {
			p.TicketStatus = string(st.State)
			if st.Place > 0 {
				place := st.Place
				p.Place = &place
			}
			if st.State == line.Waiting {
				ahead := st.Ahead
				p.Ahead = &ahead
			}
		}
		if no.Waited > 0 {
			// The order waited in line (Prefer: wait) and was not admitted meanwhile: it may
			// be sent again at once, as a long-poll that ran out is, so no Retry-After.
			p.applied = "wait=" + strconv.Itoa(int(no.Waited.Round(time.Second)/time.Second))
		}
		return p
	}
	if expired, ok := errors.AsType[*line.AdmissionExpiredError](err); ok {
		until := expired.Until.UTC()
		p := newProblem("admission-expired", fmt.Sprintf("the admission to buy product %d ran out at %s", expired.ProductID, until.Format(time.RFC3339)))
		p.ProductID, p.AdmittedUntil = expired.ProductID, &until
		return p
	}
	if used, ok := errors.AsType[*line.AdmissionUsedError](err); ok {
		p := newProblem("admission-used", fmt.Sprintf("the admission to buy product %d was used by another order", used.ProductID))
		p.ProductID = used.ProductID
		return p
	}
	switch {
	case errors.Is(err, line.ErrInvalidTicket):
		return newProblem("invalid-ticket", "the "+ticketHeader+" header is missing, malformed, or not a ticket of this product's line")
	case errors.Is(err, line.ErrTicketNotFound):
		return newProblem("ticket-not-found", "the line no longer has this ticket: join again")
	case errors.Is(err, line.ErrNoLine):
		return newProblem("line-not-found", "the product has no line")
	case errors.Is(err, line.ErrNotDrawn):
		return newProblem("line-not-drawn", "the line has not been drawn yet")
	}
	return nil
}

// rejectionCode is the problem code of why an order accepted for later was rejected: the code
// a synchronous order would have been answered with for the same reason.
func rejectionCode(r async.Reason) string {
	switch r {
	case async.ReasonSoldOut:
		return "sold-out"
	case async.ReasonProductNotFound:
		return "product-not-found"
	case async.ReasonInvalid:
		return "invalid-request"
	case async.ReasonSaleNotOpen, async.ReasonSaleEnded, async.ReasonCustomerLimit, async.ReasonHoldLimit:
		return string(r) // named as the problem codes are
	}
	return "internal"
}

// writeError answers with the problem for err and logs server-side failures with their whole
// chain. Client errors are not logged: they are the client's to handle.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	p := problemFor(err)
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		// The client went away; nobody will read the answer, and it is no server failure.
		p = newProblem("unavailable", "the request was cancelled")
		p.Instance = r.URL.Path
		s.log.DebugContext(r.Context(), "client went away", slog.String("request_id", requestID(r.Context())), slog.Any("error", err))
		writeProblem(w, p)
		return
	}
	// The request id is in the X-Request-ID header, not the body, so that a replayed outcome
	// is byte for byte the stored one.
	p.Instance = r.URL.Path
	if p.Code == "unavailable" && r.Method == http.MethodPost && r.Header.Get("Idempotency-Key") != "" {
		p.Detail += " with the same Idempotency-Key: it is safe, whatever became of this attempt"
	}
	if busy, ok := errors.AsType[*stock.BusyError](err); ok && busy.Shed && s.queue != nil {
		// The crowd is the problem, not the product: a queued order waits its turn instead
		// of retrying into the same crowd.
		p.Prefer = "respond-async"
		p.Detail += ", or send it with Prefer: respond-async to have it queued and decided in turn"
	}
	if p.Status >= 500 {
		s.log.ErrorContext(r.Context(), "request failed",
			slog.String("request_id", requestID(r.Context())), slog.String("code", p.Code), slog.Any("error", err))
	}
	writeProblem(w, p)
}

func writeProblem(w http.ResponseWriter, p *problem) {
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	if p.replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	if p.applied != "" {
		w.Header().Set("Preference-Applied", p.applied)
	}
	if p.authenticate != "" {
		w.Header().Set("WWW-Authenticate", p.authenticate)
	}
	writeJSON(w, p.Status, "application/problem+json", p)
}
