DROP INDEX orders_holds_due_idx;
ALTER TABLE orders
    DROP CONSTRAINT orders_hold_decided,
    DROP CONSTRAINT orders_hold_expires,
    DROP CONSTRAINT orders_status_check;
-- Orders that were held, cancelled or expired cannot be told apart from confirmed ones by the
-- schema before holds: a rollback with any of them is refused by the CHECK below.
ALTER TABLE orders
    ADD CONSTRAINT orders_status_check CHECK (status IN ('confirmed')),
    DROP COLUMN decided_at,
    DROP COLUMN expires_at;
ALTER TABLE products
    DROP CONSTRAINT products_hold_for_range,
    DROP COLUMN hold_for_seconds;
