package stock

import "context"

// SetAfterRead installs a hook that runs inside the purchase transaction after a product's
// stock was read and before it is written, so tests can open the race window at will.
func SetAfterRead(s *PGStore, hook func(ctx context.Context, productID int64)) {
	s.afterRead = hook
}
