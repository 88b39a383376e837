"""Prometheus metrics: one registry per process, and the families each process exports.

The registry is our own, not prometheus_client's global one, so it holds no
process, platform or GC collectors: the worker's /metrics says what Stint did,
and a process's CPU and memory are the orchestrator's to report (cAdvisor,
the kubelet). Event counts and histograms are recorded as things happen;
figures that are state (slots, batcher totals, the elected sampler's queue
reading) are read at scrape time by a collector, so they are never stale.

Counting and the text format are ``stint.telemetry.exposition``'s (not
prometheus_client's, whose imports cost a worker 2.8 MiB); only a process that
serves metrics imports this module (see ``stint.worker.telemetry.enable_metrics``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from stint.telemetry import names
from stint.telemetry.exposition import (
    CONTENT_TYPE,
    Counter,
    Family,
    Histogram,
    Registry,
    counter,
    gauge,
)

__all__ = [
    "CONTENT_TYPE",
    "ApiMetrics",
    "ApiState",
    "QueueFigures",
    "WorkerMetrics",
    "WorkerState",
    "new_registry",
    "render",
]

_CLAIM_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)
_TURN_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0)
_WAIT_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)
_REQUEST_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 30.0)


def new_registry() -> Registry:
    """A registry of our own: no process, platform or GC collectors."""
    return Registry()


def render(registry: Registry) -> bytes:
    """The registry in the Prometheus text exposition format (``CONTENT_TYPE``)."""
    return registry.render()


@dataclass(frozen=True)
class QuotaBooks:
    """One provider quota scope's books, as the elected sampler read them:
    ``requests`` and ``tokens`` by state, ``in_flight`` and ``window`` by unit."""

    scope: str
    requests: Mapping[str, int]
    tokens: Mapping[str, int]
    in_flight: Mapping[str, int]
    window: Mapping[str, int]
    deferrals: int


@dataclass(frozen=True)
class QueueFigures:
    """The elected sampler's latest reading of the queue and the fleet."""

    age_seconds: float
    ready_sessions: int
    queued_turns: int
    running_turns: int
    parked_turns: int
    oldest_ready_age: float | None
    live_workers: int
    total_slots: int
    busy_slots: int
    quotas: Sequence[QuotaBooks] = ()


@dataclass(frozen=True)
class PoolFigures:
    """The worker pool's counters at scrape time (psycopg_pool's ``get_stats``)."""

    connections: int
    idle: int
    waiting: int
    requests: int
    queued: int
    wait_seconds: float


@dataclass(frozen=True)
class WorkerState:
    """A worker's state at scrape time."""

    slots: int
    busy: int
    batches: int
    statements: int
    rerun_alone: int
    largest_batch: int
    leader: bool
    pool: PoolFigures
    queue: QueueFigures | None


