package stockhttp

import (
	"net/http"
	"strconv"
	"time"
)

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
