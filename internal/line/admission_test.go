package line_test

import (
	"testing"

	"github.com/stocksvc/stocksvc/internal/line"
)

// TestAdmissions is the rule, without I/O: while the sale is open, admit while active < admit
// and active < ⌈stock / q⌉.
func TestAdmissions(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		room line.Room
		want int64
	}{
		{"one each: as many buyers as units", line.Room{Open: true, Stock: 7, PerBuyer: 1, Admit: 100}, 7},
		{"the setting caps it", line.Room{Open: true, Stock: 7, PerBuyer: 1, Admit: 3}, 3},
		{"q rounds up: 7 units, 3 each, 3 buyers", line.Room{Open: true, Stock: 7, PerBuyer: 3, Admit: 100}, 3},
		{"q divides: 6 units, 3 each, 2 buyers", line.Room{Open: true, Stock: 6, PerBuyer: 3, Admit: 100}, 2},
		{"q above the stock: one buyer may take all", line.Room{Open: true, Stock: 2, PerBuyer: 10, Admit: 100}, 1},
		{"active admissions count", line.Room{Open: true, Stock: 7, PerBuyer: 1, Admit: 5, Active: 4}, 1},
		{"full", line.Room{Open: true, Stock: 7, PerBuyer: 1, Admit: 5, Active: 5}, 0},
		{"more active than units (holds took them): none", line.Room{Open: true, Stock: 2, PerBuyer: 1, Admit: 5, Active: 3}, 0},
		// Held units are out of the stock: 10 received, 8 held, 2 left → 2 buyers, and the
		// next once a hold ends (the stock is 3 again).
		{"holds count", line.Room{Open: true, Stock: 2, PerBuyer: 1, Admit: 100}, 2},
		{"a hold ended", line.Room{Open: true, Stock: 3, PerBuyer: 1, Admit: 100, Active: 2}, 1},
		// An admission that ran out, was used or left is no longer active: its room passes on.
		{"an admission ended frees its room", line.Room{Open: true, Stock: 5, PerBuyer: 1, Admit: 2, Active: 1}, 1},
		{"sold out", line.Room{Open: true, Stock: 0, PerBuyer: 1, Admit: 100}, 0},
		{"sale closed (not open yet, or ended)", line.Room{Open: false, Stock: 100, PerBuyer: 1, Admit: 100}, 0},
		{"no line", line.Room{Open: true, Stock: 100, PerBuyer: 1}, 0},
		{"q unset counts as one", line.Room{Open: true, Stock: 4, Admit: 100}, 4},
		{"the largest stock, no overflow", line.Room{Open: true, Stock: 1_000_000_000, PerBuyer: 10, Admit: 10_000}, 10_000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := line.Admissions(tt.room); got != tt.want {
				t.Errorf("Admissions(%+v) = %d, want %d", tt.room, got, tt.want)
			}
		})
	}
}
