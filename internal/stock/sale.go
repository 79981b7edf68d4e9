package stock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/singleflight"
)

// MaxProductsPage is the most products one page of Products lists.
const MaxProductsPage = 100

// validSale checks a product's sale rules.
func validSale(r SaleRules) error {
	switch {
	case r.StartsAt != nil && r.EndsAt != nil && !r.EndsAt.After(*r.StartsAt):
		return &ValidationError{Field: "sale_ends_at", Reason: "must be after sale_starts_at"}
	case r.MaxPerCustomer < 0:
		return &ValidationError{Field: "max_per_customer", Reason: "must be at least 1"}
	case r.MaxPerCustomer > MaxStock:
		return &ValidationError{Field: "max_per_customer", Reason: fmt.Sprintf("must be at most %d", MaxStock)}
	case r.HoldFor != 0 && !validHold(r.HoldFor):
		return &ValidationError{Field: "hold_for", Reason: fmt.Sprintf("must be whole seconds between 1 and %d", int(MaxHoldFor/time.Second))}
	case r.MaxHeldPerCustomer < 0 || r.MaxHeldPerCustomer > MaxStock:
		return &ValidationError{Field: "max_held_per_customer", Reason: fmt.Sprintf("must be between 1 and %d", MaxStock)}
	case r.Line != LineRules{}:
		return validLine(r.Line)
	}
	return nil
}

// validLine checks a line's settings.
func validLine(l LineRules) error {
	switch {
	case l.Admit < MinLineAdmit || l.Admit > MaxLineAdmit:
		return &ValidationError{Field: "line.admit", Reason: fmt.Sprintf("must be between %d and %d", MinLineAdmit, MaxLineAdmit)}
	case l.AdmissionFor < MinAdmissionFor || l.AdmissionFor > MaxAdmissionFor || l.AdmissionFor%time.Second != 0:
		return &ValidationError{Field: "line.admission_for", Reason: fmt.Sprintf("must be whole seconds between %d and %d",
			int(MinAdmissionFor/time.Second), int(MaxAdmissionFor/time.Second))}
	}
	return nil
}

// UpdateSale changes product id's sale rules (SaleChange says how) and returns the product as
// it left it. A change may open the sale earlier, end it later or raise the limit, so it is
// made as a restock is: no replica holds a view of the product across the write, and once it
// has returned none refuses an order by the rules before it. Postgres checks the window it is
// given against the one it keeps, so an end before the start is refused whichever request set
// which. The cap on a customer's held units goes back to its default — the limit as the change
// leaves it, else one full order (Config.MaxQuantity) — when cleared, and when the limit is
// set or cleared without it. Errors: *ValidationError, *ProductNotFoundError, ErrUnavailable,
// the context's error.
func (s *Service) UpdateSale(ctx context.Context, id int64, c SaleChange) (Product, error) {
	switch {
	case c.MaxPerCustomer != nil && (*c.MaxPerCustomer < 1 || *c.MaxPerCustomer > MaxStock):
		return Product{}, &ValidationError{Field: "max_per_customer", Reason: fmt.Sprintf("must be between 1 and %d", MaxStock)}
	case c.MaxHeldPerCustomer != nil && (*c.MaxHeldPerCustomer < 1 || *c.MaxHeldPerCustomer > MaxStock):
		return Product{}, &ValidationError{Field: "max_held_per_customer", Reason: fmt.Sprintf("must be between 1 and %d", MaxStock)}
	case c.StartsAt != nil && c.ClearStartsAt, c.EndsAt != nil && (c.ClearEndsAt || c.EndNow),
		c.MaxPerCustomer != nil && c.ClearMaxPerCustomer, c.MaxHeldPerCustomer != nil && c.ClearMaxHeldPerCustomer:
		return Product{}, &ValidationError{Field: "sale", Reason: "a rule cannot be both set and cleared"}
	case c.StartsAt != nil && c.EndsAt != nil && !c.EndsAt.After(*c.StartsAt):
		return Product{}, &ValidationError{Field: "sale_ends_at", Reason: "must be after sale_starts_at"}
	case c.HoldFor != nil && (c.ClearHoldFor || !validHold(*c.HoldFor)):
		return Product{}, &ValidationError{Field: "hold_for", Reason: fmt.Sprintf("must be whole seconds between 1 and %d", int(MaxHoldFor/time.Second))}
	case c.Line != nil && c.ClearLine:
		return Product{}, &ValidationError{Field: "line", Reason: "a rule cannot be both set and cleared"}
	case c.Line != nil:
		if err := validLine(*c.Line); err != nil {
			return Product{}, err
		}
	}
	c.DefaultMaxHeld = 0
	if c.MaxHeldPerCustomer == nil && (c.ClearMaxHeldPerCustomer || c.MaxPerCustomer != nil || c.ClearMaxPerCustomer) {
		c.DefaultMaxHeld = s.cfg.MaxQuantity
	}
	update := func(ctx context.Context) (Product, error) { return s.store.UpdateSale(ctx, id, c) }
	if s.cfg.Views == nil {
		p, err := update(ctx)
		s.customers.forget(id)
		return p, err
	}
	// Any product read, existing or not, is answered from the store before the views are
	// raised: a product that does not exist needs no epoch.
	if _, err := s.store.Product(ctx, id); err != nil {
		return Product{}, err
	}
	done, err := s.cfg.Views.Raise(ctx, id)
	if err != nil {
		return Product{}, err
	}
	p, err := update(ctx)
	// The counts are recomputed when a limit is set: what this replica remembers goes.
	s.customers.forget(id)
	if err != nil {
		done(nil)
		return Product{}, err
	}
	done(&p)
	return p, nil
}

