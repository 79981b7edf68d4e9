package view

import "testing"

// TestViewsOfEarlierReplicasAreRead: a view written by a replica from before issue #31 has its
// sale bounds only in the fields starts and ends, where 0 means none; a newer replica reads them
// so during a rolling upgrade, rather than rebuilding the view, and reads a view without any
// bound field as not a view at all (one from before the sale rules).
func TestViewsOfEarlierReplicasAreRead(t *testing.T) {
	base := func() map[string]string {
		return map[string]string{"sku": "s", "name": "n", "stock": "3", "version": "2", "created": "1", "updated": "1", "read": "1", "max": "0", "hold": "0"}
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
