package stock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stocksvc/stocksvc/internal/stock"
	"github.com/stocksvc/stocksvc/internal/stock/stocktest"
)

// slowAudits holds every audit until release is closed, and says when one has begun.
type slowAudits struct {
	*stocktest.MemStore
	begun   chan struct{}
	release chan struct{}
}

func (s *slowAudits) Audit(ctx context.Context, id int64) (stock.Audit, error) {
	s.begun <- struct{}{}
	<-s.release
	return s.MemStore.Audit(ctx, id)
}

// TestAuditsRunOneAtATime: an audit recounts a product's orders, so a replica runs one at a
// time; another is refused busy at once, having read nothing, and is answered once the first
// has ended.
func TestAuditsRunOneAtATime(t *testing.T) {
	t.Parallel()
	store := &slowAudits{MemStore: stocktest.NewMemStore(), begun: make(chan struct{}, 2), release: make(chan struct{})}
	svc := newMemService(t, store, &stocktest.LocalLocker{})
	p, err := store.CreateProduct(context.Background(), stock.NewProduct{SKU: "p", Name: "p", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	first := make(chan error, 1)
	go func() {
		_, err := svc.Audit(context.Background(), p.ID)
		first <- err
	}()
	<-store.begun
	if _, err := svc.Audit(context.Background(), p.ID); !errors.Is(err, stock.ErrBusy) {
		t.Errorf("second audit while one runs = %v, want busy at once", err)
	}
	select {
	case <-store.begun:
		t.Errorf("the second audit reached the store while the first ran")
	default:
	}
	close(store.release)
	if err := <-first; err != nil {
		t.Errorf("first audit: %v", err)
	}
	if a, err := svc.Audit(context.Background(), p.ID); err != nil || a.Stock != 5 {
		t.Errorf("audit after = %+v, %v", a, err)
	}
}

// busyAudits refuses every recount, as the store does while another replica recounts.
type busyAudits struct{ *stocktest.MemStore }

func (busyAudits) Audit(context.Context, int64) (stock.Audit, error) {
	return stock.Audit{}, fmt.Errorf("%w: another recount is running", stock.ErrBusy)
}

// TestAuditRefusedElsewhereSaysWhenToRetry: a recount refused because another replica runs
// one is answered as this replica's own refusal is, with when to try again.
func TestAuditRefusedElsewhereSaysWhenToRetry(t *testing.T) {
	t.Parallel()
	svc := newMemService(t, busyAudits{stocktest.NewMemStore()}, &stocktest.LocalLocker{})
	_, err := svc.Audit(context.Background(), 1)
	busy, ok := errors.AsType[*stock.BusyError](err)
	if !ok || busy.RetryAfter <= 0 {
		t.Fatalf("audit while another replica recounts = %v, want a *BusyError with a Retry-After", err)
	}
}
