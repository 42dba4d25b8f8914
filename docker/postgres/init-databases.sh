#!/usr/bin/env bash
# Creates the two databases of the deployment, each owned by its own role:
#   onceflow - the Onceflow ledger and the sink tables (ONCEFLOW_POSTGRES_DSN)
#   airflow  - the Airflow metadata database
# Run by the postgres image from /docker-entrypoint-initdb.d, only when the data volume is empty:
# changing a password in .env later does not change it here (ALTER ROLE ... PASSWORD by hand).
set -euo pipefail

: "${ONCEFLOW_DB_PASSWORD:?ONCEFLOW_DB_PASSWORD is not set}"
: "${AIRFLOW_DB_PASSWORD:?AIRFLOW_DB_PASSWORD is not set}"

# psql variables (:'name') quote the passwords as SQL literals.
psql -v ON_ERROR_STOP=1 --username "${POSTGRES_USER:-postgres}" --dbname "${POSTGRES_DB:-postgres}" \
    -v onceflow_password="$ONCEFLOW_DB_PASSWORD" \
    -v airflow_password="$AIRFLOW_DB_PASSWORD" <<'SQL'
CREATE ROLE onceflow LOGIN PASSWORD :'onceflow_password';
CREATE DATABASE onceflow OWNER onceflow;
CREATE ROLE airflow LOGIN PASSWORD :'airflow_password';
CREATE DATABASE airflow OWNER airflow;
-- PostgreSQL 15+: only the owner may create objects in schema public.
\connect airflow
ALTER SCHEMA public OWNER TO airflow;
\connect onceflow
ALTER SCHEMA public OWNER TO onceflow;
SQL
