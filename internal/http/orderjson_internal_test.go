package stockhttp

import (
	"reflect"
	"testing"
	"unicode/utf8"
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
