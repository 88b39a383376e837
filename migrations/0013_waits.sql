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