// validHold reports whether d can be a product's hold: whole seconds, 1s to MaxHoldFor.
func validHold(d time.Duration) bool {
	return d >= time.Second && d <= MaxHoldFor && d%time.Second == 0
}

// ProductsPage is one page of a listing of products.
type ProductsPage struct {
	Products []Product
	// Next is the id to list after for the next page; 0 when this page is the last.
	Next int64
}

// Products lists products by ascending id, after the id after, limit to a page (at most
// MaxProductsPage; 0 means 20); with onSale, only those a customer could buy now or later: a
// sale open or not yet opened and not ended, by Postgres's clock, with stock left. A storefront
// reads it like a product page, so a page is answered from this replica's memory of it for a
// short lease (listingLease): its stock figures are as fresh as a product view's. Errors:
// *ValidationError, ErrUnavailable, the context's error.
func (s *Service) Products(ctx context.Context, after int64, limit int, onSale bool) (ProductsPage, error) {
	switch {
	case limit == 0:
		limit = 20
	case limit < 1 || limit > MaxProductsPage:
		return ProductsPage{}, &ValidationError{Field: "limit", Reason: fmt.Sprintf("must be between 1 and %d", MaxProductsPage)}
	case after < 0:
		return ProductsPage{}, &ValidationError{Field: "cursor", Reason: "is not a cursor this service gave"}
	}
	// One more than asked tells whether there is a next page.
	list, err := s.listings.get(ctx, s.store, listingKey{after: after, limit: limit + 1, onSale: onSale})
	if err != nil {
		return ProductsPage{}, err
	}
	var page ProductsPage
	if len(list) > limit {
		list = list[:limit:limit] // the memoised page is shared
		page.Next = list[limit-1].ID
	}
	page.Products = list
	return page, nil
}

// listingLease is how long a replica answers a page of the listing from memory: the crowd that
// refreshes a storefront during a sale costs Postgres one query per page, per replica and
// lease, like a product page (views). Its stock figures are as stale as a product view's.
const listingLease = 50 * time.Millisecond

// listings memoises the pages of the product listing for listingLease, one query per page at a
// time (a singleflight for the pages being read).
type listings struct {
	flights singleflight.Group
	mu      sync.Mutex
	pages   map[listingKey]listed
}

type listingKey struct {
	after  int64
	limit  int
	onSale bool
}

type listed struct {
	products []Product
	expires  time.Time
}

// get returns the page k, from memory when it was read less than a lease ago.
func (l *listings) get(ctx context.Context, store Store, k listingKey) ([]Product, error) {
	l.mu.Lock()
	if p, ok := l.pages[k]; ok && time.Now().Before(p.expires) {
		l.mu.Unlock()
		return p.products, nil
	}
	l.mu.Unlock()
	name := fmt.Sprint(k.after, k.limit, k.onSale)
	ch := l.flights.DoChan(name, func() (any, error) {
		// Detached from the first caller: the others wait for the same read.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), listingTimeout)
		defer cancel()
		begun := time.Now()
		list, err := store.Products(ctx, k.after, k.limit, k.onSale)
		if err != nil {
			return nil, err
		}
		l.mu.Lock()
		if l.pages == nil || len(l.pages) >= maxListedPages {
			l.pages = map[listingKey]listed{}
		}
		l.pages[k] = listed{products: list, expires: begun.Add(listingLease)}
		l.mu.Unlock()
		return list, nil
	})
	select {
	case r := <-ch:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.([]Product), nil
	case <-ctx.Done():
		return nil, fmt.Errorf("list products: %w", context.Cause(ctx))
	}
}

// listingTimeout bounds one read of a page; maxListedPages bounds the pages remembered (a
// crawler walking every cursor must not grow the map without end).
const (
	listingTimeout = 2 * time.Second
	maxListedPages = 1024
)
