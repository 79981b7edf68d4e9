package stockhttp

import (
	"encoding/json"
	"reflect"
	"time"

	"github.com/stocksvc/stocksvc/internal/stock"
)

type createProductRequest struct {
	SKU            string     `json:"sku"`
	Name           string     `json:"name"`
	Stock          *int64     `json:"stock"`
	SaleStartsAt   *time.Time `json:"sale_starts_at"`
	SaleEndsAt     *time.Time `json:"sale_ends_at"`
	MaxPerCustomer *int64     `json:"max_per_customer"`
	HoldFor        *int64     `json:"hold_for"`
	// MaxHeldPerCustomer: absent or null, the service's default.
	MaxHeldPerCustomer *int64   `json:"max_held_per_customer"`
	Line               *lineDTO `json:"line"`
}

// lineDTO is a product's line: the most buyers admitted at once, and how long an admission
// lasts (seconds). Both are required; null (or absent, on creation) is no line.
type lineDTO struct {
	Admit        *int64 `json:"admit"`
	AdmissionFor *int64 `json:"admission_for"`
}

// toLineRules converts a line; the bounds are the service's.
func (l lineDTO) toLineRules() (stock.LineRules, error) {
	switch {
	case l.Admit == nil:
		return stock.LineRules{}, &stock.ValidationError{Field: "line.admit", Reason: "is required (or send line: null for no line)"}
	case l.AdmissionFor == nil:
		return stock.LineRules{}, &stock.ValidationError{Field: "line.admission_for", Reason: "is required (or send line: null for no line)"}
	}
	// Capped where no overflow can happen: the service refuses anything above an hour anyway.
	secs := min(max(*l.AdmissionFor, 0), int64(100*stock.MaxAdmissionFor/time.Second))
	return stock.LineRules{Admit: *l.Admit, AdmissionFor: time.Duration(secs) * time.Second}, nil
}

// toNewProduct converts the request; the rules themselves are the service's.
func (r createProductRequest) toNewProduct() (stock.NewProduct, error) {
	if r.Stock == nil {
		return stock.NewProduct{}, &stock.ValidationError{Field: "stock", Reason: "is required"}
	}
	p := stock.NewProduct{SKU: r.SKU, Name: r.Name, Stock: *r.Stock,
		Sale: stock.SaleRules{StartsAt: r.SaleStartsAt, EndsAt: r.SaleEndsAt}}
	if r.MaxPerCustomer != nil {
		if *r.MaxPerCustomer < 1 {
			return stock.NewProduct{}, &stock.ValidationError{Field: "max_per_customer", Reason: "must be at least 1 (or null for no limit)"}
		}
		p.Sale.MaxPerCustomer = *r.MaxPerCustomer
	}
	if r.HoldFor != nil {
		if *r.HoldFor < 1 {
			return stock.NewProduct{}, &stock.ValidationError{Field: "hold_for", Reason: "must be at least 1 second (or null for orders final at once)"}
		}
		p.Sale.HoldFor = holdSeconds(*r.HoldFor)
	}
	if r.MaxHeldPerCustomer != nil {
		if *r.MaxHeldPerCustomer < 1 {
			return stock.NewProduct{}, &stock.ValidationError{Field: "max_held_per_customer", Reason: "must be at least 1 (or null for the default)"}
		}
		p.Sale.MaxHeldPerCustomer = *r.MaxHeldPerCustomer
	}
	if r.Line != nil {
		var err error
		if p.Sale.Line, err = r.Line.toLineRules(); err != nil {
			return stock.NewProduct{}, err
		}
	}
	return p, nil
}

// updateSaleRequest is PATCH /v1/products/{id}/sale: a field present replaces the rule, null
// removes it — for the cap on held units, which every product has, puts back its default — and
// a field absent keeps it (JSON merge patch, RFC 7396, on the rules; the line is one rule,
// replaced whole).
type updateSaleRequest struct {
	SaleStartsAt       optional[time.Time] `json:"sale_starts_at"`
	SaleEndsAt         optional[time.Time] `json:"sale_ends_at"`
	MaxPerCustomer     optional[int64]     `json:"max_per_customer"`
	HoldFor            optional[int64]     `json:"hold_for"`
	MaxHeldPerCustomer optional[int64]     `json:"max_held_per_customer"`
	Line               optional[lineDTO]   `json:"line"`
}

// holdSeconds turns hold_for (seconds) into a duration, capped where no overflow can happen:
// the service refuses anything above an hour anyway.
func holdSeconds(n int64) time.Duration {
	return time.Duration(min(n, int64(100*stock.MaxHoldFor/time.Second))) * time.Second
}

// optional is a JSON field that may be absent (set false), null (set, value nil) or a value.
type optional[T any] struct {
	set   bool
	value *T
}

// shapedAs tells checkNames that the field is read as a T (or null), so that its names are
// held to T's exactly.
func (*optional[T]) shapedAs() reflect.Type { return reflect.TypeFor[T]() }

