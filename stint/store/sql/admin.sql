-- name: admin_create_database_from_template
CREATE DATABASE {name} TEMPLATE {template}

-- name: admin_create_database
CREATE DATABASE {name}

-- name: admin_drop_database
DROP DATABASE IF EXISTS {name} WITH (FORCE)

-- name: admin_drop_schema
DROP SCHEMA IF EXISTS {name} CASCADE

-- name: listen_channel
LISTEN {channel}

-- name: ping
-- A readiness probe's question: does the database answer at all?
SELECT 1 AS ok
