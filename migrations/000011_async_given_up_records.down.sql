-- A 'failed' record is copied into its order by the statement that stores it, so the order's
-- row holds the rejection: dropping the records loses no decision.
DELETE FROM idempotency_keys WHERE outcome = 'failed';
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_outcome_check,
    ADD CONSTRAINT idempotency_keys_outcome_check CHECK (outcome IN ('confirmed', 'sold_out', 'accepted'));
