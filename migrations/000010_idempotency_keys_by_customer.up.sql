-- Idempotency keys are each customer's own (issue #31): a record is named by the customer who
-- sent the key and the key, so that the same key from two customers is two independent
-- requests, and no customer can replay, refuse (422) or learn of another's request by sending
-- its key. Restock keys (restocks.idempotency_key, an admin's) keep their one namespace.
--
-- Every stored record is kept, and gets its customer from what it points at or holds:
--   1. a confirmed order's record (order_id): the order's customer_id;
--   2. a client's key claimed by an order accepted for later (async_order_id): that order's
--      customer_id;
--   3. the decision record of an order accepted for later (its key is E'\x1eaccepted:' and the
--      order's id, a prefix no client key can have): that order's customer_id;
--   4. a client's key refused for lack of stock holds no order, and its customer only inside
--      the fingerprint (a SHA-256 of the customer and the items): it is kept under the customer
--      '' — which no request can have (customer ids are never blank) — until its retention
--      ends. A retry of it within that time is decided afresh instead of replayed; that can buy
--      nothing twice, since the refusal bought nothing.
ALTER TABLE idempotency_keys ADD COLUMN customer_id TEXT;

UPDATE idempotency_keys k SET customer_id = o.customer_id
  FROM orders o WHERE o.id = k.order_id;
UPDATE idempotency_keys k SET customer_id = a.customer_id
  FROM async_orders a WHERE a.id = k.async_order_id AND k.customer_id IS NULL;
UPDATE idempotency_keys k SET customer_id = a.customer_id
  FROM async_orders a
 WHERE k.customer_id IS NULL AND starts_with(k.key, E'\x1eaccepted:')
   AND a.id = substr(k.key, length(E'\x1eaccepted:') + 1)::uuid;
UPDATE idempotency_keys SET customer_id = '' WHERE customer_id IS NULL;

-- The customer first: every lookup names one, and its keys are side by side in the index.
ALTER TABLE idempotency_keys
    ALTER COLUMN customer_id SET NOT NULL,
    DROP CONSTRAINT idempotency_keys_pkey,
    ADD CONSTRAINT idempotency_keys_pkey PRIMARY KEY (customer_id, key);
