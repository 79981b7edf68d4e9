-- The line (issue #33): a product sold through a line admits `line_admit` buyers at a time, each
-- for `line_admission_seconds`, and refuses orders without an admission. Both settings are set
-- together or not at all (NULL: no line, the product sells as before).
ALTER TABLE products
    ADD COLUMN line_admit             INTEGER,
    ADD COLUMN line_admission_seconds INTEGER,
    ADD CONSTRAINT products_line_settings CHECK ((line_admit IS NULL) = (line_admission_seconds IS NULL)),
    ADD CONSTRAINT products_line_admit_range CHECK (line_admit BETWEEN 1 AND 10000),
    ADD CONSTRAINT products_line_admission_range CHECK (line_admission_seconds BETWEEN 10 AND 3600);

-- A product's line, made by its first join. Every change to its tickets but a join moves
-- version (and announces it: NOTIFY stocksvc_line), and stamps the tickets it changed with it,
-- so that a replica learns what changed since the version it knows. The draw is recorded here:
-- seed (32 random bytes, never shown before drawn_at) and how many tickets it placed; placed is
-- the highest place given so far, admitted how many admissions were made in all. stock and
-- holding are what the last advance read of the product (NULL before the first).
--
-- Joins take the row FOR KEY SHARE and the draw FOR UPDATE, so that every join committed
-- before the draw is in it and every later one is a late arrival; the other changes take it
-- FOR NO KEY UPDATE, which joins do not wait for.
CREATE TABLE lines (
    product_id  BIGINT      PRIMARY KEY REFERENCES products (id),
    version     BIGINT      NOT NULL DEFAULT 0,
    seed        BYTEA,
    drawn_at    TIMESTAMPTZ,
    drawn       BIGINT      NOT NULL DEFAULT 0,
    placed      BIGINT      NOT NULL DEFAULT 0,
    admitted    BIGINT      NOT NULL DEFAULT 0,
    stock       BIGINT,
    holding     BOOLEAN     NOT NULL DEFAULT false,
    advanced_at TIMESTAMPTZ,
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    CONSTRAINT lines_drawn CHECK ((seed IS NULL) = (drawn_at IS NULL)),
    CONSTRAINT lines_seed_size CHECK (octet_length(seed) = 32)
);

-- A customer's place in a product's line. One open ticket (waiting or admitted) per customer
-- and product; once it is used, expired or left, joining again makes a new one at the back.
-- place is NULL until the draw (or, for a late arrival, the next advance) gives one; changed
-- is the line version that last changed the ticket (0: not since it was made).
CREATE TABLE line_tickets (
    id             BIGINT      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    product_id     BIGINT      NOT NULL REFERENCES lines (product_id),
    customer_id    TEXT        NOT NULL,
    status         TEXT        NOT NULL DEFAULT 'waiting',
    place          BIGINT,
    joined_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    admitted_at    TIMESTAMPTZ,
    admitted_until TIMESTAMPTZ,
    ended_at       TIMESTAMPTZ,
    used_key       TEXT,
    changed        BIGINT      NOT NULL DEFAULT 0,
    CONSTRAINT line_tickets_status_check CHECK (status IN ('waiting', 'admitted', 'used', 'expired', 'left')),
    CONSTRAINT line_tickets_admission CHECK ((admitted_at IS NULL) = (admitted_until IS NULL)),
    CONSTRAINT line_tickets_admitted CHECK (status NOT IN ('admitted', 'used', 'expired') OR (admitted_at IS NOT NULL AND place IS NOT NULL)),
    CONSTRAINT line_tickets_ended CHECK ((status IN ('waiting', 'admitted')) = (ended_at IS NULL))
);

-- One place per place; NULLs (not placed yet) are distinct.
CREATE UNIQUE INDEX line_tickets_place_key ON line_tickets (product_id, place);
CREATE UNIQUE INDEX line_tickets_open_key ON line_tickets (product_id, customer_id) WHERE status IN ('waiting', 'admitted');
-- The front of the line, and the tickets still to place (NULL sorts last).
CREATE INDEX line_tickets_waiting_idx ON line_tickets (product_id, place) WHERE status = 'waiting';
-- The admissions running, by when they run out.
CREATE INDEX line_tickets_admitted_idx ON line_tickets (product_id, admitted_until) WHERE status = 'admitted';
-- What changed since a version a replica knows.
CREATE INDEX line_tickets_changed_idx ON line_tickets (product_id, changed) WHERE changed > 0;

-- The keys that sign tickets and passes (HMAC-SHA256). The first replica to start makes key 1;
-- a new row with a higher id is signed with by replicas from their next start, and tokens
-- signed with an older key verify for as long as its row is kept.
CREATE TABLE line_keys (
    id         SMALLINT    PRIMARY KEY CHECK (id BETWEEN 1 AND 255),
    secret     BYTEA       NOT NULL CHECK (octet_length(secret) = 32),
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
