-- Holds cannot be hoarded (issue #31).
--
-- A hold lasts at most an hour: a checkout's time to pay (ticketing and shops reserve for 10 to
-- 15 minutes), not a reservation. Longer settings are clamped to it (a change of the rules: the
-- version moves, as for any); the orders already held keep the expires_at they were written with.
UPDATE products SET hold_for_seconds = 3600, version = version + 1, updated_at = now() WHERE hold_for_seconds > 3600;
ALTER TABLE products
    DROP CONSTRAINT products_hold_for_range,
    ADD CONSTRAINT products_hold_for_range CHECK (hold_for_seconds BETWEEN 1 AND 3600);

-- max_held_per_customer is the most units of the product one customer may have in orders held
-- at once: its own holds, and the product's units in a cart held for another product's hold.
-- Every product has one, so that no held order is uncapped. The service writes it (given, or
-- its default: max_per_customer when set, else one full order, STOCKSVC_MAX_QUANTITY); the
-- column's default, 10, STOCKSVC_MAX_QUANTITY's own, caps a row written without it (by a
-- replica from before this migration, or by hand), and the rows already there.
ALTER TABLE products
    ADD COLUMN max_held_per_customer BIGINT NOT NULL DEFAULT 10,
    ADD CONSTRAINT products_max_held_positive CHECK (max_held_per_customer >= 1);
UPDATE products SET max_held_per_customer = max_per_customer WHERE max_per_customer IS NOT NULL;

-- customer_holds counts the units each customer has in held orders of each product, as
-- customer_purchases counts what they bought: the statement that sells held orders adds them,
-- copying the product's max_held_per_customer into max_held, whose CHECK refuses a count above
-- it and fails the whole write; a confirm, a cancel and an expiry take them off in the
-- statement that changes the order's status.
CREATE TABLE customer_holds (
    product_id  BIGINT NOT NULL REFERENCES products (id),
    customer_id TEXT   NOT NULL,
    held        BIGINT NOT NULL,
    max_held    BIGINT NOT NULL,
    PRIMARY KEY (product_id, customer_id),
    CONSTRAINT customer_holds_within_limit CHECK (held >= 0 AND held <= max_held)
);

-- The holds open now are counted from the orders. A customer who holds more than the cap keeps
-- those holds (max_held is their count) and can hold no more until they end.
INSERT INTO customer_holds (product_id, customer_id, held, max_held)
SELECT i.product_id, o.customer_id, sum(i.quantity), greatest(p.max_held_per_customer, sum(i.quantity))
  FROM orders o JOIN order_items i ON i.order_id = o.id JOIN products p ON p.id = i.product_id
 WHERE o.status = 'held'
 GROUP BY i.product_id, o.customer_id, p.max_held_per_customer;
