package stockhttp

import (
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/stocksvc/stocksvc/internal/async"
	"github.com/stocksvc/stocksvc/internal/stock"
)

// The order's JSON, in one place: the request that places an order (placeOrderRequest) and how
// its body is read in one pass, and the order as every route answers with it (orderResponse)
// and how it is written without reflection. Both fast paths stand in for encoding/json on the
// purchase path and must agree with it byte for byte (orderjson_internal_test.go); decode.go's
// general path reads every other body, and an order's that the fast one declines.

type orderItemDTO struct {
	ProductID int64 `json:"product_id"`
	Quantity  int64 `json:"quantity"`
}

type placeOrderRequest struct {
	CustomerID string         `json:"customer_id"`
	Items      []orderItemDTO `json:"items"`
}

func (r placeOrderRequest) toOrderRequest(idempotencyKey string) stock.OrderRequest {
	items := make([]stock.Item, len(r.Items))
	for i, it := range r.Items {
		items[i] = stock.Item{ProductID: it.ProductID, Quantity: it.Quantity}
	}
	return stock.OrderRequest{CustomerID: r.CustomerID, Items: items, IdempotencyKey: idempotencyKey}
}

type orderResponse struct {
	ID         string         `json:"id"`
	CustomerID string         `json:"customer_id"`
	Status     string         `json:"status"`
	Items      []orderItemDTO `json:"items"`
	CreatedAt  time.Time      `json:"created_at"`
	// ExpiresAt: a held order's end unless confirmed (it stays on the order once decided).
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	// When a hold was confirmed, cancelled or expired; for an order accepted for later and not
	// confirmed, when it was decided, and why it was rejected.
	DecidedAt *time.Time    `json:"decided_at,omitempty"`
	Rejection *rejectionDTO `json:"rejection,omitempty"`
}

// rejectionDTO is why an order accepted for later was refused: the problem a synchronous order
// would have been answered with, without the envelope.
type rejectionDTO struct {
	Code      string `json:"code"`
	ProductID int64  `json:"product_id,omitempty"`
	Requested int64  `json:"requested,omitempty"`
	Available *int64 `json:"available,omitempty"`
}

// toAsyncOrderResponse shows an order accepted for later; created_at is when it was accepted.
func toAsyncOrderResponse(o async.Order) orderResponse {
	r := toOrderResponse(stock.Order{ID: o.ID, CustomerID: o.CustomerID, Status: o.Status, Items: o.Items, CreatedAt: o.AcceptedAt})
	if !o.DecidedAt.IsZero() {
		at := o.DecidedAt.UTC()
		r.DecidedAt = &at
	}
	if rej := o.Rejection; rej != nil {
		r.Rejection = &rejectionDTO{Code: rejectionCode(rej.Reason), ProductID: rej.ProductID, Requested: rej.Requested}
		if rej.Reason == async.ReasonSoldOut {
			// What was left is a figure of a refusal for want of stock only (0 included).
			available := rej.Available
			r.Rejection.Available = &available
		}
	}
	return r
}

func toOrderResponse(o stock.Order) orderResponse {
	items := make([]orderItemDTO, len(o.Items))
	for i, it := range o.Items {
		items[i] = orderItemDTO{ProductID: it.ProductID, Quantity: it.Quantity}
	}
	return orderResponse{ID: o.ID.String(), CustomerID: o.CustomerID, Status: o.Status, Items: items, CreatedAt: o.CreatedAt.UTC(),
		ExpiresAt: utc(o.ExpiresAt), DecidedAt: utc(o.DecidedAt)}
}

// An order's body is small and almost always has one shape: {"customer_id": "...", "items":
// [{"product_id": N, "quantity": N}, ...]}. decodeJSON's general path reads a body twice —
// checkNames's tokenizer, which it needs because encoding/json matches names regardless of
// case and keeps the last of two, then encoding/json's decode — and the two cost more of a
// replica's CPU per order than the purchase's own decision (issue #24). decodeFast reads that
// shape in one pass, names and duplicates included, and declines everything else: the general
// path then decodes the body and words the problem, so that what a client is told never
// depends on which path read its body.

