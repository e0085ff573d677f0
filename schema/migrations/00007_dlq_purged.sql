-- Dead-lettered records deleted with `eventforge dlq purge`. The purge writes
-- one row per record before it deletes the records from the DLQ topic, so
-- the delivery auditor (`eventforge verify`) reports an event whose only
-- trace was a purged dead letter as purged, not lost. Rows are never deleted
-- by EventForge.
--
-- The purge is an operator's command run with the migrating (owner) role;
-- no component role is granted anything on this table.

-- +goose Up
CREATE TABLE dlq_purged (
    dlq_topic        text        NOT NULL,
    dlq_partition    int         NOT NULL,
    dlq_offset       bigint      NOT NULL,
    consumer         text        NOT NULL,
    event_id         text        NOT NULL,
    order_id         text        NOT NULL,
    event_type       text        NOT NULL,
    error_class      text        NOT NULL,
    dead_lettered_at timestamptz,
    purged_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (dlq_topic, dlq_partition, dlq_offset)
);

CREATE INDEX dlq_purged_consumer_event_id_idx ON dlq_purged (consumer, event_id);

-- +goose Down
DROP TABLE dlq_purged;
