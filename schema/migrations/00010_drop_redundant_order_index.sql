-- orders_customer_id_idx (customer_id, created_at) is a prefix of
-- orders_customer_id_created_at_id_idx (customer_id, created_at, id), which
-- serves every query the shorter one could. Each index on orders costs an
-- entry per order created and, as status is indexed, per status change too.
-- Dropped concurrently, so that writes to orders go on meanwhile.

-- +goose NO TRANSACTION
-- +goose Up
DROP INDEX CONCURRENTLY IF EXISTS orders_customer_id_idx;

-- +goose Down
CREATE INDEX CONCURRENTLY IF NOT EXISTS orders_customer_id_idx ON orders (customer_id, created_at);
