-- Stint schema 0008: observability (traces, the elected sampler, operator keys).

-- The producer's W3C trace context, stored with the turn by `stint enqueue` or
-- the API when a span is active or a traceparent is given, so the worker's turn
-- span continues the producer's trace. Only the header's own shape is accepted
-- (version-trace_id-parent_id-flags, lowercase hex): it is not a place for text.
ALTER TABLE turns ADD COLUMN traceparent text
    CHECK (traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$');

-- Turns finished in a time range (what the sampler counts each interval, the
-- dashboard's turns/s) come from turns_finished_idx, which retention (0007)
-- already keeps for the pruner.

-- One elected process per job, by a row with an expiry: the holder renews it
-- each interval; another process takes it over once it has expired (its holder
-- died) or was given up (a draining worker). Only the holder runs the job.
CREATE TABLE leaders (
    name       text        PRIMARY KEY CHECK (name ~ '^[a-z_]{1,40}$'),
    holder     text        NOT NULL,
    since      timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- What the elected sampler read, one row per interval, in a ring of a fixed
-- number of slots (the newest sample overwrites the oldest: the table never
-- grows and nothing needs the DELETE privilege the app role does not have).
-- Queue depth and fleet figures are read here by the dashboard and exported by
-- the sampler's /metrics, instead of every worker or page counting them live.
CREATE TABLE stats_samples (
    slot             integer     PRIMARY KEY CHECK (slot >= 0),
    n                bigint      NOT NULL CHECK (n > 0),
    at               timestamptz NOT NULL,
    sampled_by       text        NOT NULL,
    window_seconds   real        NOT NULL CHECK (window_seconds > 0),
    ready_sessions   integer     NOT NULL CHECK (ready_sessions >= 0),
    queued_turns     integer     NOT NULL CHECK (queued_turns >= 0),
    running_turns    integer     NOT NULL CHECK (running_turns >= 0),
    parked_turns     integer     NOT NULL CHECK (parked_turns >= 0),
    oldest_ready_age real,
    live_workers     integer     NOT NULL CHECK (live_workers >= 0),
    total_slots      integer     NOT NULL CHECK (total_slots >= 0),
    busy_slots       integer     NOT NULL CHECK (busy_slots >= 0),
    turns_finished   integer     NOT NULL CHECK (turns_finished >= 0),
    turns_failed     integer     NOT NULL CHECK (turns_failed >= 0)
);

CREATE INDEX stats_samples_n_idx ON stats_samples (n);

-- Operator keys see every tenant in the dashboard (and may read the API's
-- /metrics); a tenant's key sees only its tenant, as on every /v1 route.
ALTER TABLE api_keys ADD COLUMN operator boolean NOT NULL DEFAULT false;
