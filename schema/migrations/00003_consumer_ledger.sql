-- Consumers: the ledger consumer's per-customer counters, and cancellation of
-- the fulfillment consumer's shipments.

-- +goose Up
-- One row per customer and currency. Plain counters, deliberately: an event
-- applied twice would visibly double them.
CREATE TABLE ledger (
    customer_id     text        NOT NULL,
    currency        char(3)     NOT NULL,
    order_count     bigint      NOT NULL DEFAULT 0 CHECK (order_count >= 0),
    total_cents     bigint      NOT NULL DEFAULT 0 CHECK (total_cents >= 0),
    cancelled_count bigint      NOT NULL DEFAULT 0 CHECK (cancelled_count >= 0),
    cancelled_cents bigint      NOT NULL DEFAULT 0 CHECK (cancelled_cents >= 0),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (customer_id, currency)
);

-- Set by the fulfillment consumer when it applies the order's OrderCancelled.
ALTER TABLE shipments ADD COLUMN cancelled_at timestamptz;

-- +goose Down
ALTER TABLE shipments DROP COLUMN cancelled_at;
DROP TABLE ledger;
