package keyspace

import "context"

// Tick is one of Run's beats, and what it reports.
func (w *Watch) Tick(ctx context.Context) { w.tick(ctx) }
