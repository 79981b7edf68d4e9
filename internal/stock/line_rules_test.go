package stock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// TestLineRulesValidated: a line's settings are checked on creation and on a change, both
// bounds of each, and a line cannot be set and removed by one change.
func TestLineRulesValidated(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := stock.NewService(stocktest.NewMemStore(), &stocktest.LocalLocker{}, stock.Config{}, nil)
	t.Cleanup(svc.Close)
	ok := stock.LineRules{Admit: 1, AdmissionFor: 10 * time.Second}
	tests := []struct {
		name  string
		line  stock.LineRules
		field string // "" when valid
	}{
		{"the smallest", ok, ""},
		{"the largest", stock.LineRules{Admit: stock.MaxLineAdmit, AdmissionFor: time.Hour}, ""},
		{"admit 0 with a duration", stock.LineRules{AdmissionFor: time.Minute}, "line.admit"},
		{"admit above the bound", stock.LineRules{Admit: stock.MaxLineAdmit + 1, AdmissionFor: time.Minute}, "line.admit"},
		{"too short", stock.LineRules{Admit: 5, AdmissionFor: 9 * time.Second}, "line.admission_for"},
		{"too long", stock.LineRules{Admit: 5, AdmissionFor: time.Hour + time.Second}, "line.admission_for"},
		{"not whole seconds", stock.LineRules{Admit: 5, AdmissionFor: 10500 * time.Millisecond}, "line.admission_for"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: fmt.Sprint("c", i), Name: "n", Stock: 1, Sale: stock.SaleRules{Line: tt.line}})
			checkField(t, "create", err, tt.field)
			p, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: fmt.Sprint("u", i), Name: "n", Stock: 1})
			if err != nil {
				t.Fatal(err)
			}
			line := tt.line
			_, err = svc.UpdateSale(ctx, p.ID, stock.SaleChange{Line: &line})
			checkField(t, "update", err, tt.field)
		})
	}
	p, err := svc.CreateProduct(ctx, stock.NewProduct{SKU: "both", Name: "n", Stock: 1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.UpdateSale(ctx, p.ID, stock.SaleChange{Line: &ok, ClearLine: true})
	checkField(t, "set and clear", err, "line")
}

func checkField(t *testing.T, what string, err error, field string) {
	t.Helper()
	invalid, isInvalid := errors.AsType[*stock.ValidationError](err)
	switch {
	case field == "" && err != nil:
		t.Errorf("%s: %v, want it accepted", what, err)
	case field != "" && !isInvalid:
		t.Errorf("%s: %v, want a validation error on %s", what, err, field)
	case field != "" && invalid.Field != field:
		t.Errorf("%s: refused on %s, want %s", what, invalid.Field, field)
	}
}