// UnmarshalJSON is called only for a field that is present.
func (o *optional[T]) UnmarshalJSON(b []byte) error {
	o.set = true
	if string(b) == "null" {
		o.value = nil
		return nil
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	o.value = &v
	return nil
}

func (r updateSaleRequest) toSaleChange() (stock.SaleChange, error) {
	var c stock.SaleChange
	if !r.SaleStartsAt.set && !r.SaleEndsAt.set && !r.MaxPerCustomer.set && !r.HoldFor.set && !r.MaxHeldPerCustomer.set && !r.Line.set {
		return c, &stock.ValidationError{Field: "sale", Reason: "must change at least one of sale_starts_at, sale_ends_at, max_per_customer, hold_for, max_held_per_customer, line"}
	}
	if r.MaxHeldPerCustomer.value != nil && *r.MaxHeldPerCustomer.value < 1 {
		return c, &stock.ValidationError{Field: "max_held_per_customer", Reason: "must be at least 1 (or null for the default)"}
	}
	c.MaxHeldPerCustomer, c.ClearMaxHeldPerCustomer = r.MaxHeldPerCustomer.value, r.MaxHeldPerCustomer.set && r.MaxHeldPerCustomer.value == nil
	if r.Line.value != nil {
		l, err := r.Line.value.toLineRules()
		if err != nil {
			return c, err
		}
		c.Line = &l
	}
	c.ClearLine = r.Line.set && r.Line.value == nil
	if r.HoldFor.value != nil {
		if *r.HoldFor.value < 1 {
			return c, &stock.ValidationError{Field: "hold_for", Reason: "must be at least 1 second (or null for orders final at once)"}
		}
		d := holdSeconds(*r.HoldFor.value)
		c.HoldFor = &d
	}
	c.ClearHoldFor = r.HoldFor.set && r.HoldFor.value == nil
	c.StartsAt, c.ClearStartsAt = r.SaleStartsAt.value, r.SaleStartsAt.set && r.SaleStartsAt.value == nil
	c.EndsAt, c.ClearEndsAt = r.SaleEndsAt.value, r.SaleEndsAt.set && r.SaleEndsAt.value == nil
	c.MaxPerCustomer, c.ClearMaxPerCustomer = r.MaxPerCustomer.value, r.MaxPerCustomer.set && r.MaxPerCustomer.value == nil
	return c, nil
}

type productsResponse struct {
	Items      []productResponse `json:"items"`
	NextCursor *string           `json:"next_cursor"`
}

type restockRequest struct {
	Quantity *int64 `json:"quantity"`
}

type productResponse struct {
	ID             int64      `json:"id"`
	SKU            string     `json:"sku"`
	Name           string     `json:"name"`
	Stock          int64      `json:"stock"`
	Version        int64      `json:"version"`
	CreatedAt      time.Time  `json:"created_at"`
	UpdatedAt      time.Time  `json:"updated_at"`
	SaleStartsAt   *time.Time `json:"sale_starts_at"`
	SaleEndsAt     *time.Time `json:"sale_ends_at"`
	MaxPerCustomer *int64     `json:"max_per_customer"`
	HoldFor        *int64     `json:"hold_for"`
	// MaxHeldPerCustomer is always set: every product caps what one customer holds.
	MaxHeldPerCustomer int64    `json:"max_held_per_customer"`
	Line               *lineDTO `json:"line"`
}

func toProductResponse(p stock.Product) productResponse {
	r := productResponse{
		ID: p.ID, SKU: p.SKU, Name: p.Name, Stock: p.Stock, Version: p.Version,
		CreatedAt: p.CreatedAt.UTC(), UpdatedAt: p.UpdatedAt.UTC(),
		SaleStartsAt: utc(p.SaleStartsAt), SaleEndsAt: utc(p.SaleEndsAt),
		MaxHeldPerCustomer: p.MaxHeldPerCustomer,
	}
	if p.MaxPerCustomer > 0 {
		limit := p.MaxPerCustomer
		r.MaxPerCustomer = &limit
	}
	if p.HoldFor > 0 {
		secs := int64(p.HoldFor / time.Second)
		r.HoldFor = &secs
	}
	if l := p.Sale().Line; l.Lined() {
		admit, secs := l.Admit, int64(l.AdmissionFor/time.Second)
		r.Line = &lineDTO{Admit: &admit, AdmissionFor: &secs}
	}
	return r
}

func utc(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

type auditResponse struct {
	ProductID  int64 `json:"product_id"`
	Stock      int64 `json:"stock"`
	Received   int64 `json:"received"`
	Sold       int64 `json:"sold"`
	Held       int64 `json:"held"`
	Consistent bool  `json:"consistent"`
}

func toAuditResponse(a stock.Audit) auditResponse {
	return auditResponse{ProductID: a.ProductID, Stock: a.Stock, Received: a.Received, Sold: a.Sold, Held: a.Held, Consistent: a.Consistent()}
}
