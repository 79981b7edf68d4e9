package clock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stocksvc/stocksvc/internal/clock"
)

func TestSleep(t *testing.T) {
	if err := clock.Sleep(context.Background(), time.Millisecond); err != nil {
		t.Errorf("Sleep = %v, want nil after the duration", err)
	}
	if err := clock.Sleep(context.Background(), 0); err != nil {
		t.Errorf("Sleep(0) = %v, want nil", err)
	}
	stop := errors.New("shutting down")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(stop)
	// An hour: only the context can end it, so the test would hang, not pass, if it did not.
	if err := clock.Sleep(ctx, time.Hour); !errors.Is(err, stop) {
		t.Errorf("Sleep with an ended context = %v, want its cause", err)
	}
	if err := clock.Sleep(ctx, 0); !errors.Is(err, stop) {
		t.Errorf("Sleep(0) with an ended context = %v, want its cause", err)
	}
	plain, cancelPlain := context.WithCancel(context.Background())
	cancelPlain()
	if err := clock.Sleep(plain, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep with a cancelled context = %v, want context.Canceled", err)
	}
}
