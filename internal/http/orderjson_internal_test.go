package stockhttp

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/stocksvc/stocksvc/internal/stock"
)

// generalDecode is decodeJSON's general path on an order body: what the one-pass path must
// agree with whenever it accepts a body.
func generalDecode(body []byte) (placeOrderRequest, bool) {
	var r placeOrderRequest
	err := decodeGeneral(body, &r)
	return r, err == nil
}

// orderBodies are the seeds of both tests: the shapes clients send, and the edges where the
// one-pass path must decline.
var orderBodies = []struct {
	body   string
	accept bool // the one-pass path reads it (else it must decline)
}{
	{`{"customer_id":"c1","items":[{"product_id":7,"quantity":1}]}`, true},
	{` {"items": [ {"quantity": 2, "product_id": 3}, {"product_id":4,"quantity":1} ], "customer_id": "alice"}` + "\n", true},
	{`{}`, true},
	{`{"items":[]}`, true},
	{`{"items":[{}]}`, true},
	{`{"customer_id":"","items":[{"product_id":-9223372036854775808,"quantity":9223372036854775807}]}`, true},
	{`{"customer_id":"ünïcode ✓","items":[{"product_id":-0,"quantity":0}]}`, true},
	// Declined: the general path decides, and words any problem.
	{`{"customer_id":"c1","customer_id":"c2","items":[]}`, false},
	{`{"items":[{"product_id":1,"product_id":2}]}`, false},
	{`{"items":[{"quantity":1,"quantity":1000}]}`, false},
	{`{"items":[],"items":[{"product_id":1,"quantity":1}]}`, false},
	{`{"Customer_ID":"c1"}`, false},
	{`{"customer_id":"c\u0031"}`, false},
	{`{"customer_id":null}`, false},
	{`{"items":null}`, false},
	{`{"items":[{"product_id":1.0,"quantity":1}]}`, false},
	{`{"items":[{"product_id":1e2,"quantity":1}]}`, false},
	{`{"items":[{"product_id":01,"quantity":1}]}`, false},
	{`{"items":[{"product_id":9223372036854775808,"quantity":1}]}`, false},
	{`{"items":[{"product_id":"1","quantity":1}]}`, false},
	{`{"items":[{"product_id":1,"quantity":1,}]}`, false},
	{`{"items":[{"product_id":1,"quantity":1}],}`, false},
	{`{"items":[{"product_id":1,"quantity":1}]} {}`, false},
	{`{"items":[{"product_id":1,"quantity":1}]`, false},
	{`{"extra":1}`, false},
	{`{"items":[{"product_id":1,"sku":"x"}]}`, false},
	{"{\"customer_id\":\"a\tb\"}", false},
	{`[]`, false},
	{`null`, false},
	{``, false},
}

func TestDecodeFastAgreesWithTheGeneralPath(t *testing.T) {
	t.Parallel()
	for _, tt := range orderBodies {
		var fast placeOrderRequest
		accepted := fast.decodeFast([]byte(tt.body))
		if accepted != tt.accept {
			t.Errorf("decodeFast(%s) = %v, want %v", tt.body, accepted, tt.accept)
			continue
		}
		if !accepted {
			if !reflect.DeepEqual(fast, placeOrderRequest{}) {
				t.Errorf("decodeFast(%s) declined but stored %+v", tt.body, fast)
			}
			continue
		}
		general, ok := generalDecode([]byte(tt.body))
		if !ok || !reflect.DeepEqual(fast, general) {
			t.Errorf("decodeFast(%s) = %+v; the general path: %+v (accepted %v)", tt.body, fast, general, ok)
		}
	}
}

// FuzzDecodeFast holds the one-pass path to the general one on any body: whatever it accepts,
// the general path accepts too and reads the same order.
func FuzzDecodeFast(f *testing.F) {
	for _, tt := range orderBodies {
		f.Add([]byte(tt.body))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		if !utf8.Valid(body) { // decodeJSON refuses such a body before either path
			return
		}
		var fast placeOrderRequest
		if !fast.decodeFast(body) {
			return
		}
		general, ok := generalDecode(body)
		if !ok || !reflect.DeepEqual(fast, general) {
			t.Errorf("decodeFast(%q) = %+v; the general path: %+v (accepted %v)", body, fast, general, ok)
		}
	})
}

