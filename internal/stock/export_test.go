package stock

import "context"

// SetAfterRead installs a hook that runs between a batch's read and its write, with the number
// of orders in the batch, so that tests can open the race window at will.
func SetAfterRead(s *Service, hook func(ctx context.Context, orders int)) {
	s.afterRead = hook
}

// Waiting returns how many orders for product id wait in s's queue, not yet in a batch.
func Waiting(s *Service, id int64) int {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	if q := s.batches.queues[id]; q != nil {
		return len(q.waiting)
	}
	return 0
}

// Queues returns how many product queues s keeps.
func Queues(s *Service) int {
	s.batches.mu.Lock()
	defer s.batches.mu.Unlock()
	return len(s.batches.queues)
}
