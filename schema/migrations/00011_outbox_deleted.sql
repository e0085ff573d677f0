-- Outbox rows deleted before the relay pruned them. The relay streams the
-- WAL, so a writer that deletes its outbox row in the same transaction (to
-- keep the table empty, as Debezium's outbox router allows) still has its
-- event published; but when a slot is lost, the relay republishes the gap
-- from the tables, and a deleted row would be missing from it. The trigger
-- below keeps every deleted row here — except the relay's own retention
-- deletes, which set eventforge.outbox_pruning — and the relay prunes this
-- table by the same rule as the outbox (docs/cdc.md, "Outbox retention and
-- replay"). The row's xmin is the deleting transaction: for a row deleted
-- in its own transaction, the one that inserted it.
--
-- TRUNCATE bypasses the trigger: never truncate an outbox the relay has not
-- published.

-- +goose Up
CREATE TABLE outbox_deleted (
    id            uuid        PRIMARY KEY,
    aggregatetype text        NOT NULL,
    aggregateid   text        NOT NULL,
    type          text        NOT NULL,
    payload       jsonb       NOT NULL,
    headers       jsonb       NOT NULL,
    created_at    timestamptz NOT NULL,
    deleted_at    timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX outbox_deleted_created_at_idx ON outbox_deleted (created_at);

-- +goose StatementBegin
-- SECURITY DEFINER: a writer that may delete outbox rows needs no
-- privilege on outbox_deleted.
CREATE FUNCTION outbox_keep_deleted() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
    IF current_setting('eventforge.outbox_pruning', true) IS DISTINCT FROM 'on' THEN
        INSERT INTO outbox_deleted (id, aggregatetype, aggregateid, type, payload, headers, created_at)
        VALUES (OLD.id, OLD.aggregatetype, OLD.aggregateid, OLD.type, OLD.payload, OLD.headers, OLD.created_at)
        ON CONFLICT (id) DO NOTHING;
    END IF;
    RETURN OLD;
END
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_keep_deleted BEFORE DELETE ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_keep_deleted();

-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'eventforge_cdc') THEN
        -- Gap recovery reads it; retention prunes it.
        GRANT SELECT, DELETE ON outbox_deleted TO eventforge_cdc;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER outbox_keep_deleted ON outbox;
DROP FUNCTION outbox_keep_deleted();
DROP TABLE outbox_deleted;
