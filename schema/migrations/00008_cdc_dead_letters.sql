-- Outbox events the relay (`eventforge cdc`) can never deliver: Kafka
-- refused the record permanently (over the topic's max.message.bytes, a
-- routed topic that does not exist or is not authorised, an invalid record)
-- or the relay could not build it (headers that are not a JSON object of
-- strings). The relay writes the row before it confirms the event's WAL
-- position, then moves on; `eventforge outbox dead-letters replay`
-- republishes the rows with their original event IDs once the cause is
-- fixed and marks them replayed. docs/cdc.md, "Records Kafka refuses".
--
-- payload and headers are kept as text so a record that is not what the
-- relay expects is stored as it was decoded. Rows are never deleted by
-- EventForge.

-- +goose Up
CREATE TABLE cdc_dead_letters (
    event_id         text        PRIMARY KEY,
    slot             text        NOT NULL,
    lsn              pg_lsn      NOT NULL,
    topic            text        NOT NULL,
    aggregatetype    text        NOT NULL,
    aggregateid      text        NOT NULL,
    type             text        NOT NULL,
    payload          text        NOT NULL,
    headers          text        NOT NULL,
    created_at       timestamptz,
    error_code       text        NOT NULL,
    error            text        NOT NULL,
    attempts         int         NOT NULL DEFAULT 1,
    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
    replayed_at      timestamptz
);

CREATE INDEX cdc_dead_letters_pending_idx ON cdc_dead_letters (lsn) WHERE replayed_at IS NULL;

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'eventforge_cdc') THEN
        -- The relay writes (and rewrites, when a record is refused again)
        -- its dead letters; the replay runs as the operator's role.
        GRANT SELECT, INSERT, UPDATE ON cdc_dead_letters TO eventforge_cdc;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TABLE cdc_dead_letters;
