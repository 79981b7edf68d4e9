-- A customer's own orders (GET /v1/orders), newest first, a page at a time: one range of this
-- index per page, from the cursor (created_at, id) down, however many orders the customer or
-- the table has. Orders of one batch share created_at (the selling transaction's now()), so
-- the id breaks ties; both columns descend as the pages are read.
CREATE INDEX orders_customer_created_idx ON orders (customer_id, created_at DESC, id DESC);
