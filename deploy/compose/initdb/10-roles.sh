#!/usr/bin/env bash
# Runs once, when the postgres container initialises an empty data
# directory: creates EventForge's least-privilege roles (sql/roles.sql).
# The passwords are this local topology's; production passes its own.
set -euo pipefail
psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" \
	-v owner_password=owner-secret \
	-v api_password=api-secret \
	-v cdc_password=cdc-secret \
	-v consumer_password=consumer-secret \
	-f /docker-entrypoint-initdb.d/sql/roles.sql
