package stockhttp

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/line"
	"github.com/stocksvc/stocksvc/internal/stock"
)

func (s *Server) handleCreateProduct(w http.ResponseWriter, r *http.Request) {
	var req createProductRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	in, err := req.toNewProduct()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	p, err := s.svc.CreateProduct(r.Context(), in)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/products/"+strconv.FormatInt(p.ID, 10))
	writeJSON(w, http.StatusCreated, "application/json", toProductResponse(p))
}

func (s *Server) handleUpdateSale(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req updateSaleRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	c, err := req.toSaleChange()
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.updateSale(w, r, id, c)
}

func (s *Server) handleEndSale(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.updateSale(w, r, id, stock.SaleChange{EndNow: true})
}

func (s *Server) updateSale(w http.ResponseWriter, r *http.Request, id int64, c stock.SaleChange) {
	p, err := s.svc.UpdateSale(r.Context(), id, c)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", toProductResponse(p))
}

// handleListProducts lists products, a page at a time: `limit` (1–100, default 20), `cursor`
// (the next_cursor of the page before), and `on_sale=true` for those a customer can still buy.
func (s *Server) handleListProducts(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	var (
		limit int
		after int64
		err   error
	)
	if v := q.Get("limit"); v != "" {
		if limit, err = strconv.Atoi(v); err != nil || limit < 1 {
			s.writeError(w, r, &stock.ValidationError{Field: "limit", Reason: fmt.Sprintf("must be an integer between 1 and %d", stock.MaxProductsPage)})
			return
		}
	}
	if v := q.Get("cursor"); v != "" {
		if after, err = strconv.ParseInt(v, 10, 64); err != nil || after < 1 {
			s.writeError(w, r, &stock.ValidationError{Field: "cursor", Reason: "is not a cursor this service gave"})
			return
		}
	}
	onSale := false
	if v := q.Get("on_sale"); v != "" {
		if onSale, err = strconv.ParseBool(v); err != nil {
			s.writeError(w, r, &stock.ValidationError{Field: "on_sale", Reason: "must be true or false"})
			return
		}
	}
	page, err := s.svc.Products(r.Context(), after, limit, onSale)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := productsResponse{Items: make([]productResponse, len(page.Products))}
	for i, p := range page.Products {
		resp.Items[i] = toProductResponse(p)
	}
	if page.Next > 0 {
		next := strconv.FormatInt(page.Next, 10)
		resp.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, "application/json", resp)
}

func (s *Server) handleGetProduct(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	v, err := s.svc.Product(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	setFreshness(w.Header(), v, time.Now())
	writeJSON(w, http.StatusOK, "application/json", toProductResponse(v.Product))
}

// setFreshness says how fresh a product read is: Age, the whole seconds since the Postgres
// read (or committed purchase) it reflects, and Cache-Status (RFC 9211), whether it was served
// from the service's cache (hit) or read from Postgres for this request (fwd=miss). The body's
// version orders reads exactly.
func setFreshness(h http.Header, v stock.ProductView, now time.Time) {
	h.Set("Age", strconv.FormatInt(int64(max(now.Sub(v.Read), 0)/time.Second), 10))
	status := "stocksvc; hit"
	if v.From == stock.FromPostgres {
		status = "stocksvc; fwd=miss"
	}
	h.Set("Cache-Status", status)
}

func (s *Server) handleRestock(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	key, err := idempotencyKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req restockRequest
	if err := s.decodeJSON(w, r, &req); err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.Quantity == nil {
		s.writeError(w, r, &stock.ValidationError{Field: "quantity", Reason: "is required"})
		return
	}
	res, err := s.svc.Restock(r.Context(), stock.RestockRequest{ProductID: id, Quantity: *req.Quantity, IdempotencyKey: key})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if res.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusOK, "application/json", toProductResponse(res.Product))
}

