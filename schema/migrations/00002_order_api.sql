-- The order API: idempotency keys of CreateOrder, and the indexes that back
-- ListOrders' keyset pagination (newest first by created_at, then id).

-- +goose Up
-- One row per idempotency key (CreateOrder.request_id or the REST
-- Idempotency-Key header). It is inserted first in the order's transaction, so
-- concurrent requests with one key serialise on the primary key: the first
-- commits the order, the others wait for it and then find its row. The
-- foreign key is checked at commit, after the order row exists.
CREATE TABLE idempotency_keys (
    key          text        PRIMARY KEY,
    request_hash bytea       NOT NULL,
    order_id     uuid        NOT NULL REFERENCES orders (id) ON DELETE CASCADE DEFERRABLE INITIALLY DEFERRED,
    event_id     uuid        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);

-- Pruning deletes keys older than the idempotency window.
CREATE INDEX idempotency_keys_created_at_idx ON idempotency_keys (created_at);

CREATE INDEX orders_created_at_id_idx ON orders (created_at, id);
CREATE INDEX orders_customer_id_created_at_id_idx ON orders (customer_id, created_at, id);
CREATE INDEX orders_status_created_at_id_idx ON orders (status, created_at, id);

-- +goose Down
DROP INDEX orders_status_created_at_id_idx;
DROP INDEX orders_customer_id_created_at_id_idx;
DROP INDEX orders_created_at_id_idx;
DROP TABLE idempotency_keys;
