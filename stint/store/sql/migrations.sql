-- name: migrations_limits
SET LOCAL lock_timeout = '60s';
SET LOCAL statement_timeout = 0

-- name: migrations_lock
SELECT pg_advisory_xact_lock(hashtext('stint.migrate:' || %(schema)s))

-- name: migrations_ensure_table
CREATE SCHEMA IF NOT EXISTS {schema};
SET LOCAL search_path TO {schema};
CREATE TABLE IF NOT EXISTS schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_applied
SELECT version, name, checksum FROM schema_migrations ORDER BY version

-- name: migrations_record
INSERT INTO schema_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s)

-- name: migrations_table_exists
-- Readiness reads the record without creating it (no DDL rights needed).
SELECT to_regclass('schema_migrations') IS NOT NULL AS present

