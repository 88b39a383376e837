-- Stint schema 0013: durable waits (timers, signals) and child sessions (issue 23, items 1-3).

-- A wait is a durable step of kind 'wait': recorded started when the turn first
-- reaches it, committed with its outcome (elapsed, a signal, a timeout, the
-- children's ends) when it is over. While it waits the turn is queued and its
-- session ready with ready_at at the wait's deadline ('infinity' without one),
-- so no slot is held and the claim's own ready_at test wakes it.
-- A spawn is a durable step of kind 'spawn': committed with the child's id in
-- the statement that creates the child.
ALTER TABLE steps DROP CONSTRAINT steps_kind_check;
ALTER TABLE steps ADD CONSTRAINT steps_kind_check
    CHECK (kind IN ('model', 'tool', 'answer', 'wait', 'spawn'));

-- What a started wait waits for, and until when (the database clock, fixed when
-- the wait is first reached: a replay keeps the same deadline).
CREATE TABLE waits (
    session_id uuid        NOT NULL,
    turn_id    uuid        NOT NULL,
    step_key   text        NOT NULL,
    kind       text        NOT NULL CHECK (kind IN ('timer', 'signal', 'children')),
    name       text,
    children   uuid[],
    wait_all   boolean,
    deadline   timestamptz,
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (session_id, turn_id, step_key),
    FOREIGN KEY (session_id, turn_id, step_key)
        REFERENCES steps (session_id, turn_id, step_key) ON DELETE CASCADE,
    CHECK (kind <> 'timer' OR deadline IS NOT NULL),
    CHECK ((kind = 'signal') = (name IS NOT NULL)),
    CHECK ((kind = 'children') = (children IS NOT NULL AND wait_all IS NOT NULL))
);

-- Signals sent to a session, kept until a wait on their name consumes them:
-- the oldest unconsumed signal of a name goes to the first wait on that name,
-- each exactly once (consumed_* is set in the statement that commits the wait).
CREATE TABLE signals (
    id                uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    session_id        uuid        NOT NULL REFERENCES sessions (id),
    name              text        NOT NULL,
    idempotency_key   text        NOT NULL,
    payload           jsonb       NOT NULL,
    actor             jsonb       NOT NULL DEFAULT '{}',
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    consumed_turn_id  uuid,
    consumed_step_key text,
    consumed_at       timestamptz,
    UNIQUE (session_id, idempotency_key),
    CHECK ((consumed_at IS NULL) = (consumed_turn_id IS NULL)),
    CHECK ((consumed_at IS NULL) = (consumed_step_key IS NULL))
);
CREATE INDEX signals_pending_idx ON signals (session_id, name, created_at)
    WHERE consumed_at IS NULL;

ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('turn.started', 'tool.called', 'tool.returned',
                    'model.called', 'model.returned',
                    'approval.requested', 'approval.answered',
                    'effect.unknown', 'turn.released', 'turn.deferred', 'message',
                    'turn.completed', 'turn.failed',
                    'turn.cancelled', 'turn.interrupted',
                    'message.delta', 'model.retried', 'history.truncated',
                    'control.requested',
                    'wait.started', 'wait.finished', 'signal.received',
                    'child.started', 'child.finished'));

-- Child sessions: a session spawned by a turn of another (ctx.spawn). depth is
-- the parent's + 1 (0: a session made by a client), checked against
-- admission_limits.max_depth at the spawn.
ALTER TABLE sessions ADD COLUMN parent_id uuid REFERENCES sessions (id);
ALTER TABLE sessions ADD COLUMN depth integer NOT NULL DEFAULT 0 CHECK (depth >= 0);
ALTER TABLE sessions ADD CONSTRAINT sessions_parent_depth_check
    CHECK ((parent_id IS NULL) = (depth = 0));
CREATE INDEX sessions_parent_idx ON sessions (parent_id) WHERE parent_id IS NOT NULL;

-- One row per spawn: which turn (and step) of the parent made which child and
-- its first turn, what a cancel of the parent does to it, and, once the
-- child's turn ended, how it ended (reported_at: child.finished is in the
-- parent's log). Turn ids carry no foreign key: retention prunes old turns.
CREATE TABLE children (
    parent_id      uuid        NOT NULL REFERENCES sessions (id),
    parent_turn_id uuid        NOT NULL,
    step_key       text        NOT NULL,
    child_id       uuid        NOT NULL UNIQUE REFERENCES sessions (id),
    child_turn_id  uuid        NOT NULL,
    on_cancel      text        NOT NULL CHECK (on_cancel IN ('cascade', 'abandon')),
    status         text        CHECK (status IN ('succeeded', 'failed', 'cancelled',
                                                 'interrupted')),
    output         jsonb,
    error          text,
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    reported_at    timestamptz,
    PRIMARY KEY (parent_id, parent_turn_id, step_key),
    CHECK ((reported_at IS NULL) = (status IS NULL))
);
CREATE INDEX children_unreported_idx ON children (child_turn_id) WHERE reported_at IS NULL;

-- Limits on trees, per tenant with the '*' row's as defaults (NULL: unlimited):
-- how deep (max_depth: a child of a session at that depth is refused) and how
-- many children one turn may spawn (max_fanout).
ALTER TABLE admission_limits ADD COLUMN max_depth integer CHECK (max_depth > 0);
ALTER TABLE admission_limits ADD COLUMN max_fanout integer CHECK (max_fanout > 0);
