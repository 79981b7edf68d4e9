package stockhttp

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestCheckNamesDuplicates: in a value whose names nothing declares (a map), only a name twice
// in one object is refused, wherever it is.
func TestCheckNamesDuplicates(t *testing.T) {
	t.Parallel()
	tests := []struct {
		body     string
		wantName string // "" for none
	}{
		{body: `{}`},
		{body: `{"a": 1, "b": {"a": 2}, "c": [{"a": 3}, {"a": 4}]}`},
		{body: `{"a": 1, "a": 2}`, wantName: "a"},
		{body: `{"a": {"b": 1, "c": [1, "b"], "b": 2}}`, wantName: "a.b"},
		{body: `{"items": [{"q": 1}, {"q": 1, "p": {}, "q": 2}]}`, wantName: "items.q"},
		{body: `{"items": [[{"q": 1, "q": 2}]]}`, wantName: "items.q"},
		// A name that is also a string value is not a duplicate.
		{body: `{"a": "b", "b": "a"}`},
		// Equal after decoding: encoding/json would keep the second.
		{body: `{"a": 1, "\u0061": 2}`, wantName: "a"},
		// Names that differ in case are two names of a map.
		{body: `{"a": 1, "A": 2}`},
		{body: `{"a": 1,`}, // not JSON: the decode reports it, not this
	}
	for _, tt := range tests {
		err := checkNames([]byte(tt.body), reflect.TypeFor[map[string]any]())
		wantNameProblem(t, tt.body, err, tt.wantName, "appears twice in one object")
	}
}

// TestCheckNamesExact: in the objects a request type declares, a name is exactly a field's, or
// refused: another case of it, a Unicode fold of it (U+017F folds to s, U+212A to k), any
// other name. The problem names the first such name in the body's order.
func TestCheckNamesExact(t *testing.T) {
	t.Parallel()
	order := reflect.TypeFor[*placeOrderRequest]()
	product := reflect.TypeFor[*createProductRequest]()
	sale := reflect.TypeFor[*updateSaleRequest]()
	tests := []struct {
		name       string
		t          reflect.Type
		body       string
		wantField  string // "" for none
		wantDetail string
	}{
		{"exact order", order, `{"customer_id": "c", "items": [{"product_id": 1, "quantity": 1}, {}]}`, "", ""},
		{"escaped but exact", order, `{"\u0069tems": [{"quantit\u0079": 1}]}`, "", ""},
		{"capitalised member", order, `{"Items": []}`, "Items", `unknown field "Items" (names are matched exactly, case included: the field is "items")`},
		{"upper case", order, `{"CUSTOMER_ID": "c"}`, "CUSTOMER_ID", `the field is "customer_id"`},
		{"item member in another case", order, `{"items": [{"product_id": 1, "quantity": 1, "Quantity": 2}]}`, "items.Quantity", `the field is "quantity"`},
		{"in the second item", order, `{"items": [{"quantity": 1}, {"quantitY": 2}]}`, "items.quantitY", `the field is "quantity"`},
		{"long s (U+017F)", order, `{"itemſ": []}`, "itemſ", `unknown field "itemſ" (names are matched exactly, case included: the field is "items")`},
		{"long s escaped", order, `{"item\u017f": []}`, "itemſ", `the field is "items"`},
		{"Kelvin sign (U+212A)", product, `{"s\u212au": "x"}`, "s\u212au", `the field is "sku"`},
		{"both spellings: the second is refused", order, `{"items": [], "Items": [{"product_id": 1, "quantity": 1}]}`, "Items", `the field is "items"`},
		{"unknown name", order, `{"coupon": "FREE"}`, "coupon", `unknown field "coupon"`},
		{"unknown item name", order, `{"items": [{"price": 0}]}`, "items.price", `unknown field "price"`},
		{"duplicate", order, `{"items": [{"quantity": 1, "quantity": 2}]}`, "items.quantity", "appears twice in one object"},
		{"a value decoded by its own type", sale, `{"hold_for": 60, "sale_starts_at": "2030-01-01T00:00:00Z"}`, "", ""},
		{"a merge-patch member in another case", sale, `{"Hold_For": null}`, "Hold_For", `the field is "hold_for"`},
		{"another kind than the field's: the decode's to say", order, `{"items": {"Anything": 1}}`, "", ""},
		{"not JSON: the decode's to say", order, `{"items": [}`, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			wantNameProblem(t, tt.body, checkNames([]byte(tt.body), tt.t), tt.wantField, tt.wantDetail)
		})
	}
}

// wantNameProblem checks that err is nil when wantField is empty, and otherwise a malformed-json
// problem naming wantField whose detail contains wantDetail.
func wantNameProblem(t *testing.T, body string, err error, wantField, wantDetail string) {
	t.Helper()
	if wantField == "" {
		if err != nil {
			t.Errorf("checkNames(%s) = %v, want nil", body, err)
		}
		return
	}
	var re *requestError
	if !errors.As(err, &re) || re.code != "malformed-json" || re.field != wantField || !strings.Contains(re.detail, wantDetail) {
		t.Errorf("checkNames(%s) = %#v, want malformed-json for field %q with %q", body, re, wantField, wantDetail)
	}
}
