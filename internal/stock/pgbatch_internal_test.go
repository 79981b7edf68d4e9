package stock

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stocksvc/stocksvc/internal/testenv"
)

// TestFindCommit: when a commit's reply is lost, the store looks the batch up instead of
// guessing. Found, the batch is confirmed with its time; not found, the answer is "unavailable"
// (retry with the same key), never "not sold"; a batch of refusals alone is true either way.
func TestFindCommit(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(context.Background(), testenv.DatabaseURL(t))
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(pool.Close)
	s := NewPGStore(pool)
	p, err := s.CreateProduct(context.Background(), NewProduct{SKU: "lost", Name: "lost", Stock: 5})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	snap, err := s.Snapshot(context.Background(), []int64{p.ID}, nil)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	order := Order{ID: uuid.Must(uuid.NewV7()), CustomerID: "c", Items: []Item{{ProductID: p.ID, Quantity: 1}}}
	w := Write{Defense: DefaultDefense(), Orders: []Order{order},
		Decrements: []Decrement{{ProductID: p.ID, Quantity: 1, Read: snap.Levels[p.ID], Fence: 1}}}
	lost := io.ErrUnexpectedEOF

	if _, err := s.findCommit(context.Background(), w, lost); !errors.Is(err, ErrUnavailable) || !errors.Is(err, ErrOutcomeUnknown) || !errors.Is(err, lost) {
		t.Errorf("lookup of a batch that never committed = %v, want ErrUnavailable and ErrOutcomeUnknown wrapping the cause", err)
	}
	c, err := s.Commit(context.Background(), w)
	if err != nil {
		t.Fatalf("commit: %v", err)
	}
	got, err := s.findCommit(context.Background(), w, lost)
	if err != nil || !got.At.Equal(c.At) || len(got.Skipped) != 0 {
		t.Errorf("lookup of a committed batch = %+v, %v; want %v, nothing skipped", got, err, c.At)
	}
	refusals := Write{Records: []IdempotencyRecord{{Key: "k", Fingerprint: []byte("f"), SoldOut: &SoldOutError{ProductID: p.ID}}}}
	if _, err := s.findCommit(context.Background(), refusals, lost); err != nil {
		t.Errorf("lookup of a batch of refusals = %v, want nil: they are true whether stored or not", err)
	}
}
