"""What the API answers and accepts, as typed models.

Written by hand so each has a name and a docstring worth reading, and checked
against ``docs/openapi.json`` by ``tests/client/test_openapi_drift.py``: a field
added, removed, retyped or made optional on either side fails that test
(``SCHEMAS`` names the OpenAPI component each model mirrors).

Answers are read leniently so an older client keeps working against a newer
API: unknown fields are ignored, and a status or event kind this client does
not know stays a plain string (the known ones become the enums below, which
are ``str`` too, so comparisons work either way).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SCHEMAS",
    "TERMINAL_KINDS",
    "AnswerCreate",
    "AnswerResult",
    "BusyStrategy",
    "Child",
    "ChildPage",
    "ControlCreate",
    "ControlResult",
    "Delivery",
    "DeliveryPage",
    "DeliveryStatus",
    "Event",
    "EventKind",
    "EventPage",
    "Problem",
    "Schedule",
    "ScheduleCreate",
    "SchedulePage",
    "Session",
    "SessionCreate",
    "SessionPage",
    "SessionStatus",
    "SignalCreate",
    "SignalResult",
    "Status",
    "Tick",
    "TickOutcome",
    "Turn",
    "TurnCreate",
    "TurnPage",
    "TurnQueued",
    "TurnStatus",
    "Webhook",
    "WebhookCreate",
    "WebhookCreated",
    "WebhookPage",
]


class SessionStatus(StrEnum):
    """A session's state; it holds a lease exactly while ``running``."""

    IDLE = "idle"
    READY = "ready"
    RUNNING = "running"
    PARKED = "parked"
    CLOSED = "closed"


class TurnStatus(StrEnum):
    """A turn's state; the last four are its end."""

    QUEUED = "queued"
    RUNNING = "running"
    PARKED = "parked"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_STATUSES


_TERMINAL_STATUSES = frozenset(
    {TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.INTERRUPTED}
)


class BusyStrategy(StrEnum):
    """What an enqueue does when the session already has a turn in progress."""

    ENQUEUE = "enqueue"
    REJECT = "reject"
    INTERRUPT = "interrupt"


class EventKind(StrEnum):
    """An event's kind ([events reference](../../docs/reference/events.md))."""

    TURN_STARTED = "turn.started"
    TOOL_CALLED = "tool.called"
    TOOL_RETURNED = "tool.returned"
    MODEL_CALLED = "model.called"
    MODEL_RETURNED = "model.returned"
    APPROVAL_REQUESTED = "approval.requested"
    APPROVAL_ANSWERED = "approval.answered"
    EFFECT_UNKNOWN = "effect.unknown"
    TURN_RELEASED = "turn.released"
    TURN_DEFERRED = "turn.deferred"
    MESSAGE = "message"
    MESSAGE_DELTA = "message.delta"
    MODEL_RETRIED = "model.retried"
    HISTORY_TRUNCATED = "history.truncated"
    TURN_COMPLETED = "turn.completed"
    TURN_FAILED = "turn.failed"
    TURN_CANCELLED = "turn.cancelled"
    TURN_INTERRUPTED = "turn.interrupted"
    CONTROL_REQUESTED = "control.requested"
    WAIT_STARTED = "wait.started"
    WAIT_FINISHED = "wait.finished"
    SIGNAL_RECEIVED = "signal.received"
    CHILD_STARTED = "child.started"
    CHILD_FINISHED = "child.finished"


TERMINAL_KINDS = frozenset(
    {
        EventKind.TURN_COMPLETED,
        EventKind.TURN_FAILED,
        EventKind.TURN_CANCELLED,
        EventKind.TURN_INTERRUPTED,
    }
)
"""The kinds that end a turn: each ended turn has exactly one of them in its log."""


def _known() -> Any:
    """A field that is its enum when the value is a known one, else the plain string."""
    return Field(union_mode="left_to_right")


class _Answer(BaseModel):
    """A model of an answer: frozen, unknown fields ignored (a newer API may add some)."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class Session(_Answer):
    """A session of the key's tenant (``SessionOut``)."""

    id: UUID
    tenant: str | None
    pin: str | None
    status: SessionStatus | str = _known()
    last_event_seq: int
    queued_turns: int
    created_at: datetime
    updated_at: datetime
    parent_id: UUID | None
    """The session whose turn spawned this one (``ctx.spawn``), if any."""
    depth: int
    """0: made by a client; a child's is its parent's + 1."""


class SessionPage(_Answer):
    """Sessions newest first; pass ``next_cursor`` as ``cursor`` for the next page."""

    sessions: list[Session]
    next_cursor: str | None


