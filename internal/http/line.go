package stockhttp

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stocksvc/stocksvc/internal/identity"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// The line's routes (package line): join, a ticket's status (a long-poll with Prefer: wait and
// If-None-Match), leave, the line as a whole, and the draw for an admin; and the check of an
// order's passes before anything else the order costs (withAdmission).

// Lines is what the handlers ask of the line: *line.Service, or one over the in-memory stores
// in tests. Each method returns the errors its line.Service namesake documents.
type Lines interface {
	Join(ctx context.Context, product int64, customer string) (line.Joined, error)
	Wait(ctx context.Context, product int64, ticket, etag string, wait time.Duration) (line.Status, error)
	Leave(ctx context.Context, product int64, ticket string) (line.Status, error)
	Summary(ctx context.Context, product int64) (line.Summary, error)
	// Customer returns the customer a ticket was issued to (its signature checked only).
	Customer(ctx context.Context, product int64, ticket string) (string, error)
	Draw(ctx context.Context, product int64) (line.Draw, error)
	// Admit checks an order's passes for the products of the order that have a line; with a
	// wait, an order with its ticket and no pass waits in line for its admission.
	Admit(ctx context.Context, products []int64, passes []string, ticket, key string, wait time.Duration) (line.Cleared, error)
	// Used records that the order the passes cleared was confirmed, held or accepted.
	Used(cl line.Cleared, key string)
}

var _ Lines = (*line.Service)(nil)

// The line's headers.
const (
	ticketHeader = "Line-Ticket"
	passHeader   = "Line-Pass"
)

// limitTicket holds a ticket's leave to its customer's rate limit, as the customer's orders and
// joins are (Limits.Customer). A ticket's status is not held to it: it is answered from this
// replica's memory (a signature and a lookup, as an order refused for want of a pass is), and a
// limit on it would only make an admitted buyer late to learn it, its units waiting meanwhile.
// In body mode the ticket's customer is whatever its join said, and, as there, not limited.
// Errors: line.ErrInvalidTicket, a *limitedError.
func (s *Server) limitTicket(r *http.Request, product int64) error {
	if s.limits.customer == nil || s.customers.Mode == identity.ModeBody {
		return nil
	}
	customer, err := s.lines.Customer(r.Context(), product, r.Header.Get(ticketHeader))
	if err != nil {
		return err
	}
	return s.limits.takeCustomer(customer)
}

// lineRoute is h, or, on a server without lines, a handler that answers that no product has one.
func (s *Server) lineRoute(h http.HandlerFunc) http.HandlerFunc {
	if s.lines == nil {
		return func(w http.ResponseWriter, r *http.Request) { s.writeError(w, r, line.ErrNoLine) }
	}
	return h
}

// joinRequest is POST /v1/products/{id}/line's optional body: the customer, in body mode.
type joinRequest struct {
	CustomerID string `json:"customer_id"`
}

