-- A replica that learns a product is sold out loads, once, the keys with a stored outcome for
-- it, so that it can refuse other keyed orders without a query each. Refusals carry the
-- product in product_id (confirmed orders are found through order_items); only refusals have
-- it, hence the partial index.
CREATE INDEX idempotency_keys_product_id_idx ON idempotency_keys (product_id) WHERE product_id IS NOT NULL;
