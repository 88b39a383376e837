-- name: migrations_limits
SET LOCAL lock_timeout = '60s';
SET LOCAL statement_timeout = 0

-- name: migrations_lock
SELECT pg_advisory_xact_lock(hashtext('stint.migrate:' || %(schema)s))

-- name: migrations_schema_state
-- Looked up before any DDL: CREATE SCHEMA/TABLE IF NOT EXISTS check privileges
-- before existence, so a role without CREATE could not even run a no-op.
SELECT n.oid IS NOT NULL AS schema_exists,
       to_regclass(format('%%I.schema_migrations', %(schema)s::text)) IS NOT NULL AS table_exists,
       coalesce(pg_has_role(current_user, n.nspowner, 'USAGE'), false) AS owned
FROM (SELECT) AS one
LEFT JOIN pg_namespace n ON n.nspname = %(schema)s

-- name: migrations_create_schema
CREATE SCHEMA {schema}

-- name: migrations_create_table
SET LOCAL search_path TO {schema};
CREATE TABLE schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)

-- name: migrations_grant_app_role
-- The worker/API role: DML on Stint's tables and nothing else. It cannot change
-- the schema, delete rows, rewrite the event log (append-only: no UPDATE on
-- events) or record migrations. Run after every migrate, so tables added by
-- later migrations are covered.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE ON ALL TABLES IN SCHEMA {schema} TO {role};
REVOKE INSERT, UPDATE ON {schema}.schema_migrations FROM {role};
REVOKE UPDATE ON {schema}.events FROM {role}

-- name: migrations_applied
SELECT version, name, checksum FROM schema_migrations ORDER BY version

-- name: migrations_record
INSERT INTO schema_migrations (version, name, checksum)
VALUES (%(version)s, %(name)s, %(checksum)s)
