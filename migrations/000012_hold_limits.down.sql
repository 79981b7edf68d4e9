-- The holds clamped to an hour by the up migration stay an hour: their longer setting is gone.
DROP TABLE customer_holds;
ALTER TABLE products
    DROP CONSTRAINT products_max_held_positive,
    DROP COLUMN max_held_per_customer,
    DROP CONSTRAINT products_hold_for_range,
    ADD CONSTRAINT products_hold_for_range CHECK (hold_for_seconds BETWEEN 1 AND 86400);
