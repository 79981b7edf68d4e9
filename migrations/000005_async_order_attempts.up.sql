-- An accepted order whose decision fails with an error nobody expected (not busy, not a
-- dependency down) is tried again, but not for ever: attempts counts those failures, and the
-- order is rejected (reason 'internal') when they reach the cap, so that the orders behind it
-- in its product's line are decided. The count is here, not in the job, because jobs come and
-- go (River gives one up after its own attempts, and the sweep makes another). last_error is
-- the latest failure, for operators: the client sees the reason only.
ALTER TABLE async_orders
    ADD COLUMN attempts   INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    ADD COLUMN last_error TEXT;
