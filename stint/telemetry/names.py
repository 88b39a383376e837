"""Every span, attribute and metric name Stint emits, in one module.

Span attributes and metric labels carry ids, statuses, kinds and model names
only: never an input, an answer, a URL, a tenant or a secret. Metric labels
carry no id of any kind (a session or turn id per label would be a series
per turn).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "API_EVENT_STREAMS",
    "API_HUB_NOTIFICATIONS",
    "API_HUB_RECONNECTS",
    "API_REQUESTS",
    "API_REQUEST_SECONDS",
    "BATCHES",
    "BATCH_LARGEST",
    "BATCH_RERUN_ALONE",
    "BATCH_STATEMENTS",
    "CLAIMED_SESSIONS",
    "CLAIMS",
    "CLAIM_FAILURES",
    "CLAIM_SECONDS",
    "FLEET_SLOTS",
    "FLEET_SLOTS_BUSY",
    "FLEET_WORKERS",
    "GEN_AI_OPERATION",
    "GEN_AI_REQUEST_MODEL",
    "GEN_AI_RESPONSE_FINISH_REASONS",
    "GEN_AI_RESPONSE_MODEL",
    "GEN_AI_USAGE_CACHED_TOKENS",
    "GEN_AI_USAGE_INPUT_TOKENS",
    "GEN_AI_USAGE_OUTPUT_TOKENS",
    "LEASES_LOST",
    "LEASE_RENEWALS",
    "LEASE_RENEWAL_FAILURES",
    "METRICS",
    "MODEL_CALLS",
    "MODEL_TOKENS",
    "POOL_CONNECTIONS",
    "POOL_IDLE",
    "POOL_REQUESTS",
    "POOL_REQUESTS_QUEUED",
    "POOL_REQUESTS_WAITING",
    "POOL_WAIT_SECONDS",
    "QUEUE_OLDEST_READY_SECONDS",
    "QUEUE_PARKED_TURNS",
    "QUEUE_QUEUED_TURNS",
    "QUEUE_READY_SESSIONS",
    "QUEUE_RUNNING_TURNS",
    "QUEUE_SAMPLE_AGE_SECONDS",
    "QUOTA_DEFERRALS",
    "QUOTA_IN_FLIGHT",
    "QUOTA_REQUESTS",
    "QUOTA_TOKENS",
    "QUOTA_WAITS",
    "QUOTA_WAIT_SECONDS",
    "QUOTA_WINDOW",
    "SAMPLER_LEADER",
    "SLOTS",
    "SLOTS_BUSY",
    "SPAN_CLAIM",
    "SPAN_ENQUEUE",
    "SPAN_MODEL",
    "SPAN_STEP",
    "SPAN_TURN",
    "TURNS_FINISHED",
    "TURNS_HANDED_BACK",
    "TURNS_PARKED",
    "TURNS_STARTED",
    "TURN_QUEUE_WAIT_SECONDS",
    "TURN_SECONDS",
    "UNKNOWN_EFFECTS",
    "WORKER_INFO",
    "MetricDoc",
]

# ----------------------------------------------------------------------- spans

SPAN_ENQUEUE = "stint.enqueue"  # a producer queues a turn (CLI or API)
SPAN_CLAIM = "stint.claim"  # one claim statement of a worker
SPAN_TURN = "stint.turn"  # one attempt of a turn, a child of the producer's span
SPAN_STEP = "stint.step"  # one durable step: model call, tool call or question
SPAN_MODEL = "stint.model"  # one provider call of the agents harness (retries inside it)

# OpenTelemetry GenAI semantic conventions, set on SPAN_MODEL.
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHED_TOKENS = "gen_ai.usage.cache_read.input_tokens"

# --------------------------------------------------------------- worker metrics

WORKER_INFO = "stint_worker_info"  # 1, labelled with the version
SLOTS = "stint_worker_slots"
SLOTS_BUSY = "stint_worker_slots_busy"
CLAIMS = "stint_claims_total"  # claim statements run
CLAIM_FAILURES = "stint_claim_failures_total"
CLAIMED_SESSIONS = "stint_claimed_sessions_total"
CLAIM_SECONDS = "stint_claim_duration_seconds"
TURNS_STARTED = "stint_turns_started_total"
TURNS_FINISHED = "stint_turns_finished_total"  # label: status
TURNS_PARKED = "stint_turns_parked_total"
TURNS_HANDED_BACK = "stint_turns_handed_back_total"  # label: reason (drain, error, quota, fenced)
TURN_SECONDS = "stint_turn_duration_seconds"  # label: status
TURN_QUEUE_WAIT_SECONDS = "stint_turn_queue_wait_seconds"
LEASE_RENEWALS = "stint_lease_renewals_total"
LEASE_RENEWAL_FAILURES = "stint_lease_renewal_failures_total"
LEASES_LOST = "stint_leases_lost_total"
UNKNOWN_EFFECTS = "stint_unknown_effects_total"
MODEL_CALLS = "stint_model_calls_total"  # label: scope
MODEL_TOKENS = "stint_model_tokens_total"  # labels: scope, kind (input, output, cached)
QUOTA_WAITS = "stint_quota_waits_total"  # label: scope
QUOTA_WAIT_SECONDS = "stint_quota_wait_seconds"  # label: scope
BATCHES = "stint_batches_total"
BATCH_STATEMENTS = "stint_batch_statements_total"
BATCH_RERUN_ALONE = "stint_batch_rerun_alone_total"
BATCH_LARGEST = "stint_batch_largest"
# The worker's one small pool (psycopg_pool's own counters): how often a statement
# waited for a connection and for how long, the figure that sizes STINT_POOL_SIZE.
POOL_CONNECTIONS = "stint_pool_connections"
POOL_IDLE = "stint_pool_idle_connections"
POOL_REQUESTS = "stint_pool_requests_total"
POOL_REQUESTS_QUEUED = "stint_pool_requests_queued_total"
POOL_REQUESTS_WAITING = "stint_pool_requests_waiting"
POOL_WAIT_SECONDS = "stint_pool_wait_seconds_total"

# Read by the one elected sampler; exported only by the worker that holds it.
SAMPLER_LEADER = "stint_sampler_leader"
QUEUE_READY_SESSIONS = "stint_queue_ready_sessions"
QUEUE_QUEUED_TURNS = "stint_queue_queued_turns"
QUEUE_RUNNING_TURNS = "stint_queue_running_turns"
QUEUE_PARKED_TURNS = "stint_queue_parked_turns"
QUEUE_OLDEST_READY_SECONDS = "stint_queue_oldest_ready_seconds"
QUEUE_SAMPLE_AGE_SECONDS = "stint_queue_sample_age_seconds"
# The provider quota scopes' books (the elected sampler's reading; labels: scope,
# and state or unit): cumulative requests and tokens by how they were settled,
# what is in flight and in the window now, and turns handed back.
QUOTA_REQUESTS = "stint_quota_requests_total"  # counter: state reserved|reconciled|unknown
# counter: state reserved|reconciled|refunded|debt|unknown
QUOTA_TOKENS = "stint_quota_tokens_total"
QUOTA_IN_FLIGHT = "stint_quota_in_flight"  # gauge: unit requests|tokens
QUOTA_WINDOW = "stint_quota_window"  # gauge: unit requests|tokens
QUOTA_DEFERRALS = "stint_quota_deferrals_total"  # counter
FLEET_WORKERS = "stint_fleet_live_workers"
FLEET_SLOTS = "stint_fleet_slots"
FLEET_SLOTS_BUSY = "stint_fleet_slots_busy"

# ------------------------------------------------------------------ API metrics

API_REQUESTS = "stint_api_requests_total"  # labels: method, route (the template), status
API_REQUEST_SECONDS = "stint_api_request_duration_seconds"  # labels: method, route
API_EVENT_STREAMS = "stint_api_event_streams"
API_HUB_NOTIFICATIONS = "stint_api_hub_notifications_total"
API_HUB_RECONNECTS = "stint_api_hub_reconnects_total"


# ------------------------------------------------------- what each metric says

_WORKER = "worker"
_SAMPLER = "worker (elected sampler only)"
_API = "api"


@dataclass(frozen=True)
class MetricDoc:
    """One metric as docs/reference/metrics.md describes it (a test holds the type
    and the labels to what the registries export)."""

    name: str
    type: str  # counter, gauge or histogram
    labels: tuple[str, ...]
    source: str  # the process exporting it: _WORKER, _SAMPLER or _API
    description: str


METRICS: tuple[MetricDoc, ...] = (
    MetricDoc(WORKER_INFO, "gauge", ("version",), _WORKER, "1, labelled with the worker's version"),
    MetricDoc(SLOTS, "gauge", (), _WORKER, "this worker's slots"),
    MetricDoc(SLOTS_BUSY, "gauge", (), _WORKER, "this worker's slots holding a session now"),
    MetricDoc(CLAIMS, "counter", (), _WORKER, "claim statements run"),
    MetricDoc(CLAIM_FAILURES, "counter", (), _WORKER, "claim statements that failed"),
    MetricDoc(CLAIMED_SESSIONS, "counter", (), _WORKER, "sessions the claim statements claimed"),
    MetricDoc(CLAIM_SECONDS, "histogram", (), _WORKER, "claim statement latency"),
    MetricDoc(
        TURNS_STARTED,
        "counter",
        (),
        _WORKER,
        "turn attempts started (by a claim, or by the statement that finished the slot's "
        "previous turn)",
    ),
    MetricDoc(
        TURNS_FINISHED,
        "counter",
        ("status",),
        _WORKER,
        "turns finished: succeeded, failed, cancelled, interrupted",
    ),
    MetricDoc(TURN_SECONDS, "histogram", ("status",), _WORKER, "one attempt, start to finish"),
    MetricDoc(
        TURN_QUEUE_WAIT_SECONDS,
        "histogram",
        (),
        _WORKER,
        "enqueue to first start, by the database clock",
    ),
    MetricDoc(TURNS_PARKED, "counter", (), _WORKER, "turns parked on a question"),
    MetricDoc(
        TURNS_HANDED_BACK,
        "counter",
        ("reason",),
        _WORKER,
        "turns returned to the queue unfinished; reason: drain, error, quota, fenced",
    ),
    MetricDoc(LEASE_RENEWALS, "counter", (), _WORKER, "lease renewal statements (the heartbeat)"),
    MetricDoc(LEASE_RENEWAL_FAILURES, "counter", (), _WORKER, "lease renewals that failed"),
    MetricDoc(LEASES_LOST, "counter", (), _WORKER, "leases taken over by another worker"),
    MetricDoc(
        UNKNOWN_EFFECTS,
        "counter",
        (),
        _WORKER,
        "steps marked unknown (the effect may or may not have happened)",
    ),
    MetricDoc(
        MODEL_CALLS,
        "counter",
        ("scope",),
        _WORKER,
        "model calls; scope is the quota scope the call counts against where quotas are "
        "configured, else the model name",
    ),
    MetricDoc(
        MODEL_TOKENS,
        "counter",
        ("scope", "kind"),
        _WORKER,
        "tokens the provider reported; kind: input, output, cached",
    ),
    MetricDoc(
        QUOTA_WAITS,
        "counter",
        ("scope",),
        _WORKER,
        "this worker's waits for provider quota: each wait in a slot, and each hand-back",
    ),
    MetricDoc(
        QUOTA_WAIT_SECONDS,
        "histogram",
        ("scope",),
        _WORKER,
        "time waited for provider quota (a hand-back: its not-before distance)",
    ),
    MetricDoc(BATCHES, "counter", (), _WORKER, "group-commit batches sent"),
    MetricDoc(BATCH_STATEMENTS, "counter", (), _WORKER, "statements sent in batches"),
    MetricDoc(
        BATCH_RERUN_ALONE, "counter", (), _WORKER, "statements re-run alone after a batch failed"
    ),
    MetricDoc(BATCH_LARGEST, "gauge", (), _WORKER, "the largest batch so far"),
    MetricDoc(
        POOL_CONNECTIONS,
        "gauge",
        (),
        _WORKER,
        "connections the worker's pool (STINT_POOL_SIZE) holds",
    ),
    MetricDoc(POOL_IDLE, "gauge", (), _WORKER, "pool connections idle now"),
    MetricDoc(
        POOL_REQUESTS_WAITING, "gauge", (), _WORKER, "statements waiting for a connection now"
    ),
    MetricDoc(POOL_REQUESTS, "counter", (), _WORKER, "connections borrowed from the pool"),
    MetricDoc(
        POOL_REQUESTS_QUEUED, "counter", (), _WORKER, "borrows that waited for a free connection"
    ),
    MetricDoc(
        POOL_WAIT_SECONDS,
        "counter",
        (),
        _WORKER,
        "seconds spent waiting for a pool connection (`make bench` reports it per turn)",
    ),
    MetricDoc(
        SAMPLER_LEADER, "gauge", (), _WORKER, "1 on the one worker elected to sample the queue"
    ),
    MetricDoc(QUEUE_READY_SESSIONS, "gauge", (), _SAMPLER, "sessions waiting for a slot"),
    MetricDoc(QUEUE_QUEUED_TURNS, "gauge", (), _SAMPLER, "turns queued"),
    MetricDoc(QUEUE_RUNNING_TURNS, "gauge", (), _SAMPLER, "turns running"),
    MetricDoc(QUEUE_PARKED_TURNS, "gauge", (), _SAMPLER, "turns parked on a question"),
    MetricDoc(
        QUEUE_OLDEST_READY_SECONDS,
        "gauge",
        (),
        _SAMPLER,
        "age of the oldest ready session (absent when none is ready)",
    ),
    MetricDoc(
        QUEUE_SAMPLE_AGE_SECONDS, "gauge", (), _SAMPLER, "seconds since the sample was taken"
    ),
    MetricDoc(FLEET_WORKERS, "gauge", (), _SAMPLER, "live workers"),
    MetricDoc(FLEET_SLOTS, "gauge", (), _SAMPLER, "slots of live workers"),
    MetricDoc(FLEET_SLOTS_BUSY, "gauge", (), _SAMPLER, "sessions held by a worker"),
    MetricDoc(
        QUOTA_REQUESTS,
        "counter",
        ("scope", "state"),
        _SAMPLER,
        "each quota scope's requests, exact and fleet-wide; state: reserved, reconciled, unknown",
    ),
    MetricDoc(
        QUOTA_TOKENS,
        "counter",
        ("scope", "state"),
        _SAMPLER,
        "each quota scope's tokens; state: reserved, reconciled, refunded, debt, unknown",
    ),
    MetricDoc(
        QUOTA_IN_FLIGHT,
        "gauge",
        ("scope", "unit"),
        _SAMPLER,
        "reserved and not yet settled; unit: requests, tokens",
    ),
    MetricDoc(
        QUOTA_WINDOW,
        "gauge",
        ("scope", "unit"),
        _SAMPLER,
        "counted in the scope's window now; unit: requests, tokens",
    ),
    MetricDoc(
        QUOTA_DEFERRALS, "counter", ("scope",), _SAMPLER, "turns handed back to wait for quota"
    ),
    MetricDoc(
        API_REQUESTS,
        "counter",
        ("method", "route", "status"),
        _API,
        "HTTP requests answered; route is the template (`/v1/sessions/{session_id}`)",
    ),
    MetricDoc(
        API_REQUEST_SECONDS,
        "histogram",
        ("method", "route"),
        _API,
        "HTTP request latency, to the response head (streams end later)",
    ),
    MetricDoc(API_EVENT_STREAMS, "gauge", (), _API, "Server-Sent Events streams open"),
    MetricDoc(API_HUB_NOTIFICATIONS, "counter", (), _API, "notifications the LISTEN hub received"),
    MetricDoc(API_HUB_RECONNECTS, "counter", (), _API, "times the hub lost its LISTEN connection"),
)
"""Every metric, in the order docs/reference/metrics.md lists them."""