class TurnQueued(_Answer):
    """The answer to an enqueue: ``created`` is false when an earlier request with the
    same idempotency key had queued this turn."""

    session_id: UUID
    turn_id: UUID
    seq: int
    created: bool


class TurnBatchQueued(_Answer):
    """The answer to a batch enqueue: one ``TurnQueued`` per turn, in request order."""

    turns: list[TurnQueued]


class Turn(_Answer):
    """A turn: its input, status, output or error, attempts and timing (``TurnOut``)."""

    id: UUID
    session_id: UUID
    seq: int
    idempotency_key: str
    status: TurnStatus | str = _known()
    input: Any
    output: Any
    error: str | None
    reason: str | None
    attempts: int
    timeout_seconds: float | None
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @property
    def finished(self) -> bool:
        """Whether the turn has ended (succeeded, failed, cancelled or interrupted)."""
        return isinstance(self.status, TurnStatus) and self.status.terminal


class TurnPage(_Answer):
    """A session's turns in order; pass ``next_after_seq`` as ``after_seq`` for more."""

    turns: list[Turn]
    next_after_seq: int | None


class Child(_Answer):
    """A child session a turn of the session spawned (``ChildOut``)."""

    id: UUID
    turn_id: UUID
    parent_turn_id: UUID
    step_key: str
    on_cancel: str
    status: TurnStatus | str | None = _known()
    reported_at: datetime | None
    created_at: datetime


class ChildPage(_Answer):
    """A session's children, oldest first."""

    children: list[Child]


class ControlResult(_Answer):
    """What a cancel or interrupt did (``ControlOut``); with ``wait=True``, ``settled``
    says whether the active turn ended within ``wait_seconds`` and ``turn`` is it now."""

    session_id: UUID
    cancelled_queued: list[UUID]
    active_turn: UUID | None
    outcome: str
    settled: bool | None = None
    turn: Turn | None = None


class AnswerResult(_Answer):
    """An answer was recorded (or was already, with the same value); the turn resumes."""

    session_id: UUID
    turn_id: UUID
    resumed: bool


class Event(_Answer):
    """One event of a session's log; ``seq`` is its cursor (1, 2, 3 ... with no gap)."""

    session_id: UUID
    seq: int
    kind: EventKind | str = _known()
    turn_id: UUID | None
    payload: Any
    created_at: datetime

    @property
    def ends_turn(self) -> bool:
        """Whether this is its turn's terminal event."""
        return self.kind in TERMINAL_KINDS


class EventPage(_Answer):
    """A page of events; pass ``next_after`` as ``after`` for the next one."""

    events: list[Event]
    next_after: int
    pruned_through: int | None = None  # retention removed every seq after ``after`` up to this


class Status(_Answer):
    """The tenant's sessions by status and queue; the fleet's live workers and slots."""

    tenant: str
    sessions: dict[str, int]
    queued_turns: int
    oldest_ready_age_s: float | None
    live_workers: int
    live_slots: int


class SignalResult(_Answer):
    """A signal kept for the session until a wait on its name consumes it;
    ``created`` false: an earlier call with this idempotency key kept it."""

    session_id: UUID
    signal_id: UUID
    name: str
    created: bool


# Schedules and webhooks (``/v1/schedules``, ``/v1/webhooks``)


class TickOutcome(StrEnum):
    """What a schedule's tick did: queued its turn, found the session busy
    (``busy: reject``), or was refused by an admission limit."""

    ENQUEUED = "enqueued"
    BUSY = "busy"
    REFUSED = "refused"


class DeliveryStatus(StrEnum):
    """A webhook delivery's state: pending until a 2xx (delivered) or its last attempt
    (failed)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class Tick(_Answer):
    """One tick a schedule ran (``TickOut``): the session and turn it queued, if any."""

    tick_at: datetime
    outcome: TickOutcome | str = _known()
    session_id: UUID | None
    turn_id: UUID | None
    detail: str | None


class Schedule(_Answer):
    """A schedule of the key's tenant (``ScheduleOut``): a ``cron`` expression or
    ``every_seconds`` that queues ``input`` as a turn per tick, on ``session_id`` or on
    a new session per tick. ``next_run_at`` is None while paused; ``recent_ticks`` is
    only in the answer of ``get_schedule``."""

    id: UUID
    name: str
    cron: str | None
    every_seconds: float | None
    timezone: str
    session_id: UUID | None
    pin: str | None
    input: Any
    busy: BusyStrategy | str = _known()
    catch_up: int
    timeout_seconds: float | None
    paused: bool
    next_run_at: datetime | None
    last_tick_at: datetime | None
    ticks_enqueued: int
    ticks_skipped: int
    ticks_refused: int
    created_at: datetime
    recent_ticks: list[Tick] | None = None


class SchedulePage(_Answer):
    """The tenant's schedules, by name."""

    schedules: list[Schedule]


