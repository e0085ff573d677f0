-- The relay's slot checkpoint, one row per replication slot. A logical slot
-- lives on one server and can be lost: dropped, invalidated by
-- max_slot_wal_keep_size, or absent on a promoted standby (PostgreSQL 16 and
-- older do not synchronise slots). This row, written in the same database
-- and so replicated with it, is how the relay finds and closes the gap
-- (docs/cdc.md, "A lost slot and failover"):
--
--   confirm_limit    the relay never confirms a position past it to its slot;
--                    it raises the limit here first. A slot whose confirmed
--                    position is past the limit was not advanced by the
--                    relay: it was recreated, so rows may have been skipped.
--   published_below  a 64-bit transaction ID: every outbox row inserted by a
--                    transaction below it was acknowledged by Kafka. NULL
--                    when unknown (then a lost slot republishes every row).
--
-- After a gap the relay creates a new slot, republishes every stored outbox
-- row from published_below on with its original event ID, and records the
-- recovery below.

-- +goose Up
CREATE TABLE cdc_checkpoints (
    slot             text        PRIMARY KEY,
    confirm_limit    pg_lsn      NOT NULL,
    published_below  bigint,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    recovered_at     timestamptz,
    recovery_reason  text,
    recovered_events bigint
);

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'eventforge_cdc') THEN
        GRANT SELECT, INSERT, UPDATE ON cdc_checkpoints TO eventforge_cdc;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE cdc_checkpoints;
