-- Stint schema 0009: provider quotas shared by every worker.

-- One row per quota scope (a provider account, or a slice of one): its limits
-- per window (NULL = unlimited; rpm and tpm are per window_seconds, so per
-- minute with the default window) and its exact running counters. The window
-- lives here, not in each worker's environment, so every worker agrees on it. Requests and
-- tokens are counted when reserved, then move from in-flight to reconciled
-- (the provider reported its usage: the over-estimate is refunded, an
-- under-estimate is debt) or to unknown (no usage known: the estimate stays
-- counted). The CHECKs keep the books balanced on every row, always.
CREATE TABLE quota_scopes (
    scope               text        PRIMARY KEY
                                    CHECK (scope ~ '^[A-Za-z0-9][A-Za-z0-9._:/-]{0,99}$'),
    rpm                 integer     CHECK (rpm > 0),
    tpm                 bigint      CHECK (tpm > 0),
    concurrency         integer     CHECK (concurrency > 0),
    window_seconds      real        NOT NULL DEFAULT 60 CHECK (window_seconds BETWEEN 0.1 AND 86400),
    requests_reserved   bigint      NOT NULL DEFAULT 0,
    requests_reconciled bigint      NOT NULL DEFAULT 0,
    requests_unknown    bigint      NOT NULL DEFAULT 0,
    requests_in_flight  bigint      NOT NULL DEFAULT 0 CHECK (requests_in_flight >= 0),
    tokens_reserved     bigint      NOT NULL DEFAULT 0,
    tokens_reconciled   bigint      NOT NULL DEFAULT 0,
    tokens_refunded     bigint      NOT NULL DEFAULT 0,
    tokens_debt         bigint      NOT NULL DEFAULT 0,
    tokens_unknown      bigint      NOT NULL DEFAULT 0,
    tokens_in_flight    bigint      NOT NULL DEFAULT 0 CHECK (tokens_in_flight >= 0),
    deferrals           bigint      NOT NULL DEFAULT 0,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    CHECK (requests_reserved = requests_reconciled + requests_unknown + requests_in_flight),
    CHECK (tokens_reserved
           = tokens_reconciled + tokens_refunded - tokens_debt + tokens_unknown + tokens_in_flight)
);

-- The ledger: one row per provider request, keyed by the turn's step, turn
-- attempt and try (so a retried reserve statement finds its row instead of
-- counting twice). A row occupies its scope's window from reservation until
-- one window after it settles: a later request can only reach the provider a
-- full window after this one was answered, whatever the clocks in between.
CREATE TABLE quota_reservations (
    scope            text        NOT NULL REFERENCES quota_scopes (scope) ON DELETE CASCADE,
    key              text        NOT NULL CHECK (length(key) BETWEEN 1 AND 500),
    session_id       uuid        NOT NULL,
    turn_id          uuid        NOT NULL REFERENCES turns (id),
    lease_epoch      bigint      NOT NULL,
    estimated_tokens bigint      NOT NULL CHECK (estimated_tokens >= 0),
    actual_tokens    bigint      CHECK (actual_tokens >= 0),
    state            text        NOT NULL DEFAULT 'reserved'
                                 CHECK (state IN ('reserved', 'reconciled', 'unknown')),
    reserved_at      timestamptz NOT NULL,
    settled_at       timestamptz,
    PRIMARY KEY (scope, key),
    CHECK ((state = 'reserved') = (settled_at IS NULL)),
    CHECK ((state = 'reconciled') = (actual_tokens IS NOT NULL))
);
-- A reservation's window use: open ones, and settled ones by settle time.
CREATE INDEX quota_reservations_open_idx ON quota_reservations (scope, reserved_at)
    WHERE state = 'reserved';
CREATE INDEX quota_reservations_settled_idx ON quota_reservations (scope, settled_at)
    WHERE state <> 'reserved';
-- Retention deletes a pruned turn's reservations.
CREATE INDEX quota_reservations_turn_idx ON quota_reservations (turn_id);

-- A turn that cannot get quota soon is handed back with a not-before time
-- (sessions.ready_at in the future; the claim takes ready_at <= now() only).
ALTER TABLE events DROP CONSTRAINT events_kind_check;
ALTER TABLE events ADD CONSTRAINT events_kind_check
    CHECK (kind IN ('turn.started', 'tool.called', 'tool.returned',
                    'model.called', 'model.returned',
                    'approval.requested', 'approval.answered',
                    'effect.unknown', 'turn.released', 'turn.deferred', 'message',
                    'turn.completed', 'turn.failed',
                    'turn.cancelled', 'turn.interrupted',
                    'message.delta', 'model.retried', 'history.truncated'));
