DROP INDEX IF EXISTS orders_customer_created_idx;
