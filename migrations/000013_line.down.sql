-- Every ticket and the line's signing keys go with the tables: a rollback during a sale
-- drops every place in line (the orders themselves are untouched).
DROP TABLE line_keys;
DROP TABLE line_tickets;
DROP TABLE lines;
ALTER TABLE products
    DROP CONSTRAINT products_line_admission_range,
    DROP CONSTRAINT products_line_admit_range,
    DROP CONSTRAINT products_line_settings,
    DROP COLUMN line_admission_seconds,
    DROP COLUMN line_admit;
