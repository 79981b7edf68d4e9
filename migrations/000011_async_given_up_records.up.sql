-- An order accepted for later whose decision failed too many times is rejected (reason
-- 'internal') by storing that rejection as the order's decision record, outcome 'failed', under
-- its decision key (E'\x1eaccepted:' and its id), in the statement that copies it into the order
-- (issue #31). Before, the rejection was written to async_orders alone, and a drain that had
-- read the order before it — a paused one whose line had passed on — could still buy it: the
-- order rejected, its units sold. The purchase path stores its decision under the same key, so
-- the primary key lets exactly one of the two decisions in, and the other replays it.
ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_outcome_check,
    ADD CONSTRAINT idempotency_keys_outcome_check CHECK (outcome IN ('confirmed', 'sold_out', 'accepted', 'failed'));
