-- Orders accepted now and decided later (Prefer: respond-async). The row is the order's
-- durable place in line: it is written in the same transaction as the job that will decide it
-- (River's river_job table, created by River's own migrations), so an accepted order is never
-- lost, and seq is the arrival order in which a product's orders are decided.
--
-- The decision itself is the idempotency record stored under the order's internal key by the
-- purchase path (a confirmed order's row in orders has the same id); status, decided_at and
-- the refusal's figures are a copy made once that record exists, kept because records are
-- purged after their retention and an order's outcome is not.
CREATE TABLE async_orders (
    id          UUID        PRIMARY KEY,
    seq         BIGINT      GENERATED ALWAYS AS IDENTITY,
    customer_id TEXT        NOT NULL,
    -- The items, in ascending product order; product_id is set for an order of one product,
    -- the only kind a product's line holds (a cart is decided on its own).
    product_ids BIGINT[]    NOT NULL,
    quantities  BIGINT[]    NOT NULL,
    product_id  BIGINT      REFERENCES products (id),
    status      TEXT        NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'confirmed', 'rejected')),
    -- For a rejected order: the problem code, and for a sold-out one what was asked and left.
    reason      TEXT,
    rejected_product BIGINT,
    requested   BIGINT,
    available   BIGINT,
    accepted_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    decided_at  TIMESTAMPTZ,
    CHECK (cardinality(product_ids) = cardinality(quantities) AND cardinality(product_ids) > 0),
    CHECK ((status = 'pending') = (decided_at IS NULL)),
    CHECK ((status = 'rejected') = (reason IS NOT NULL))
);
-- A product's line: its pending orders in arrival order.
CREATE INDEX async_orders_line_idx ON async_orders (product_id, seq) WHERE status = 'pending';
-- Every pending order, for the sweep that restarts a stalled line and for the pending gauge.
CREATE INDEX async_orders_pending_idx ON async_orders (accepted_at) WHERE status = 'pending';

-- A client's Idempotency-Key sent with an order that was accepted for later is recorded at once,
-- with outcome 'accepted' and the order's id, so that a retry — asynchronous or not, on any
-- replica — is answered with that order instead of buying again.
ALTER TABLE idempotency_keys
    ADD COLUMN async_order_id UUID REFERENCES async_orders (id),
    DROP CONSTRAINT idempotency_keys_outcome_check,
    ADD CONSTRAINT idempotency_keys_outcome_check CHECK (outcome IN ('confirmed', 'sold_out', 'accepted')),
    ADD CONSTRAINT idempotency_keys_accepted_check CHECK ((outcome = 'accepted') = (async_order_id IS NOT NULL));
