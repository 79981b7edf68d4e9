-- Holds: an order of a product sold with a hold (hold_for_seconds) takes its units at once and
-- is 'held' until its customer confirms it, or it is cancelled, or expires_at passes; a hold
-- cancelled or expired gives its units back, in the transaction that changes its status, so
-- that received = stock + held + confirmed units at every instant. decided_at is when a hold
-- was confirmed, cancelled or expired.
ALTER TABLE products
    ADD COLUMN hold_for_seconds INTEGER,
    ADD CONSTRAINT products_hold_for_range CHECK (hold_for_seconds BETWEEN 1 AND 86400);

ALTER TABLE orders DROP CONSTRAINT orders_status_check;
ALTER TABLE orders
    ADD COLUMN expires_at TIMESTAMPTZ,
    ADD COLUMN decided_at TIMESTAMPTZ,
    ADD CONSTRAINT orders_status_check CHECK (status IN ('confirmed', 'held', 'cancelled', 'expired')),
    ADD CONSTRAINT orders_hold_expires CHECK (status = 'confirmed' AND decided_at IS NULL OR expires_at IS NOT NULL),
    ADD CONSTRAINT orders_hold_decided CHECK ((status = 'held') = (expires_at IS NOT NULL AND decided_at IS NULL));

-- The sweep's work: the holds whose time has come, oldest first.
CREATE INDEX orders_holds_due_idx ON orders (expires_at) WHERE status = 'held';
