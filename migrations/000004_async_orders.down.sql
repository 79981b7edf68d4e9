DELETE FROM idempotency_keys WHERE outcome = 'accepted';
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_accepted_check,
    DROP CONSTRAINT idempotency_keys_outcome_check,
    ADD CONSTRAINT idempotency_keys_outcome_check CHECK (outcome IN ('confirmed', 'sold_out')),
    DROP COLUMN async_order_id;
DROP TABLE async_orders;
