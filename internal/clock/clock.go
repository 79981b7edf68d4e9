// Package clock holds the one way the service waits: for a duration, or until its context ends,
// whichever comes first.
package clock

import (
	"context"
	"time"
)

// Sleep waits for d and returns nil, or returns the context's cause (context.Cause) as soon as
// ctx ends. A d of zero or less returns at once: nil, unless ctx has already ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return context.Cause(ctx)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