class Webhook(_Answer):
    """A webhook endpoint of the key's tenant (``WebhookOut``): the event kinds POSTed
    to ``url``; ``enabled`` is false once it was disabled for failing (see
    ``disabled_reason``). Its signing secret is never in this answer."""

    id: UUID
    url: str
    events: list[str]
    description: str | None
    enabled: bool
    failing_since: datetime | None
    disabled_at: datetime | None
    disabled_reason: str | None
    created_at: datetime


class WebhookCreated(Webhook):
    """The answer to creating an endpoint: the endpoint and its signing secret
    (``whsec_...``), which the API shows in this answer only. Keep it: it verifies the
    deliveries' signatures. It is left out of the repr, so logging the answer does not
    leak it."""

    secret: str = Field(repr=False)


class WebhookPage(_Answer):
    """The tenant's webhook endpoints."""

    webhooks: list[Webhook]


class Delivery(_Answer):
    """One event's delivery to an endpoint (``DeliveryOut``); ``id`` is the
    ``webhook-id`` header of each of its attempts, by which the receiver deduplicates."""

    id: UUID
    session_id: UUID
    seq: int
    kind: str
    status: DeliveryStatus | str = _known()
    attempts: int
    next_attempt_at: datetime
    last_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    delivered_at: datetime | None


class DeliveryPage(_Answer):
    """An endpoint's delivery log, newest first."""

    deliveries: list[Delivery]


class Problem(_Answer):
    """An RFC 9457 refusal, as every error of the API is sent."""

    type: str = "about:blank"
    title: str
    status: int
    detail: str


class _Request(BaseModel):
    """A request body: the fields the route accepts, None left out when sent."""

    model_config = ConfigDict(extra="forbid")


class SessionCreate(_Request):
    pin: str | None = None


class TurnCreate(_Request):
    input: dict[str, Any]
    busy: BusyStrategy = BusyStrategy.ENQUEUE
    timeout_seconds: float | None = None


class BatchTurnCreate(TurnCreate):
    """One turn of ``enqueue_batch``: its session and (made if None) its own key."""

    session_id: UUID
    idempotency_key: str | None = None


class TurnBatchCreate(_Request):
    turns: list[BatchTurnCreate]


class ControlCreate(_Request):
    turn_id: UUID | None = None
    reason: str = "api"


class AnswerCreate(_Request):
    step_key: str
    answer: Any


class SignalCreate(_Request):
    """The body of ``POST /v1/sessions/{id}/signals/{name}``: the signal's payload."""

    payload: Any = None


class ScheduleCreate(_Request):
    """The body of ``POST /v1/schedules``: ``cron`` or ``every_seconds`` (the API
    refuses both or neither)."""

    name: str
    input: dict[str, Any]
    cron: str | None = None
    every_seconds: float | None = None
    timezone: str = "UTC"
    session_id: UUID | None = None
    pin: str | None = None
    catch_up: int = 0
    busy: BusyStrategy = BusyStrategy.ENQUEUE
    timeout_seconds: float | None = None


class WebhookCreate(_Request):
    """The body of ``POST /v1/webhooks``."""

    url: str
    events: list[str]
    description: str | None = None


SCHEMAS: dict[str, type[BaseModel]] = {
    "SessionOut": Session,
    "SessionPage": SessionPage,
    "TurnQueued": TurnQueued,
    "TurnOut": Turn,
    "TurnPage": TurnPage,
    "ControlOut": ControlResult,
    "AnswerOut": AnswerResult,
    "EventOut": Event,
    "EventPage": EventPage,
    "StatusOut": Status,
    "Problem": Problem,
    "SessionCreate": SessionCreate,
    "TurnCreate": TurnCreate,
    "ControlCreate": ControlCreate,
    "AnswerCreate": AnswerCreate,
    # Schedules and webhooks
    "TickOut": Tick,
    "ScheduleOut": Schedule,
    "SchedulePage": SchedulePage,
    "ScheduleCreate": ScheduleCreate,
    "WebhookOut": Webhook,
    "WebhookCreated": WebhookCreated,
    "WebhookPage": WebhookPage,
    "WebhookCreate": WebhookCreate,
    "DeliveryOut": Delivery,
    "DeliveryPage": DeliveryPage,
    "SignalOut": SignalResult,
    "ChildOut": Child,
    "ChildPage": ChildPage,
    "SignalCreate": SignalCreate,
}
"""Each model and the OpenAPI component (``#/components/schemas/NAME``) it mirrors."""
