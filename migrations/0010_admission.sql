-- Stint schema 0010: admission control (limits on what enqueue admits).

-- The limits every enqueue checks, in the database so that every producer
-- (the CLI, the API, a library caller) enforces the same ones whatever its own
-- environment says. One row per tenant that has its own limits, and the '*'
-- row: the defaults every other tenant (and a session without a tenant) falls
-- back on, column by column, plus the one global backlog limit. NULL is "no
-- limit of its own": a tenant's NULL follows the default, the default's NULL
-- means unlimited. Limits count unfinished turns (queued, running or parked:
-- sessions.queued_turns) and active sessions (those with an unfinished turn).
CREATE TABLE admission_limits (
    tenant            text        PRIMARY KEY CHECK (tenant = '*' OR tenant ~ '^[A-Za-z0-9._-]{1,100}$'),
    max_queued        integer     CHECK (max_queued > 0),
    max_running       integer     CHECK (max_running > 0),
    max_session_queue integer     CHECK (max_session_queue > 0),
    global_backlog    bigint      CHECK (global_backlog > 0),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (tenant = '*' OR global_backlog IS NULL)
);

-- The seed keeps the per-session queue limit producers had before
-- (STINT_SESSION_QUEUE_LIMIT's default); everything else starts unlimited.
INSERT INTO admission_limits (tenant, max_session_queue) VALUES ('*', 16);

-- Admission counts a tenant's active sessions and their unfinished turns at
-- enqueue time, from this index only: its entries are the sessions with work,
-- so the count costs what the tenant has in flight, never its history. (The
-- sessions it covers are updated by claims and finishes that change indexed
-- columns already, so it adds no non-HOT update to the hot path.)
CREATE INDEX sessions_open_tenant_idx ON sessions ((coalesce(tenant, ''))) INCLUDE (queued_turns)
    WHERE queued_turns > 0;