// sameAsMarshal fails unless appendOrderJSON writes r exactly as json.Marshal does, or
// declines it; it reports whether it wrote it.
func sameAsMarshal(t *testing.T, r orderResponse) bool {
	t.Helper()
	want, err := json.Marshal(r)
	got, ok := appendOrderJSON(nil, r)
	if !ok {
		return false
	}
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("appendOrderJSON(%+v) =\n%s\njson.Marshal:\n%s (%v)", r, got, want, err)
	}
	return true
}

func TestAppendOrderJSONIsMarshal(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 26, 10, 23, 17, 660934000, time.UTC)
	later := at.Add(15 * time.Minute)
	id := uuid.Must(uuid.NewV7())
	tests := []struct {
		name    string
		o       stock.Order
		written bool
	}{
		{"confirmed", stock.Order{ID: id, CustomerID: "c1-42", Status: "confirmed", CreatedAt: at,
			Items: []stock.Item{{ProductID: 7, Quantity: 1}}}, true},
		{"two items, whole seconds", stock.Order{ID: id, CustomerID: "alice", Status: "confirmed", CreatedAt: at.Truncate(time.Second),
			Items: []stock.Item{{ProductID: 1, Quantity: 2}, {ProductID: 9223372036854775807, Quantity: 3}}}, true},
		{"held", stock.Order{ID: id, CustomerID: "bob", Status: "held", CreatedAt: at, ExpiresAt: &later,
			Items: []stock.Item{{ProductID: 1, Quantity: 1}}}, true},
		{"decided, another zone", stock.Order{ID: id, CustomerID: "bob", Status: "cancelled", CreatedAt: at.In(time.FixedZone("x", 3600)),
			ExpiresAt: &later, DecidedAt: &later, Items: []stock.Item{{ProductID: 1, Quantity: 1}}}, true},
		{"no items", stock.Order{ID: id, CustomerID: "c", Status: "confirmed", CreatedAt: at, Items: []stock.Item{}}, true},
		// Declined: encoding/json escapes or refuses these.
		{"HTML characters", stock.Order{ID: id, CustomerID: "<a&b>", Status: "confirmed", CreatedAt: at}, false},
		{"a quote", stock.Order{ID: id, CustomerID: `a"b`, Status: "confirmed", CreatedAt: at}, false},
		{"non-ASCII", stock.Order{ID: id, CustomerID: "ünï", Status: "confirmed", CreatedAt: at}, false},
		{"year 10000", stock.Order{ID: id, CustomerID: "c", Status: "confirmed", CreatedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}, false},
	}
	for _, tt := range tests {
		if written := sameAsMarshal(t, toOrderResponse(tt.o)); written != tt.written {
			t.Errorf("%s: written %v, want %v", tt.name, written, tt.written)
		}
	}
	if sameAsMarshal(t, orderResponse{ID: id.String(), Status: "rejected", Rejection: &rejectionDTO{Code: "sold-out"}}) {
		t.Errorf("a rejection was written; it is json.Marshal's to write")
	}
}

func FuzzAppendOrderJSON(f *testing.F) {
	f.Add("c1", "confirmed", int64(7), int64(1), int64(1795688597660934002), int64(0))
	f.Add("<>&\"\\\u2028", "held", int64(-1), int64(0), int64(-62135596800000000), int64(900e9))
	f.Fuzz(func(t *testing.T, customer, status string, product, quantity, unixNano, holdFor int64) {
		at := time.Unix(0, unixNano).UTC()
		r := orderResponse{ID: uuid.NewSHA1(uuid.Nil, []byte(customer)).String(), CustomerID: customer, Status: status,
			Items: []orderItemDTO{{ProductID: product, Quantity: quantity}}, CreatedAt: at}
		if holdFor != 0 {
			exp := at.Add(time.Duration(holdFor))
			r.ExpiresAt = &exp
		}
		sameAsMarshal(t, r)
	})
}