// fastDecoder is a request body that can read its usual shape in one pass.
type fastDecoder interface {
	// decodeFast stores the body's value and reports true when body is exactly what the
	// general path would accept (one object, known names once each, values of the fields'
	// types, nothing after it) and decodes to the same value; otherwise it stores nothing and
	// reports false. body is valid UTF-8.
	decodeFast(body []byte) bool
}

// decodeFast accepts the order's names spelled exactly (any other spelling is the general
// path's to refuse), strings without escapes, and integers without fraction or exponent; it
// declines null, escapes, and anything it does not know.
func (r *placeOrderRequest) decodeFast(body []byte) bool {
	d := fastJSON{b: body}
	var out placeOrderRequest
	var sawCustomer, sawItems bool
	ok := d.object(func(name []byte) bool {
		switch string(name) {
		case "customer_id":
			if sawCustomer {
				return false
			}
			sawCustomer = true
			s, ok := d.str()
			out.CustomerID = string(s)
			return ok
		case "items":
			if sawItems {
				return false
			}
			sawItems = true
			out.Items = []orderItemDTO{} // [] decodes to an empty slice, as encoding/json's does
			return d.array(func() bool {
				var it orderItemDTO
				var sawProduct, sawQuantity bool
				ok := d.object(func(name []byte) bool {
					var n int64
					var ok bool
					switch string(name) {
					case "product_id":
						n, ok = d.integer()
						ok = ok && !sawProduct
						sawProduct, it.ProductID = true, n
					case "quantity":
						n, ok = d.integer()
						ok = ok && !sawQuantity
						sawQuantity, it.Quantity = true, n
					}
					return ok
				})
				out.Items = append(out.Items, it)
				return ok
			})
		}
		return false
	})
	if !ok || !d.end() {
		return false
	}
	*r = out
	return true
}

// fastJSON reads the JSON of decodeFast, failing (false) at anything outside its subset.
type fastJSON struct {
	b []byte
	i int
}

func (d *fastJSON) ws() {
	for d.i < len(d.b) {
		switch d.b[d.i] {
		case ' ', '\t', '\n', '\r':
			d.i++
		default:
			return
		}
	}
}

// next skips whitespace and consumes c if it comes next.
func (d *fastJSON) next(c byte) bool {
	d.ws()
	if d.i < len(d.b) && d.b[d.i] == c {
		d.i++
		return true
	}
	return false
}

// end reports whether nothing but whitespace is left.
func (d *fastJSON) end() bool {
	d.ws()
	return d.i == len(d.b)
}