class _StateCollector:
    """The worker's state families, read at each scrape (which families
    depends on leadership: only the elected sampler reports the queue)."""

    def __init__(self, read: Callable[[], WorkerState]) -> None:
        self._read = read

    def collect(self) -> Iterator[Family]:
        state = self._read()
        yield gauge(names.SLOTS, "Slots this worker runs turns in", state.slots)
        yield gauge(names.SLOTS_BUSY, "Slots holding a session now", state.busy)
        yield counter(names.BATCHES, "Group-commit batches sent", state.batches)
        yield counter(names.BATCH_STATEMENTS, "Statements sent in batches", state.statements)
        yield counter(
            names.BATCH_RERUN_ALONE,
            "Statements re-run alone after a batch failed",
            state.rerun_alone,
        )
        yield gauge(names.BATCH_LARGEST, "Largest batch so far", state.largest_batch)
        yield from _pool_metrics(state.pool)
        yield gauge(
            names.SAMPLER_LEADER, "1 on the worker elected to sample the queue", int(state.leader)
        )
        queue = state.queue
        if queue is None:
            return  # only the elected sampler reports the queue: no duplicate series
        yield gauge(names.QUEUE_SAMPLE_AGE_SECONDS, "Seconds since the sample", queue.age_seconds)
        yield gauge(names.QUEUE_READY_SESSIONS, "Sessions waiting for a slot", queue.ready_sessions)
        yield gauge(names.QUEUE_QUEUED_TURNS, "Turns queued", queue.queued_turns)
        yield gauge(names.QUEUE_RUNNING_TURNS, "Turns running", queue.running_turns)
        yield gauge(names.QUEUE_PARKED_TURNS, "Turns parked on a question", queue.parked_turns)
        if queue.oldest_ready_age is not None:
            yield gauge(
                names.QUEUE_OLDEST_READY_SECONDS,
                "Age of the oldest ready session",
                queue.oldest_ready_age,
            )
        yield gauge(names.FLEET_WORKERS, "Live workers", queue.live_workers)
        yield gauge(names.FLEET_SLOTS, "Slots of live workers", queue.total_slots)
        yield gauge(names.FLEET_SLOTS_BUSY, "Sessions held by a worker", queue.busy_slots)
        if queue.quotas:
            yield from _quota_families(queue.quotas)


def _quota_families(books: Sequence[QuotaBooks]) -> Iterator[Family]:
    """Each scope's books as the database keeps them (exact, fleet-wide)."""
    requests = _counters(names.QUOTA_REQUESTS, "Provider requests by how settled", "scope", "state")
    tokens = _counters(names.QUOTA_TOKENS, "Quota tokens by how settled", "scope", "state")
    in_flight = Family(
        names.QUOTA_IN_FLIGHT, "Reserved, not yet settled", "gauge", ("scope", "unit")
    )
    window = Family(
        names.QUOTA_WINDOW, "Counted in the scope's window now", "gauge", ("scope", "unit")
    )
    deferrals = _counters(names.QUOTA_DEFERRALS, "Turns handed back to wait for quota", "scope")
    for book in books:
        for family, values in (
            (requests, book.requests),
            (tokens, book.tokens),
            (in_flight, book.in_flight),
            (window, book.window),
        ):
            for label, value in values.items():
                family.add((book.scope, label), value)
        deferrals.add((book.scope,), book.deferrals)
    yield from (requests, tokens, in_flight, window, deferrals)


def _pool_metrics(pool: PoolFigures) -> Iterator[Family]:
    yield gauge(names.POOL_CONNECTIONS, "Connections the worker's pool holds", pool.connections)
    yield gauge(names.POOL_IDLE, "Pool connections idle now", pool.idle)
    yield gauge(names.POOL_REQUESTS_WAITING, "Statements waiting for a connection", pool.waiting)
    yield counter(names.POOL_REQUESTS, "Connections borrowed from the pool", pool.requests)
    yield counter(
        names.POOL_REQUESTS_QUEUED, "Borrows that waited for a free connection", pool.queued
    )
    yield counter(
        names.POOL_WAIT_SECONDS, "Seconds spent waiting for a pool connection", pool.wait_seconds
    )


def _counters(name: str, doc: str, *labels: str) -> Family:
    """A counter family whose samples are added by label (``name`` may end in ``_total``)."""
    return Family(name.removesuffix("_total"), doc, "counter", labels)


