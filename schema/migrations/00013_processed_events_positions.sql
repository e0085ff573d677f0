-- Bounded marks. Each processed_events mark keeps the Kafka partition and
-- the offset of the newest copy of its event the consumer read, so that the
-- consumer can delete the marks whose event can no longer come back: every
-- copy below the partition's log-start offset, the outbox row pruned, no
-- relay dead letter left, and nothing held in the DLQ (docs/consumer.md,
-- "Bounded marks"). Marks written before this migration have no position
-- and are kept.

-- +goose Up
ALTER TABLE processed_events ADD COLUMN kafka_partition integer;
ALTER TABLE processed_events ADD COLUMN kafka_offset bigint;
CREATE INDEX processed_events_position ON processed_events (consumer, kafka_partition, kafka_offset)
    WHERE kafka_offset IS NOT NULL;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'eventforge_consumer') THEN
        GRANT UPDATE (kafka_partition, kafka_offset), DELETE ON processed_events TO eventforge_consumer;
        GRANT SELECT (id) ON outbox, outbox_deleted TO eventforge_consumer;
        GRANT SELECT (event_id) ON cdc_dead_letters TO eventforge_consumer;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP INDEX processed_events_position;
ALTER TABLE processed_events DROP COLUMN kafka_offset;
ALTER TABLE processed_events DROP COLUMN kafka_partition;
