DROP INDEX IF EXISTS restocks_idempotency_key;
ALTER TABLE restocks
    DROP CONSTRAINT IF EXISTS restocks_keyed_complete,
    DROP COLUMN IF EXISTS version_after,
    DROP COLUMN IF EXISTS stock_after,
    DROP COLUMN IF EXISTS fingerprint,
    DROP COLUMN IF EXISTS idempotency_key;
