-- Stint schema 0001: workers, sessions, turns, events, steps.
-- Runs with search_path set to the target schema; names are unqualified.
-- Every audit timestamp is filled by the database clock.

CREATE TABLE workers (
    id           text        PRIMARY KEY,
    host         text        NOT NULL,
    pid          integer     NOT NULL,
    version      text        NOT NULL,
    pins         text[]      NOT NULL DEFAULT '{}',
    slots        integer     NOT NULL CHECK (slots > 0),
    state        text        NOT NULL DEFAULT 'running'
                             CHECK (state IN ('running', 'draining', 'stopped')),
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    stopped_at   timestamptz,
    CHECK ((state = 'stopped') = (stopped_at IS NOT NULL))
);

CREATE TABLE sessions (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant           text,
    pin              text,
    status           text        NOT NULL DEFAULT 'idle'
                                 CHECK (status IN ('idle', 'ready', 'running', 'parked', 'closed')),
    lease_owner      text,
    lease_epoch      bigint      NOT NULL DEFAULT 0 CHECK (lease_epoch >= 0),
    lease_expires_at timestamptz,
    last_event_seq   bigint      NOT NULL DEFAULT 0 CHECK (last_event_seq >= 0),
    last_turn_seq    bigint      NOT NULL DEFAULT 0 CHECK (last_turn_seq >= 0),
    queued_turns     integer     NOT NULL DEFAULT 0 CHECK (queued_turns >= 0),
    ready_at         timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    claimed_at       timestamptz,
    -- A lease exists exactly while the session is running.
    CHECK ((status = 'running') = (lease_owner IS NOT NULL)),
    CHECK ((lease_owner IS NULL) = (lease_expires_at IS NULL)),
    CHECK (status <> 'ready' OR ready_at IS NOT NULL)
);

-- Claimable sessions: ready ones oldest first, and running ones by lease expiry.
CREATE INDEX sessions_ready_idx ON sessions (ready_at) WHERE status = 'ready';
CREATE INDEX sessions_running_lease_idx ON sessions (lease_expires_at) WHERE status = 'running';
CREATE INDEX sessions_lease_owner_idx ON sessions (lease_owner) WHERE lease_owner IS NOT NULL;

CREATE TABLE turns (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    session_id       uuid        NOT NULL REFERENCES sessions (id),
    seq              bigint      NOT NULL CHECK (seq > 0),
    idempotency_key  text        NOT NULL,
    input            jsonb       NOT NULL,
    status           text        NOT NULL DEFAULT 'queued'
                                 CHECK (status IN ('queued', 'running', 'parked', 'succeeded',
                                                   'failed', 'cancelled', 'interrupted')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    enqueued_at      timestamptz NOT NULL DEFAULT now(),
    first_claimed_at timestamptz,
    started_at       timestamptz,
    finished_at      timestamptz,
    worker_id        text,
    output           jsonb,
    error            text,
    UNIQUE (session_id, idempotency_key),
    UNIQUE (session_id, seq),
    CHECK ((status IN ('succeeded', 'failed', 'cancelled', 'interrupted'))
           = (finished_at IS NOT NULL))
);

-- The next turn of a session: the oldest one not yet finished.
CREATE INDEX turns_open_idx ON turns (session_id, seq)
    WHERE status IN ('queued', 'running', 'parked');

CREATE TABLE events (
    session_id uuid        NOT NULL REFERENCES sessions (id),
    seq        bigint      NOT NULL CHECK (seq > 0),
    turn_id    uuid        REFERENCES turns (id),
    kind       text        NOT NULL
                           CHECK (kind IN ('turn.started', 'tool.called', 'tool.returned',
                                           'model.called', 'model.returned',
                                           'approval.requested', 'approval.answered',
                                           'effect.unknown', 'turn.released', 'message',
                                           'turn.completed', 'turn.failed',
                                           'turn.cancelled', 'turn.interrupted')),
    payload    jsonb       NOT NULL DEFAULT '{}',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session_id, seq)
);

CREATE TABLE steps (
    session_id     uuid        NOT NULL REFERENCES sessions (id),
    turn_id        uuid        NOT NULL REFERENCES turns (id),
    step_key       text        NOT NULL,
    kind           text        NOT NULL CHECK (kind IN ('model', 'tool', 'answer')),
    status         text        NOT NULL CHECK (status IN ('started', 'committed', 'unknown')),
    request_digest text        NOT NULL,
    result         jsonb,
    lease_epoch    bigint      NOT NULL,
    started_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at    timestamptz,
    PRIMARY KEY (session_id, turn_id, step_key),
    CHECK ((status = 'committed') = (result IS NOT NULL)),
    CHECK ((status = 'started') = (finished_at IS NULL))
);
