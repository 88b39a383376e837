"""Every span, attribute and metric name Stint emits, in one module.

Span attributes and metric labels carry ids, statuses, kinds and model names
only: never an input, an answer, a URL, a tenant or a secret. Metric labels
carry no id of any kind (a session or turn id per label would be a series
per turn).
"""

from __future__ import annotations

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
