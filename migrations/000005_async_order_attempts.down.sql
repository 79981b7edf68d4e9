ALTER TABLE async_orders
    DROP COLUMN IF EXISTS last_error,
    DROP COLUMN IF EXISTS attempts;
