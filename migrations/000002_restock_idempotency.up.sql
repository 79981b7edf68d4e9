-- A restock can carry an Idempotency-Key, as an order can: a retry of a restock whose answer
-- was lost must not add the stock twice. The restock row is its own record: the key, what the
-- request was (fingerprint), and the product as the restock left it, which a replay answers
-- with. Restock rows are kept for the audit, so their keys are never purged.
ALTER TABLE restocks
    ADD COLUMN idempotency_key TEXT,
    ADD COLUMN fingerprint     BYTEA,
    ADD COLUMN stock_after     BIGINT,
    ADD COLUMN version_after   BIGINT,
    ADD CONSTRAINT restocks_keyed_complete CHECK (
        (idempotency_key IS NULL) = (fingerprint IS NULL) AND
        (idempotency_key IS NULL) = (stock_after IS NULL) AND
        (idempotency_key IS NULL) = (version_after IS NULL));
CREATE UNIQUE INDEX restocks_idempotency_key ON restocks (idempotency_key) WHERE idempotency_key IS NOT NULL;
