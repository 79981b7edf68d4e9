package stockhttp

import "math"

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
