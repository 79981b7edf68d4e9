-- Products carry the stock that flash sales fight over. Three columns serve the defenses:
-- version (optimistic check), fence (the highest lock fencing token that has written the row)
-- and the CHECK constraint that refuses negative stock whatever the application does.
CREATE TABLE products (
    id            BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku           TEXT        NOT NULL,
    name          TEXT        NOT NULL,
    stock         BIGINT      NOT NULL,
    initial_stock BIGINT      NOT NULL,
    version       BIGINT      NOT NULL DEFAULT 0,
    fence         BIGINT      NOT NULL DEFAULT 0,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT products_sku_key UNIQUE (sku),
    CONSTRAINT products_stock_nonnegative CHECK (stock >= 0),
    CONSTRAINT products_initial_stock_nonnegative CHECK (initial_stock >= 0)
);

-- Every restock is kept so that the audit can account for all stock ever received.
CREATE TABLE restocks (
    id         BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product_id BIGINT      NOT NULL REFERENCES products (id),
    quantity   BIGINT      NOT NULL CHECK (quantity > 0),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX restocks_product_id_idx ON restocks (product_id);

CREATE TABLE orders (
    id          UUID        PRIMARY KEY,
    customer_id TEXT        NOT NULL,
    status      TEXT        NOT NULL CHECK (status IN ('confirmed')),
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE order_items (
    order_id   UUID   NOT NULL REFERENCES orders (id),
    product_id BIGINT NOT NULL REFERENCES products (id),
    quantity   BIGINT NOT NULL CHECK (quantity > 0),
    PRIMARY KEY (order_id, product_id)
);
CREATE INDEX order_items_product_id_idx ON order_items (product_id);

-- Idempotency records are written in the same transaction as the order they describe, so a
-- crash between commit and response can never let a retry create a second order. Only final
-- business outcomes are kept: a confirmed order, or a refusal for lack of stock.
CREATE TABLE idempotency_keys (
    key          TEXT        PRIMARY KEY,
    fingerprint  BYTEA       NOT NULL,
    outcome      TEXT        NOT NULL CHECK (outcome IN ('confirmed', 'sold_out')),
    order_id     UUID        REFERENCES orders (id),
    product_id   BIGINT,
    requested    BIGINT,
    available    BIGINT,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    CHECK ((outcome = 'confirmed') = (order_id IS NOT NULL))
);
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);
CREATE UNIQUE INDEX idempotency_keys_order_id_key ON idempotency_keys (order_id);
