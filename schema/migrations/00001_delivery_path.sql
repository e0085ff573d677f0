-- The delivery path: orders and their items, the transactional outbox that the
-- CDC reader streams from, the idempotency marks consumers write, and the
-- publication the replication slot decodes.

-- +goose Up
CREATE TABLE orders (
    id          uuid PRIMARY KEY,
    customer_id text        NOT NULL,
    currency    char(3)     NOT NULL,
    total_cents bigint      NOT NULL CHECK (total_cents >= 0),
    status      text        NOT NULL CHECK (status IN ('created', 'processed', 'cancelled')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX orders_customer_id_idx ON orders (customer_id, created_at);

CREATE TABLE order_items (
    order_id         uuid   NOT NULL REFERENCES orders (id) ON DELETE CASCADE,
    line_no          int    NOT NULL,
    sku              text   NOT NULL,
    quantity         int    NOT NULL CHECK (quantity > 0),
    unit_price_cents bigint NOT NULL CHECK (unit_price_cents >= 0),
    PRIMARY KEY (order_id, line_no)
);

-- Debezium outbox-router compatible columns (id, aggregatetype, aggregateid,
-- type, payload) plus headers (e.g. traceparent) and created_at.
CREATE TABLE outbox (
    id            uuid        PRIMARY KEY,
    aggregatetype text        NOT NULL,
    aggregateid   text        NOT NULL,
    type          text        NOT NULL,
    payload       jsonb       NOT NULL,
    headers       jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX outbox_created_at_idx ON outbox (created_at);

-- One row per (consumer, event) that a consumer applied. It commits in the
-- same transaction as the business change, so a redelivered event finds its
-- mark and changes nothing.
CREATE TABLE processed_events (
    consumer     text        NOT NULL,
    event_id     uuid        NOT NULL,
    processed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, event_id)
);

-- The fulfillment consumer's business effect: one shipment per processed
-- order. Deliberately without a uniqueness constraint on order_id, so a
-- duplicate application would be visible as a second shipment.
CREATE TABLE shipments (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   uuid        NOT NULL REFERENCES orders (id),
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX shipments_order_id_idx ON shipments (order_id);

CREATE PUBLICATION eventforge_outbox FOR TABLE outbox WITH (publish = 'insert');

-- +goose Down
DROP PUBLICATION IF EXISTS eventforge_outbox;
DROP TABLE shipments;
DROP TABLE processed_events;
DROP TABLE outbox;
DROP TABLE order_items;
DROP TABLE orders;