func (s *Server) handleAudit(w http.ResponseWriter, r *http.Request) {
	id, err := productID(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a, err := s.svc.Audit(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", toAuditResponse(a))
}

func (s *Server) handlePlaceOrder(w http.ResponseWriter, r *http.Request) {
	key, err := idempotencyKey(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var req placeOrderRequest
	a := admittedOf(r.Context())
	if a != nil {
		// Read by withAdmission; a body it could not read is answered now, after the
		// credential, as it always was.
		req, err = a.req, a.err
	} else {
		err = s.decodeJSON(w, r, &req)
	}
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if req.CustomerID, err = orderCustomer(r.Context(), req.CustomerID); err != nil {
		s.writeError(w, r, err)
		return
	}
	var cleared line.Cleared
	if a != nil {
		cleared = a.cleared
	}
	if cleared.Customer != "" && req.CustomerID == "" {
		req.CustomerID = cleared.Customer // body mode: the pass names the customer
	}
	if cleared.Customer != "" && req.CustomerID != cleared.Customer {
		// The gateway's customer, or the body's in body mode, is not the pass's.
		s.writeError(w, r, mismatch(passHeader))
		return
	}
	order := req.toOrderRequest(key)
	order.LockWait = lockWait(r.Context(), cleared.LockWait)
	if s.queue != nil && prefersAsync(r.Header) {
		// Decided later, or refused now when there is nothing to wait for (its product
		// known sold out: 409, as the synchronous route would answer).
		acc, err := s.queue.Place(r.Context(), order)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.used(cleared, key)
		s.writeAcceptance(w, r, acc)
		return
	}
	res, err := s.svc.PlaceOrder(r.Context(), order)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	s.used(cleared, key)
	if res.Accepted != nil {
		// The key belongs to an order accepted for later: answer with it, as its own retry is.
		s.writeAccepted(w, r, *res.Accepted)
		return
	}
	s.writeConfirmed(w, res.Order, res.Replayed)
}

// lockWait is how long an admitted order may wait for its locks (line.Cleared.LockWait): no
// longer than leaves its request time to be decided and answered (lockMargin) before the
// request's own deadline; 0 (the locker's wait) for an order without an admission.
func lockWait(ctx context.Context, admitted time.Duration) time.Duration {
	if dl, ok := ctx.Deadline(); ok {
		admitted = min(admitted, time.Until(dl)-lockMargin)
	}
	return max(admitted, 0)
}

// lockMargin is what an admitted order's lock wait leaves of its request's time for the
// batch's read and write once the lock is held.
const lockMargin = time.Second

// used spends the admissions an order's passes cleared, once the order was confirmed, held
// or accepted: one admission, one order.
func (s *Server) used(cl line.Cleared, key string) {
	if len(cl.Admissions) > 0 {
		s.lines.Used(cl, key)
	}
}

func (s *Server) writeConfirmed(w http.ResponseWriter, o stock.Order, replayed bool) {
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	r := toOrderResponse(o)
	w.Header().Set("Location", "/v1/orders/"+r.ID)
	writeOrder(w, http.StatusCreated, r)
}

// writeAcceptance answers an order sent with Prefer: respond-async: 202 with where to watch
// it, or, when its key's outcome is an order already confirmed, that order (201, replayed).
func (s *Server) writeAcceptance(w http.ResponseWriter, r *http.Request, acc async.Acceptance) {
	if acc.Confirmed != nil {
		s.writeConfirmed(w, *acc.Confirmed, true)
		return
	}
	if acc.Replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	s.writeAcceptedOrder(w, r, acc.Order)
}

// writeAccepted answers a synchronous order whose key belongs to the accepted order id. The
// answer is that order as it stands, which only the queue holds.
func (s *Server) writeAccepted(w http.ResponseWriter, r *http.Request, id uuid.UUID) {
	if s.queue == nil {
		s.writeError(w, r, fmt.Errorf("order %s was accepted for later, and this server has no queue to read it from", id))
		return
	}
	o, err := s.queue.Order(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	w.Header().Set("Idempotent-Replayed", "true")
	s.writeAcceptedOrder(w, r, o)
}

// prefersAsync reports whether the request's Prefer header (RFC 7240) asks for respond-async.
func prefersAsync(h http.Header) bool {
	for _, v := range h.Values("Prefer") {
		for pref := range strings.SplitSeq(v, ",") {
			name, _, _ := strings.Cut(pref, ";")
			name, _, _ = strings.Cut(name, "=")
			if strings.EqualFold(strings.TrimSpace(name), "respond-async") {
				return true
			}
		}
	}
	return false
}

func (s *Server) handleGetOrder(w http.ResponseWriter, r *http.Request) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		// A malformed id names no order; that is all the client needs to know.
		s.writeError(w, r, stock.ErrOrderNotFound)
		return
	}
	found, err := s.findOrder(r.Context(), id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	owner := found.Order.CustomerID
	if found.Confirmed != nil {
		owner = found.Confirmed.CustomerID
	}
	if !mayRead(r.Context(), owner) {
		s.writeError(w, r, stock.ErrOrderNotFound)
		return
	}
	if found.Confirmed != nil {
		writeOrder(w, http.StatusOK, toOrderResponse(*found.Confirmed))
		return
	}
	// Confirmed between Find's two reads: shown as the confirmed order it now is.
	body, err := s.asyncOrderResponse(r.Context(), found.Order)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if found.Order.Status == async.StatusPending {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, http.StatusOK, "application/json", body)
}

// findConfirmed is findOrder for a server without a queue: only the purchase path's orders.
func (s *Server) findConfirmed(ctx context.Context, id uuid.UUID) (async.Found, error) {
	o, err := s.svc.Order(ctx, id)
	if err != nil {
		return async.Found{}, err
	}
	return async.Found{Confirmed: &o}, nil
}

// productID reads the {id} path parameter. An id that is not a positive integer names no
// product, so it is answered as one that does not exist.
func productID(r *http.Request) (int64, error) {
	raw := chi.URLParam(r, "id")
	id, err := strconv.ParseInt(raw, 10, 64)
	// One URL per product: "01" or "+1" name no product, rather than product 1 under an alias.
	if err != nil || id < 1 || strconv.FormatInt(id, 10) != raw {
		return 0, stock.ErrProductNotFound
	}
	return id, nil
}

// idempotencyKey reads the Idempotency-Key header: absent means none; present must be 1..255
// characters (the length and content rules are the service's).
func idempotencyKey(r *http.Request) (string, error) {
	values := r.Header.Values("Idempotency-Key")
	switch {
	case len(values) == 0:
		return "", nil
	case len(values) > 1:
		return "", &stock.ValidationError{Field: "Idempotency-Key", Reason: "must be sent once"}
	case values[0] == "":
		return "", &stock.ValidationError{Field: "Idempotency-Key", Reason: "must not be empty"}
	}
	return values[0], nil
}

// handleConfirm confirms a held order (the customer paid): its customer's or an admin's.
func (s *Server) handleConfirm(w http.ResponseWriter, r *http.Request) {
	s.decideHold(w, r, s.svc.Confirm)
}

// handleCancel cancels a held order and gives its units back: its customer's or an admin's.
func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) {
	s.decideHold(w, r, s.svc.Cancel)
}

// decideHold runs decide on the order the path names, for the caller: the statement that
// decides checks that the order is the caller's (any order, for an admin or in body mode), and
// another customer's order is one that does not exist to them.
func (s *Server) decideHold(w http.ResponseWriter, r *http.Request, decide func(context.Context, uuid.UUID, string) (stock.Order, error)) {
	id, err := uuid.Parse(chi.URLParam(r, "id"))
	if err != nil {
		s.writeError(w, r, stock.ErrOrderNotFound)
		return
	}
	o, err := decide(r.Context(), id, decider(r.Context()))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, "application/json", toOrderResponse(o))
}

// decider is the customer whose orders the caller may decide, as mayRead lets them read them:
// "" (any customer's) for an admin and, in body mode, anyone.
func decider(ctx context.Context) string {
	if c := callerOf(ctx); !c.admin {
		return c.customer
	}
	return ""
}
