package stock

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// CreateProduct validates p and stores it, with surrounding spaces trimmed from SKU and name,
// and the cap on a customer's held units resolved when not given: the limit per customer when
// the product has one, else one full order (Config.MaxQuantity).
// With views it answers one view lease (and a margin) after the insert has committed, once no
// replica can still say the product does not exist (Views.Created). Errors: *ValidationError,
// ErrDuplicateSKU, ErrUnavailable.
func (s *Service) CreateProduct(ctx context.Context, p NewProduct) (Product, error) {
	p.SKU, p.Name = strings.TrimSpace(p.SKU), strings.TrimSpace(p.Name)
	switch {
	case p.SKU == "":
		return Product{}, &ValidationError{Field: "sku", Reason: "must not be empty"}
	case utf8.RuneCountInString(p.SKU) > MaxSKULen:
		return Product{}, &ValidationError{Field: "sku", Reason: fmt.Sprintf("must be at most %d characters", MaxSKULen)}
	case p.Name == "":
		return Product{}, &ValidationError{Field: "name", Reason: "must not be empty"}
	case utf8.RuneCountInString(p.Name) > MaxNameLen:
		return Product{}, &ValidationError{Field: "name", Reason: fmt.Sprintf("must be at most %d characters", MaxNameLen)}
	case p.Stock < 0 || p.Stock > MaxStock:
		return Product{}, &ValidationError{Field: "stock", Reason: fmt.Sprintf("must be between 0 and %d", MaxStock)}
	}
	if err := validSale(p.Sale); err != nil {
		return Product{}, err
	}
	if p.Sale.MaxHeldPerCustomer == 0 {
		p.Sale.MaxHeldPerCustomer = cmp.Or(p.Sale.MaxPerCustomer, s.cfg.MaxQuantity)
	}
	if err := plainText("sku", p.SKU); err != nil {
		return Product{}, err
	}
	if err := plainText("name", p.Name); err != nil {
		return Product{}, err
	}
	created, err := s.store.CreateProduct(ctx, p)
	if err != nil {
		return Product{}, err
	}
	if s.cfg.Views != nil {
		// A replica may remember, for a moment, that this id did not exist: an order or read
		// that begins after this answer must not be told so.
		s.cfg.Views.Created(created.ID)
	}
	return created, nil
}

// plainText refuses text Postgres cannot store (NUL, invalid UTF-8) and control characters,
// which have no place in an identifier or a name and would otherwise surface as a 500.
func plainText(field, v string) error {
	if !utf8.ValidString(v) {
		return &ValidationError{Field: field, Reason: "must be valid UTF-8"}
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return &ValidationError{Field: field, Reason: "must not contain control characters"}
		}
	}
	return nil
}

// Product returns the product with id, from the views when the Service has them. Errors:
// *ProductNotFoundError, ErrUnavailable, the context's error.
func (s *Service) Product(ctx context.Context, id int64) (ProductView, error) {
	if s.cfg.Views != nil {
		return s.cfg.Views.Product(ctx, id)
	}
	p, err := s.store.Product(ctx, id)
	if err != nil {
		return ProductView{}, err
	}
	return ProductView{Product: p, Read: time.Now(), From: FromPostgres}, nil
}
