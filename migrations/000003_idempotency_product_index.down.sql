DROP INDEX IF EXISTS idempotency_keys_product_id_idx;
