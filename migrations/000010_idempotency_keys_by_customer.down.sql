-- Back to one namespace of keys for every customer, which holds only while no key has records
-- of two customers (two customers' orders under one key, or a refusal from before migration 10,
-- kept under no customer, beside a later order of its customer under the same key). Such a
-- rollback is refused with the number of keys, and nothing changes: the records are orders'
-- outcomes, and dropping one would let a retry buy again.
DO $$
DECLARE
    shared bigint;
BEGIN
    SELECT count(*) INTO shared FROM (
        SELECT key FROM idempotency_keys GROUP BY key HAVING count(*) > 1) s;
    IF shared > 0 THEN
        RAISE EXCEPTION 'idempotency_keys: % keys have records of more than one customer, and one namespace of keys cannot hold them', shared
            USING HINT = 'Find them with: SELECT key, array_agg(customer_id) FROM idempotency_keys GROUP BY key HAVING count(*) > 1. '
                         'Roll back once they are purged (STOCKSVC_IDEMPOTENCY_TTL after their orders), or keep this migration.';
    END IF;
END $$;

ALTER TABLE idempotency_keys
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (key),
    DROP COLUMN customer_id;
