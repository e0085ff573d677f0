-- EventForge's least-privilege PostgreSQL roles (docs/operations.md,
-- "PostgreSQL roles"). Run once per cluster as a superuser, connected to the
-- EventForge database, before the first migration:
--
--   psql -v owner_password=… -v api_password=… -v cdc_password=… \
--        -v consumer_password=… -d eventforge -f roles.sql
--
-- eventforge_owner runs `eventforge migrate`: it owns the tables and the
-- publication and creates the replication slot. The component roles get
-- their table privileges from migration 00005 (schema/migrations), which
-- grants them whenever these roles exist, so a later migration that adds a
-- table grants its privileges in the same file.
CREATE ROLE eventforge_owner LOGIN REPLICATION PASSWORD :'owner_password';
CREATE ROLE eventforge_api LOGIN PASSWORD :'api_password';
CREATE ROLE eventforge_cdc LOGIN REPLICATION PASSWORD :'cdc_password';
CREATE ROLE eventforge_consumer LOGIN PASSWORD :'consumer_password';

-- CREATE on the database lets the owner create the publication.
SELECT format('GRANT CONNECT, CREATE ON DATABASE %I TO eventforge_owner', current_database()) \gexec
SELECT format('GRANT CONNECT ON DATABASE %I TO eventforge_api, eventforge_cdc, eventforge_consumer', current_database()) \gexec
GRANT USAGE, CREATE ON SCHEMA public TO eventforge_owner;
GRANT USAGE ON SCHEMA public TO eventforge_api, eventforge_cdc, eventforge_consumer;