func (s *Server) handleJoin(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req joinRequest
	if r.ContentLength != 0 {
		if err := s.decodeJSON(w, r, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	customer, err := orderCustomer(r.Context(), req.CustomerID)
	if err == nil {
		err = stock.ValidateCustomerID(customer)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	j, err := s.lines.Join(r.Context(), id, customer)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	status := http.StatusOK
	if j.Created {
		status = http.StatusCreated
	}
	w.Header().Set("Location", "/v1/products/"+strconv.FormatInt(id, 10)+"/line/ticket")
	body := toTicketResponse(j.Status)
	body.Ticket = j.Token
	writeTicket(w, status, j.Status, body, false)
}

// handleTicket answers a ticket's status: at once, or, with Prefer: wait=N and If-None-Match,
// once it differs from the one the client has (304 Not Modified if it did not within N
// seconds, at most line.Config.MaxWait).
func (s *Server) handleTicket(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	etag := r.Header.Get("If-None-Match")
	var wait time.Duration
	if etag != "" {
		wait = preferredWait(r.Header)
	}
	st, err := s.lines.Wait(r.Context(), id, r.Header.Get(ticketHeader), etag, wait)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if etag != "" && st.ETag == etag {
		w.Header().Set("ETag", st.ETag)
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(http.StatusNotModified)
		return
	}
	writeTicket(w, http.StatusOK, st, toTicketResponse(st), wait == 0)
}

func (s *Server) handleLeave(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if err := s.limitTicket(r, id); err != nil {
		s.writeError(w, r, err)
		return
	}
	st, err := s.lines.Leave(r.Context(), id, r.Header.Get(ticketHeader))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeTicket(w, http.StatusOK, st, toTicketResponse(st), false)
}

func (s *Server) handleLine(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	sum, err := s.lines.Summary(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := lineResponse{ProductID: sum.ProductID, Version: sum.Version, Drawn: sum.Drawn, InLine: sum.InLine,
		Admitted: sum.Active, Admissions: sum.Admissions, SoldOut: sum.SoldOut}
	if !sum.DrawnAt.IsZero() {
		at := sum.DrawnAt.UTC()
		resp.DrawnAt = &at
	}
	writeJSON(w, http.StatusOK, "application/json", resp)
}

func (s *Server) handleDraw(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	d, err := s.lines.Draw(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := drawResponse{ProductID: d.ProductID, Seed: hex.EncodeToString(d.Seed), DrawnAt: d.DrawnAt.UTC(),
		Formula: line.DrawFormula, Tickets: make([]drawnDTO, len(d.Tickets))}
	for i, t := range d.Tickets {
		resp.Tickets[i] = drawnDTO{TicketID: t.Ticket, CustomerID: t.CustomerID, Place: t.Place}
	}
	writeJSON(w, http.StatusOK, "application/json", resp)
}

// maxLongPoll caps a ticket's long-poll here: the line's own cap (line.Config.MaxWait,
// STOCKSVC_LINE_MAX_WAIT, at most this) answers first.
const maxLongPoll = time.Minute

// longPoll returns how long a ticket's long-poll (GET .../line/ticket with If-None-Match and
// Prefer: wait), or an order waiting in line (POST /v1/orders with a Line-Ticket, no Line-Pass
// and Prefer: wait), may wait, which the request's timeout adds to its own, and moves the
// connection's write deadline (the server's WriteTimeout, set from the request timeout) as far;
// 0 for any other request.
func (s *Server) longPoll(w http.ResponseWriter, r *http.Request) time.Duration {
	var wait time.Duration
	switch {
	case (r.Method == http.MethodGet || r.Method == http.MethodHead) && strings.HasSuffix(r.URL.Path, "/line/ticket") &&
		r.Header.Get("If-None-Match") != "":
		wait = preferredWait(r.Header)
	case r.Method == http.MethodPost && r.URL.Path == "/v1/orders" && s.lines != nil:
		wait = orderWait(r)
	}
	if wait > 0 {
		// A server without a write deadline (a test's) has none to move.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(wait + s.timeout + writeMargin))
	}
	return wait
}

// writeMargin is how long past a long-poll's deadline its answer may take to be written, as
// cmd/stocksvc's WriteTimeout leaves past the request timeout.
const writeMargin = 5 * time.Second

// preferredWait reads Prefer: wait=N (RFC 7240), in seconds; 0 when absent or not a number.
func preferredWait(h http.Header) time.Duration {
	for _, v := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			name, value, _ := strings.Cut(strings.TrimSpace(pref), "=")
			if strings.EqualFold(strings.TrimSpace(name), "wait") {
				value, _, _ = strings.Cut(value, ";")
				if n, err := strconv.Atoi(strings.Trim(strings.TrimSpace(value), `"`)); err == nil && n > 0 {
					return time.Duration(min(n, int(maxLongPoll/time.Second))) * time.Second
				}
			}
		}
	}
	return 0
}

// writeTicket answers with a ticket's status: its ETag, no caching (the ticket and the pass are
// credentials), and, for a plain poll of a ticket still in line, Retry-After: 1 — never a wait
// that could outlast its turn (a long-poll is the way to learn it at once).
func writeTicket(w http.ResponseWriter, status int, st line.Status, body ticketResponse, plain bool) {
	w.Header().Set("ETag", st.ETag)
	w.Header().Set("Cache-Control", "no-store")
	if plain && (st.State == line.Queued || st.State == line.Waiting) {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, "application/json", body)
}

// ticketResponse is a ticket's status as the API shows it.
type ticketResponse struct {
	ProductID  int64  `json:"product_id"`
	TicketID   int64  `json:"ticket_id"`
	CustomerID string `json:"customer_id"`
	Status     string `json:"status"`
	// Ticket is the Line-Ticket, on a join's answer only.
	Ticket string `json:"ticket,omitempty"`
	Place  *int64 `json:"place"`
	Ahead  *int64 `json:"ahead,omitempty"`
	// EstimatedWait is seconds, for a waiting ticket.
	EstimatedWait *int64     `json:"estimated_wait,omitempty"`
	Queued        *int64     `json:"queued,omitempty"`
	AdmittedUntil *time.Time `json:"admitted_until,omitempty"`
	Pass          string     `json:"pass,omitempty"`
	MayReturn     *bool      `json:"may_return,omitempty"`
}

func toTicketResponse(st line.Status) ticketResponse {
	r := ticketResponse{ProductID: st.ProductID, TicketID: st.Ticket, CustomerID: st.CustomerID, Status: string(st.State), Pass: st.Pass}
	if st.Place > 0 {
		place := st.Place
		r.Place = &place
	}
	switch st.State {
	case line.Waiting:
		ahead, secs := st.Ahead, int64(st.Estimate/time.Second)
		r.Ahead, r.EstimatedWait = &ahead, &secs
	case line.Queued:
		queued := st.Queued
		r.Queued = &queued
	case line.SoldOut:
		mayReturn := st.MayReturn
		r.MayReturn = &mayReturn
	}
	if !st.AdmittedUntil.IsZero() {
		until := st.AdmittedUntil.UTC()
		r.AdmittedUntil = &until
	}
	return r
}

// lineResponse is GET /v1/products/{id}/line.
type lineResponse struct {
	ProductID  int64      `json:"product_id"`
	Version    int64      `json:"version"`
	DrawnAt    *time.Time `json:"drawn_at"`
	Drawn      int64      `json:"drawn"`
	InLine     int64      `json:"in_line"`
	Admitted   int64      `json:"admitted"`
	Admissions int64      `json:"admissions"`
	SoldOut    bool       `json:"sold_out"`
}

// drawResponse is GET /v1/products/{id}/line/draw, for an admin.
type drawResponse struct {
	ProductID int64      `json:"product_id"`
	Seed      string     `json:"seed"`
	DrawnAt   time.Time  `json:"drawn_at"`
	Formula   string     `json:"formula"`
	Tickets   []drawnDTO `json:"tickets"`
}

type drawnDTO struct {
	TicketID   int64  `json:"ticket_id"`
	CustomerID string `json:"customer_id"`
	Place      int64  `json:"place"`
}

// admittedOrder is what withAdmission learnt of an order on the way in: its body (or why it
// could not be read, answered by the handler once the customer is known, as before), and what
// its passes cleared.
type admittedOrder struct {
	req     placeOrderRequest
	err     error
	cleared line.Cleared
}

// bounded reports whether the line bounds this order: every product of it has a line and was
// cleared by an admission. Such an order is not held to its customer's rate limit
// (withCustomer): an admission clears one order, a second use is refused from memory
// (admission-used), and there are never more admissions than units left — while a limit would
// only delay the admitted buyer, whose units wait for it, and with them the whole sale.
func (a *admittedOrder) bounded() bool {
	if a == nil || a.err != nil || len(a.cleared.Admissions) == 0 {
		return false
	}
	for _, it := range a.req.Items {
		if !slices.ContainsFunc(a.cleared.Admissions, func(ad line.Admission) bool { return ad.ProductID == it.ProductID }) {
			return false
		}
	}
	return true
}

type admittedKey struct{}

func admittedOf(ctx context.Context) *admittedOrder {
	a, _ := ctx.Value(admittedKey{}).(*admittedOrder)
	return a
}

// withAdmission checks an order's passes (Line-Pass) for the products of the order that have a
// line, before anything else the order costs — the customer's token above all: an order
// without a valid pass for a lined product is refused here, from this replica's memory. A
// valid pass names the customer it was issued to (withCustomer then verifies no token: the
// ticket was issued to a verified customer). The body is read once, here, for the handler.
func (s *Server) withAdmission(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.lines == nil {
			next.ServeHTTP(w, r)
			return
		}
		a := &admittedOrder{}
		a.err = s.decodeJSON(w, r, &a.req)
		key, keyErr := idempotencyKey(r)
		if a.err == nil && keyErr == nil {
			products := make([]int64, len(a.req.Items))
			for i, it := range a.req.Items {
				products[i] = it.ProductID
			}
			cl, err := s.lines.Admit(r.Context(), products, passes(r.Header), r.Header.Get(ticketHeader), key, orderWait(r))
			if err != nil {
				s.writeError(w, r, soldOutInLine(err, a.req))
				return
			}
			a.cleared = cl
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), admittedKey{}, a)))
	})
}

