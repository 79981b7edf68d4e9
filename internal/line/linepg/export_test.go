package linepg

import "context"

// Hooks hold a transaction of the store at a point of its own: once a join holds its line's
// row (join), once a draw holds it (draw), once an advance holds it (advance). Set them before
// the store is used.
type Hooks struct {
	Join, Draw, Advance func(ctx context.Context)
}

// SetHooks sets s's hooks.
func (s *Store) SetHooks(h Hooks) {
	s.joinLocked, s.drawLocked, s.advanceLocked = h.Join, h.Draw, h.Advance
}
