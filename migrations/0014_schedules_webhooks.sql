-- Stint schema 0014: schedules (turns enqueued on a cron or an interval, exactly once
-- per tick across the fleet) and webhooks (per-tenant endpoints, an outbox written by the
-- event log's one writer, and the delivery log). docs/design.md, "Schedules and webhooks".

CREATE TABLE schedules (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant           text        CHECK (tenant ~ '^[A-Za-z0-9._-]{1,100}$'),
    name             text        NOT NULL CHECK (name ~ '^[A-Za-z0-9._:/-]{1,200}$'),
    cron             text        CHECK (length(cron) BETWEEN 1 AND 200),
    interval_seconds double precision CHECK (interval_seconds >= 1 AND interval_seconds <= 31622400),
    timezone         text        NOT NULL DEFAULT 'UTC' CHECK (length(timezone) BETWEEN 1 AND 100),
    anchor_at        timestamptz NOT NULL DEFAULT now(),
    session_id       uuid        REFERENCES sessions (id),
    pin              text,
    input            jsonb       NOT NULL,
    timeout_seconds  double precision CHECK (timeout_seconds > 0),
    busy             text        NOT NULL DEFAULT 'enqueue'
                                 CHECK (busy IN ('enqueue', 'reject', 'interrupt')),
    catch_up         integer     NOT NULL DEFAULT 0 CHECK (catch_up BETWEEN 0 AND 1000),
    paused_at        timestamptz,
    next_run_at      timestamptz NOT NULL,
    last_tick_at     timestamptz,
    ticks_enqueued   bigint      NOT NULL DEFAULT 0,
    ticks_skipped    bigint      NOT NULL DEFAULT 0,
    ticks_refused    bigint      NOT NULL DEFAULT 0,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((cron IS NULL) <> (interval_seconds IS NULL)),
    CHECK (session_id IS NULL OR pin IS NULL)
);

-- One name per tenant: `stint schedule create` and POST /v1/schedules refuse a second.
CREATE UNIQUE INDEX schedules_name_idx ON schedules ((coalesce(tenant, '')), name);
-- What the schedulers poll: due, unpaused schedules, earliest first.
CREATE INDEX schedules_due_idx ON schedules (next_run_at) WHERE paused_at IS NULL;
CREATE INDEX schedules_session_idx ON schedules (session_id) WHERE session_id IS NOT NULL;

-- Each tick a scheduler ran: the primary key is what makes a tick run at most once
-- across the fleet, whatever any worker believes.
CREATE TABLE schedule_ticks (
    schedule_id uuid        NOT NULL REFERENCES schedules (id) ON DELETE CASCADE,
    tick_at     timestamptz NOT NULL,
    outcome     text        NOT NULL DEFAULT 'enqueued'
                            CHECK (outcome IN ('enqueued', 'busy', 'refused')),
    session_id  uuid,
    turn_id     uuid,
    detail      text,
    worker      text        NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (schedule_id, tick_at)
);
CREATE INDEX schedule_ticks_created_idx ON schedule_ticks (created_at);

-- Webhook endpoints: a tenant's subscription of one URL to some event kinds. The kinds
-- are checked against the vocabulary (EventKind) at every door, not here, so kinds added
-- later need no migration. The secret is AES-256-GCM ciphertext under STINT_WEBHOOK_KEY
-- (key_id: that key's fingerprint); it is never stored in the clear.
CREATE TABLE webhook_endpoints (
    id              uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant          text        NOT NULL CHECK (tenant ~ '^[A-Za-z0-9._-]{1,100}$'),
    url             text        NOT NULL CHECK (length(url) BETWEEN 8 AND 2000),
    kinds           text[]      NOT NULL CHECK (cardinality(kinds) BETWEEN 1 AND 64),
    description     text        CHECK (length(description) <= 200),
    secret_cipher   bytea       NOT NULL,
    key_id          text        NOT NULL,
    failing_since   timestamptz,
    disabled_at     timestamptz,
    disabled_reason text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now()
);
-- The outbox write looks a tenant's enabled endpoints up per appended event.
CREATE INDEX webhook_endpoints_tenant_idx ON webhook_endpoints (tenant) WHERE disabled_at IS NULL;

-- The outbox and the delivery log in one. No foreign keys: the row is written by the
-- statement that appends the event (log_append), which must never wait for the lock of
-- an endpoint being deleted, nor fail with it; events are pruned by retention.
CREATE TABLE webhook_deliveries (
    id               uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    endpoint_id      uuid        NOT NULL,
    session_id       uuid        NOT NULL,
    seq              bigint      NOT NULL,
    kind             text        NOT NULL,
    status           text        NOT NULL DEFAULT 'pending'
                                 CHECK (status IN ('pending', 'delivered', 'failed')),
    attempts         integer     NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    next_attempt_at  timestamptz NOT NULL DEFAULT now(),
    last_attempt_at  timestamptz,
    last_status_code integer,
    last_error       text,
    claimed_by       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    delivered_at     timestamptz,
    CHECK ((status = 'delivered') = (delivered_at IS NOT NULL))
);
-- What the deliverers poll: pending deliveries by due time.
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at)
    WHERE status = 'pending';
-- An endpoint's delivery log, newest first.
CREATE INDEX webhook_deliveries_endpoint_idx ON webhook_deliveries (endpoint_id, created_at DESC);
-- The checks: an event's deliveries.
CREATE INDEX webhook_deliveries_event_idx ON webhook_deliveries (session_id, seq);
