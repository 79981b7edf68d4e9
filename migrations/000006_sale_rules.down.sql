DROP TABLE customer_purchases;
ALTER TABLE products
    DROP CONSTRAINT products_max_per_customer_positive,
    DROP CONSTRAINT products_sale_window,
    DROP COLUMN max_per_customer,
    DROP COLUMN sale_ends_at,
    DROP COLUMN sale_starts_at;
