-- Stint schema 0012: the HTTP API and dashboard under hostile and careless
-- clients (issue 22).
--
-- turns.busy: what the producer asked for when the session was busy
-- (enqueue, reject, interrupt). An idempotent retry must match it, as it
-- must match the input and the timeout: a retry that differs in anything
-- that matters is refused like another input (409, exit 2), instead of
-- silently returning the first turn. Turns queued before 0012 have none
-- recorded, and any busy matches them.
ALTER TABLE turns
    ADD COLUMN busy text CHECK (busy IN ('enqueue', 'reject', 'interrupt'));

-- dashboard_sessions: a browser signed in to the dashboard. The cookie holds
-- a session token (id and secret), never the API key; only the secret's
-- SHA-256 digest is stored. A session ends at its expiry, at sign-out
-- (revoked_at), or when its key is revoked (every check joins the live key).
CREATE TABLE dashboard_sessions (
    id          text        PRIMARY KEY CHECK (id ~ '^[0-9a-f]{16}$'),
    secret_hash bytea       NOT NULL CHECK (length(secret_hash) = 32),
    key_id      text        NOT NULL REFERENCES api_keys (id),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    revoked_at  timestamptz,
    CHECK (expires_at > created_at)
);
CREATE INDEX dashboard_sessions_key_id ON dashboard_sessions (key_id);

-- control.requested: a cancel or interrupt asked of the live worker running
-- the turn, with who asked (its actor); the worker's terminal event follows.
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('turn.started', 'tool.called', 'tool.returned',
                    'model.called', 'model.returned',
                    'approval.requested', 'approval.answered',
                    'effect.unknown', 'turn.released', 'turn.deferred', 'message',
                    'turn.completed', 'turn.failed',
                    'turn.cancelled', 'turn.interrupted',
                    'message.delta', 'model.retried', 'history.truncated',
                    'control.requested'));
