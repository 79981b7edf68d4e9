-- Sale rules: a window (sale_starts_at, sale_ends_at; NULL means open from creation, or no end)
-- and a limit of units per customer (max_per_customer; NULL means none). The purchase statement
-- checks the window against now(), Postgres's clock, so that no replica's clock decides when a
-- sale opens.
ALTER TABLE products
    ADD COLUMN sale_starts_at   TIMESTAMPTZ,
    ADD COLUMN sale_ends_at     TIMESTAMPTZ,
    ADD COLUMN max_per_customer BIGINT,
    ADD CONSTRAINT products_sale_window CHECK (sale_ends_at > sale_starts_at),
    ADD CONSTRAINT products_max_per_customer_positive CHECK (max_per_customer >= 1);

-- customer_purchases counts the units each customer bought of each product with a limit. The
-- statement that sells updates it in the same transaction, and copies the product's limit into
-- max_units, so that the CHECK refuses a customer above the limit whatever the application
-- decided: the per-customer counterpart of products_stock_nonnegative.
CREATE TABLE customer_purchases (
    product_id  BIGINT NOT NULL REFERENCES products (id),
    customer_id TEXT   NOT NULL,
    bought      BIGINT NOT NULL,
    max_units   BIGINT NOT NULL,
    PRIMARY KEY (product_id, customer_id),
    CONSTRAINT customer_purchases_within_limit CHECK (bought >= 0 AND bought <= max_units)
);
