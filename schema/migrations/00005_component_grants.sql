-- Least privilege: each component's PostgreSQL role gets exactly the table
-- privileges its code uses, when that role exists. The roles themselves
-- (logins, passwords, REPLICATION for cdc) are cluster-wide and created by an
-- administrator with deploy/compose/initdb/sql/roles.sql (docs/operations.md,
-- "PostgreSQL roles"); without them this migration grants nothing and every
-- component keeps using the migrating role. A later migration that adds a
-- table grants its privileges the same way.

-- +goose Up
-- +goose StatementBegin
DO $$
BEGIN
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'eventforge_api') THEN
        -- Orders and their outbox events in one transaction; idempotency
        -- keys (pruned by the api); the console's read-only views.
        GRANT SELECT, INSERT, UPDATE ON orders TO eventforge_api;
        GRANT SELECT, INSERT ON order_items, outbox TO eventforge_api;
        GRANT SELECT, INSERT, UPDATE, DELETE ON idempotency_keys TO eventforge_api;
        GRANT SELECT ON processed_events, shipments, ledger TO eventforge_api;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'eventforge_cdc') THEN
        -- Streams the outbox through the slot (REPLICATION on the role);
        -- reads it for `outbox replay` and the unpublished age; prunes it.
        GRANT SELECT, DELETE ON outbox TO eventforge_cdc;
    END IF;
    IF EXISTS (SELECT FROM pg_roles WHERE rolname = 'eventforge_consumer') THEN
        -- The (consumer, event_id) marks and the business effects; SELECT …
        -- FOR UPDATE on orders needs UPDATE.
        GRANT SELECT, INSERT ON processed_events TO eventforge_consumer;
        GRANT SELECT, UPDATE ON orders TO eventforge_consumer;
        GRANT SELECT ON order_items TO eventforge_consumer;
        GRANT SELECT, INSERT, UPDATE ON shipments, ledger TO eventforge_consumer;
    END IF;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['eventforge_api', 'eventforge_cdc', 'eventforge_consumer'] LOOP
        IF EXISTS (SELECT FROM pg_roles WHERE rolname = r) THEN
            EXECUTE format('REVOKE ALL ON orders, order_items, outbox, idempotency_keys, processed_events, shipments, ledger FROM %I', r);
        END IF;
    END LOOP;
END
$$;
-- +goose StatementEnd