class WorkerMetrics:
    """The worker's families; ``stint.worker.telemetry`` records into them."""

    def __init__(self, *, version: str, state: Callable[[], WorkerState]) -> None:
        self.registry = new_registry()
        r = self.registry
        info = Family(names.WORKER_INFO, "The worker's version", "gauge", ("version",))
        info.add((version,), 1)
        self.registry.register(_Fixed([info]))
        self.registry.register(_StateCollector(state))
        self.claims = Counter(names.CLAIMS, "Claim statements run", registry=r)
        self.claim_failures = Counter(names.CLAIM_FAILURES, "Claim statements failed", registry=r)
        self.claimed = Counter(names.CLAIMED_SESSIONS, "Sessions claimed", registry=r)
        self.claim_seconds = Histogram(
            names.CLAIM_SECONDS, "Claim statement latency", buckets=_CLAIM_BUCKETS, registry=r
        )
        self.turns_started = Counter(names.TURNS_STARTED, "Turn attempts started", registry=r)
        self.turns_finished = Counter(
            names.TURNS_FINISHED, "Turns finished, by status", ["status"], registry=r
        )
        self.turns_parked = Counter(names.TURNS_PARKED, "Turns parked on a question", registry=r)
        self.handed_back = Counter(
            names.TURNS_HANDED_BACK, "Turns handed back unfinished", ["reason"], registry=r
        )
        self.turn_seconds = Histogram(
            names.TURN_SECONDS,
            "Turn attempt duration, start to finish, by status",
            ["status"],
            buckets=_TURN_BUCKETS,
            registry=r,
        )
        self.queue_wait = Histogram(
            names.TURN_QUEUE_WAIT_SECONDS,
            "Enqueue to first start (database clock)",
            buckets=_WAIT_BUCKETS,
            registry=r,
        )
        self.renewals = Counter(names.LEASE_RENEWALS, "Lease renewal statements", registry=r)
        self.renewal_failures = Counter(
            names.LEASE_RENEWAL_FAILURES, "Lease renewals that failed", registry=r
        )
        self.leases_lost = Counter(names.LEASES_LOST, "Leases taken over by another", registry=r)
        self.unknown_effects = Counter(
            names.UNKNOWN_EFFECTS, "Steps marked unknown (effect may have happened)", registry=r
        )
        self.model_calls = Counter(
            names.MODEL_CALLS, "Model calls, by quota scope", ["scope"], registry=r
        )
        self.model_tokens = Counter(
            names.MODEL_TOKENS,
            "Model tokens the provider reported, by quota scope and kind",
            ["scope", "kind"],
            registry=r,
        )
        self.quota_waits = Counter(
            names.QUOTA_WAITS, "Waits for provider quota, by scope", ["scope"], registry=r
        )
        self.quota_wait_seconds = Histogram(
            names.QUOTA_WAIT_SECONDS,
            "Time waited for provider quota, by scope",
            ["scope"],
            buckets=_WAIT_BUCKETS,
            registry=r,
        )


@dataclass(frozen=True)
class ApiState:
    """The API process's state at scrape time."""

    event_streams: int
    hub_notifications: int
    hub_reconnects: int


class _ApiCollector:
    def __init__(self, read: Callable[[], ApiState | None]) -> None:
        self._read = read

    def collect(self) -> Iterator[Family]:
        state = self._read()
        if state is None:
            return
        yield gauge(names.API_EVENT_STREAMS, "Event streams open", state.event_streams)
        yield counter(
            names.API_HUB_NOTIFICATIONS, "Notifications the hub received", state.hub_notifications
        )
        yield counter(
            names.API_HUB_RECONNECTS,
            "Times the hub lost its LISTEN connection",
            state.hub_reconnects,
        )


class ApiMetrics:
    """The API's families: requests by route template (never a concrete path, which
    would carry session ids), and the hub's state at scrape time. No label carries
    a tenant, a key or an id."""

    def __init__(self, state: Callable[[], ApiState | None]) -> None:
        self.registry = new_registry()
        self.registry.register(_ApiCollector(state))
        self.requests = Counter(
            names.API_REQUESTS,
            "HTTP requests answered",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.request_seconds = Histogram(
            names.API_REQUEST_SECONDS,
            "HTTP request latency (to the response head; streams end later)",
            ["method", "route"],
            buckets=_REQUEST_BUCKETS,
            registry=self.registry,
        )


class _Fixed:
    def __init__(self, families: list[Family]) -> None:
        self._families = families

    def collect(self) -> Iterator[Family]:
        return iter(self._families)
