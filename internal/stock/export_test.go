package stock

import "context"

// SetAfterRead installs a hook that runs between a batch's read and its write, so that tests can
// open the race window at will.
func SetAfterRead(s *Service, hook func(ctx context.Context)) {
	s.afterRead = hook
}
