package stockhttp

import (
	"encoding/base64"
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// DefaultOrdersPage is how many orders a page of GET /v1/orders holds without limit=.
const DefaultOrdersPage = 20

type ordersPageResponse struct {
	Items []orderResponse `json:"items"`
	// NextCursor is null on the last page.
	NextCursor *string `json:"next_cursor"`
}

// handleListOrders answers GET /v1/orders: a page of one customer's orders, newest first —
// every status, or those status= names (comma-separated, or the parameter repeated). Whose: the verified caller's (customer_id= may repeat it, not name another: 403);
// for an admin, and in body mode, the customer customer_id= names (required).
func (s *Server) handleListOrders(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	customer := q.Get("customer_id")
	if c := callerOf(r.Context()); c.customer != "" {
		if customer != "" && customer != c.customer {
			s.writeError(w, r, mismatch("customer_id"))
			return
		}
		customer = c.customer
	} else if customer == "" {
		s.writeError(w, r, &stock.ValidationError{Field: "customer_id", Reason: "is required: whose orders"})
		return
	}
	limit := DefaultOrdersPage
	if raw := q.Get("limit"); raw != "" {
		n, err := strconv.Atoi(raw)
		if err != nil || n < 1 || n > stock.MaxOrdersPage {
			s.writeError(w, r, &stock.ValidationError{Field: "limit", Reason: "must be an integer between 1 and " + strconv.Itoa(stock.MaxOrdersPage)})
			return
		}
		limit = n
	}
	var after *stock.OrdersCursor
	if raw := q.Get("cursor"); raw != "" {
		c, ok := decodeCursor(raw)
		if !ok {
			s.writeError(w, r, &stock.ValidationError{Field: "cursor", Reason: "is not a cursor this service gave (next_cursor of a page)"})
			return
		}
		after = &c
	}
	var statuses []string
	for _, v := range q["status"] {
		statuses = append(statuses, strings.Split(v, ",")...)
	}
	page, err := s.svc.CustomerOrders(r.Context(), stock.OrdersQuery{CustomerID: customer, Limit: limit, After: after, Statuses: statuses})
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	resp := ordersPageResponse{Items: make([]orderResponse, len(page.Orders))}
	for i, o := range page.Orders {
		resp.Items[i] = toOrderResponse(o)
	}
	if page.Next != nil {
		next := encodeCursor(*page.Next)
		resp.NextCursor = &next
	}
	writeJSON(w, http.StatusOK, "application/json", resp)
}

// cursorVersion leads every cursor, so that a later shape can tell an old cursor from its own.
const cursorVersion = 1

// encodeCursor makes a cursor opaque to clients: a version byte, the order's created_at in
// nanoseconds (exact for Postgres's microseconds and for the memory store) and its id,
// base64url without padding, so that it goes in a query string as it is.
func encodeCursor(c stock.OrdersCursor) string {
	var buf [1 + 8 + 16]byte
	buf[0] = cursorVersion
	binary.BigEndian.PutUint64(buf[1:9], uint64(c.CreatedAt.UnixNano()))
	copy(buf[9:], c.ID[:])
	return base64.RawURLEncoding.EncodeToString(buf[:])
}

func decodeCursor(s string) (stock.OrdersCursor, bool) {
	buf, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(buf) != 1+8+16 || buf[0] != cursorVersion {
		return stock.OrdersCursor{}, false
	}
	id, err := uuid.FromBytes(buf[9:])
	if err != nil {
		return stock.OrdersCursor{}, false
	}
	return stock.OrdersCursor{CreatedAt: time.Unix(0, int64(binary.BigEndian.Uint64(buf[1:9]))).UTC(), ID: id}, true
}
