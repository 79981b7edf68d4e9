package view

import "testing"

// TestViewsOfEarlierReplicasAreRead: the sale bounds are read from the fields starts_at and
// ends_at, or — where only the legacy fields starts and ends are there, 0 meaning none — from
// those; a view without any bound field is not a view at all (one from before the sale rules),
// nor is one without the cap on held units (one from before issue #31, which cannot say the
// product's max_held_per_customer): both are rebuilt rather than read.
func TestViewsOfEarlierReplicasAreRead(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{"sku": "s", "name": "n", "stock": "3", "version": "2", "created": "1", "updated": "1", "read": "1", "max": "0", "hold": "0", "maxheld": "10"}
	}
	tests := []struct {
		name   string
		fields map[string]string
		want   string // describeSale of the view's rules; "" for a view that does not parse
	}{
		{"legacy, no bounds", map[string]string{"starts": "0", "ends": "0"}, "none to none"},
		{"legacy bounds", map[string]string{"starts": "-1", "ends": "1000000"}, "1969-12-31T23:59:59.999999Z to 1970-01-01T00:00:01Z"},
		{"new fields win", map[string]string{"starts_at": "0", "ends_at": "", "starts": "0", "ends": "0"}, "1970-01-01T00:00:00Z to none"},
		{"no bound fields", map[string]string{}, ""},
		{"garbled bound", map[string]string{"starts_at": "soon", "ends_at": ""}, ""},
		{"no cap on held units", map[string]string{"starts_at": "", "ends_at": "", "maxheld": ""}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := base()
			for k, v := range tt.fields {
				f[k] = v
			}
			v, err := parseView(1, f)
			switch {
			case tt.want == "" && err == nil:
				t.Fatalf("parseView = %+v, want an error", v.Product)
			case tt.want != "" && err != nil:
				t.Fatalf("parseView: %v", err)
			case tt.want != "":
				if got := describeSale(v.Product.Sale()); got != tt.want {
					t.Errorf("sale = %s, want %s", got, tt.want)
				}
			}
		})
	}
}