// orderWait is how long an order may wait in line for its admission: Prefer: wait=N, with a
// Line-Ticket and no Line-Pass (line.Service.Admit); 0 for any other order.
func orderWait(r *http.Request) time.Duration {
	if r.Header.Get(ticketHeader) == "" || len(r.Header.Values(passHeader)) > 0 {
		return 0
	}
	return preferredWait(r.Header)
}

// soldOutInLine is err, or, when an order waiting in line learnt that its product sold out,
// the refusal the stock would have given it: nothing left of what it asked for.
func soldOutInLine(err error, req placeOrderRequest) error {
	so, ok := errors.AsType[*line.SoldOutError](err)
	if !ok {
		return err
	}
	var requested int64
	for _, it := range req.Items {
		if it.ProductID == so.ProductID {
			requested += it.Quantity
		}
	}
	return fmt.Errorf("%w: %w", err, &stock.SoldOutError{ProductID: so.ProductID, Requested: requested})
}

// passes reads the Line-Pass values: one per lined product of the order, in one header or
// several (a pass is base64url, so a comma only separates).
func passes(h http.Header) []string {
	var out []string
	for _, v := range h.Values(passHeader) {
		for p := range strings.SplitSeq(v, ",") {
			if p = strings.TrimSpace(p); p != "" {
				out = append(out, p)
			}
		}
	}
	return out
}