// object reads {"name": value, ...}, calling member with each name; member reads the value.
func (d *fastJSON) object(member func(name []byte) bool) bool {
	if !d.next('{') {
		return false
	}
	if d.next('}') {
		return true
	}
	for {
		name, ok := d.str()
		if !ok || !d.next(':') || !member(name) {
			return false
		}
		if d.next('}') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// array reads [value, ...], calling elem to read each value.
func (d *fastJSON) array(elem func() bool) bool {
	if !d.next('[') {
		return false
	}
	if d.next(']') {
		return true
	}
	for {
		if !elem() {
			return false
		}
		if d.next(']') {
			return true
		}
		if !d.next(',') {
			return false
		}
	}
}

// str reads a string without escapes and returns its bytes (in d.b).
func (d *fastJSON) str() ([]byte, bool) {
	if !d.next('"') {
		return nil, false
	}
	start := d.i
	for d.i < len(d.b) {
		switch c := d.b[d.i]; {
		case c == '"':
			d.i++
			return d.b[start : d.i-1], true
		case c == '\\' || c < 0x20:
			return nil, false // an escape (the general path decodes it), or invalid JSON
		}
		d.i++
	}
	return nil, false
}

// integer reads a JSON number that is an integer in int64's range, written as JSON writes
// one: an optional minus, then 0 or digits not starting with 0, and no fraction or exponent
// (encoding/json refuses those for an int64 field; the general path says so).
func (d *fastJSON) integer() (int64, bool) {
	d.ws()
	neg := d.i < len(d.b) && d.b[d.i] == '-'
	if neg {
		d.i++
	}
	start := d.i
	var n uint64
	for d.i < len(d.b) && d.b[d.i] >= '0' && d.b[d.i] <= '9' {
		if n > (math.MaxUint64-9)/10 {
			return 0, false
		}
		n = n*10 + uint64(d.b[d.i]-'0')
		d.i++
	}
	digits := d.i - start
	if digits == 0 || (digits > 1 && d.b[start] == '0') {
		return 0, false
	}
	if d.i < len(d.b) {
		if c := d.b[d.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false
		}
	}
	switch {
	case !neg && n <= math.MaxInt64:
		return int64(n), true
	case neg && n <= math.MaxInt64+1:
		return int64(-n), true // -(1<<63) wraps to itself
	}
	return 0, false
}

// appendOrderJSON appends r as encoding/json would write it, byte for byte, without its
// reflection: a confirmed order's answer is written once per order, and json.Marshal's walk of
// the struct, its time and its items costs a replica more than the bytes do (issue #24). It
// declines (false) what it does not write the same way for certain — a string that encoding/json
// would escape (it escapes <, > and &, and writes non-ASCII as is), a time outside the years
// 0–9999 (an error there), a rejection — and the caller marshals those.
func appendOrderJSON(b []byte, r orderResponse) ([]byte, bool) {
	if r.Rejection != nil || !plainJSON(r.ID) || !plainJSON(r.CustomerID) || !plainJSON(r.Status) {
		return b, false
	}
	b = append(b, `{"id":"`...)
	b = append(b, r.ID...)
	b = append(b, `","customer_id":"`...)
	b = append(b, r.CustomerID...)
	b = append(b, `","status":"`...)
	b = append(b, r.Status...)
	b = append(b, `","items":`...)
	if r.Items == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, it := range r.Items {
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"product_id":`...)
			b = strconv.AppendInt(b, it.ProductID, 10)
			b = append(b, `,"quantity":`...)
			b = strconv.AppendInt(b, it.Quantity, 10)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	var ok bool
	if b, ok = appendTimeJSON(append(b, `,"created_at":`...), r.CreatedAt); !ok {
		return b, false
	}
	if r.ExpiresAt != nil {
		if b, ok = appendTimeJSON(append(b, `,"expires_at":`...), *r.ExpiresAt); !ok {
			return b, false
		}
	}
	if r.DecidedAt != nil {
		if b, ok = appendTimeJSON(append(b, `,"decided_at":`...), *r.DecidedAt); !ok {
			return b, false
		}
	}
	return append(b, '}'), true
}

// plainJSON reports whether encoding/json writes s between quotes unchanged: printable ASCII
// but for the characters it escapes.
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c > 0x7e, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// appendTimeJSON appends t as time.Time's MarshalJSON does: RFC 3339 with the nanoseconds'
// trailing zeros cut, quoted; it declines the years MarshalJSON refuses.
func appendTimeJSON(b []byte, t time.Time) ([]byte, bool) {
	if y := t.Year(); y < 0 || y > 9999 {
		return b, false
	}
	b = append(b, '"')
	b = t.AppendFormat(b, time.RFC3339Nano)
	return append(b, '"'), true
}

// writeOrder answers with the order r, as writeJSON would.
func writeOrder(w http.ResponseWriter, status int, r orderResponse) {
	body, ok := appendOrderJSON(make([]byte, 0, 256), r)
	if !ok {
		writeJSON(w, status, "application/json", r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}
