"""Frozen rows the store returns. Plain data: no behaviour, no connection.

Rows are built by psycopg's ``class_row`` from the columns a statement names,
so a statement and its row class must agree on names (a mismatch fails the
first time the statement runs, in every test that uses it). Vocabulary columns
arrive as text and are turned into their enums on construction.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass, field, fields
from datetime import datetime
from enum import StrEnum
from types import UnionType
from typing import Any
from uuid import UUID

from stint.store.vocabulary import (
    ControlAction,
    EventKind,
    SessionStatus,
    StepKind,
    StepStatus,
    TurnStatus,
    WorkerState,
)

__all__ = [
    "ROSTER_CHANGED",
    "ApiKey",
    "Claim",
    "ControlRequest",
    "EnqueueResult",
    "Event",
    "FinishResult",
    "LogBounds",
    "PagedEvent",
    "ParkResult",
    "QuotaScope",
    "RenewedLease",
    "Row",
    "SessionRecord",
    "StatusSummary",
    "StepRecord",
    "TenantStatus",
    "TurnProgress",
    "TurnRecord",
    "TurnStart",
    "TurnTiming",
    "Work",
    "WorkerPeer",
    "WorkerRow",
]


_ENUM_FIELDS: dict[type, dict[str, type[StrEnum]]] = {}


def _enum_fields(cls: type) -> dict[str, type[StrEnum]]:
    """The fields of a row class typed with a vocabulary enum (or ``enum | None``)."""
    known = _ENUM_FIELDS.get(cls)
    if known is not None:
        return known
    hints = typing.get_type_hints(cls)
    found: dict[str, type[StrEnum]] = {}
    for f in fields(cls):
        hint = hints[f.name]
        options = typing.get_args(hint) if isinstance(hint, UnionType) else (hint,)
        for option in options:
            if isinstance(option, type) and issubclass(option, StrEnum):
                found[f.name] = option
    _ENUM_FIELDS[cls] = found
    return found


class Row:
    """Turns text columns into the vocabulary enums their fields are typed with."""

    def __post_init__(self) -> None:
        for name, enum in _enum_fields(type(self)).items():
            value = getattr(self, name)
            if value is not None and not isinstance(value, enum):
                object.__setattr__(self, name, enum(value))


@dataclass(frozen=True)
class Claim(Row):
    """A session lease held by one worker: the fencing token for every write."""

    session_id: UUID
    owner: str
    epoch: int


@dataclass(frozen=True)
class TurnStart(Row):
    """The turn a slot is about to run (attempts > 1 means a retry)."""

    turn_id: UUID
    seq: int
    input: dict[str, Any]
    attempts: int
    timeout_seconds: float | None = None
    traceparent: str | None = None  # the producer's W3C trace context, if it gave one
    queue_wait: float | None = None  # seconds since enqueue, on a first attempt


@dataclass(frozen=True)
class ControlRequest(Row):
    """An operator's request to stop a running turn: ``cancel`` or ``interrupt``."""

    action: ControlAction
    turn_id: UUID
    reason: str | None


ROSTER_CHANGED = "roster"
"""The work channel's payload that tells every worker to read its roster again: a
worker registered, began draining, or stopped (stint/worker/roster.py)."""


@dataclass(frozen=True)
class WorkerPeer:
    """A live running worker as the others see it: who it is and what it accepts."""

    worker_id: str
    pins: tuple[str, ...]


@dataclass(frozen=True)
class RenewedLease(Row):
    """A lease the renewal kept, with the control request waiting for it, if any."""

    session_id: UUID
    control: ControlAction | None
    control_turn_id: UUID | None
    control_reason: str | None

    @property
    def request(self) -> ControlRequest | None:
        if self.control is None or self.control_turn_id is None:
            return None
        return ControlRequest(self.control, self.control_turn_id, self.control_reason)


@dataclass(frozen=True)
class ParkResult(Row):
    """Whether the turn parked; if not, the cancel or interrupt that came first."""

    parked: bool
    control: ControlAction | None
    control_reason: str | None


@dataclass(frozen=True)
class StepRecord(Row):
    """A durable step as recorded: started, committed (with result) or unknown."""

    step_key: str
    kind: StepKind
    status: StepStatus
    request_digest: str
    result: Any


@dataclass(frozen=True)
class Work:
    """What a slot runs next: a session it now holds, and the turn started on it
    (None when the session had nothing left to start: the slot gives it back)."""

    claim: Claim
    turn: TurnStart | None


@dataclass(frozen=True)
class FinishResult:
    """After a turn finished: turns still queued on its session, whether the
    session is still held, and the slot's next work (the same session's next
    turn, or another session claimed in the same statement), if any."""

    queued_turns: int
    still_held: bool
    next: Work | None = None
    parent_id: UUID | None = None
    """The session is a child of this one: its parent must hear of the turn's end."""


@dataclass(frozen=True)
class Event(Row):
    """One entry of a session's event log."""

    session_id: UUID
    seq: int
    kind: EventKind
    turn_id: UUID | None
    payload: Any
    created_at: datetime

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "seq": self.seq,
            "kind": self.kind,
            "turn_id": str(self.turn_id) if self.turn_id else None,
            "payload": self.payload,
            "created_at": self.created_at.isoformat(),
        }


@dataclass(frozen=True)
class EnqueueResult(Row):
    """The turn an enqueue call refers to; created is false for an idempotent retry."""

    session_id: UUID
    turn_id: UUID
    seq: int
    created: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "turn_id": str(self.turn_id),
            "seq": self.seq,
            "created": self.created,
        }


@dataclass(frozen=True)
class WorkerRow(Row):
    """A worker as ``stint status`` shows it."""

    id: str
    state: WorkerState
    slots: int
    pid: int
    host: str
    version: str
    pins: list[str]
    heartbeat_age: float
    alive: bool
    active: int

    @property
    def shown_state(self) -> str:
        """``dead`` for a worker whose heartbeat outlived its lease (killed, cut off)."""
        return str(self.state) if self.alive else "dead"


@dataclass(frozen=True)
class QuotaScope(Row):
    """A scope's limits, exact counters, and what fills its window now.

    The books always balance (a CHECK on the row):
    ``tokens_reserved = tokens_reconciled + tokens_refunded - tokens_debt
    + tokens_unknown + tokens_in_flight``, and likewise for requests without
    refund and debt. At rest (nothing in flight) that is the issue's
    reserved = reconciled + refunded - debt + unknown.
    """

    scope: str
    rpm: int | None
    tpm: int | None
    concurrency: int | None
    window_seconds: float
    requests_reserved: int
    requests_reconciled: int
    requests_unknown: int
    requests_in_flight: int
    tokens_reserved: int
    tokens_reconciled: int
    tokens_refunded: int
    tokens_debt: int
    tokens_unknown: int
    tokens_in_flight: int
    deferrals: int
    window_requests: int
    window_tokens: int


@dataclass(frozen=True)
class StatusSummary(Row):
    """Workers, sessions by status, unfinished turns by status, the oldest ready
    session's age, and ready sessions no live worker will run: because no worker
    is alive, or because none accepts their pin."""

    workers: list[WorkerRow]
    sessions: dict[str, int]
    queued_turns: int
    running_turns: int
    parked_turns: int
    oldest_ready_age: float | None
    live_workers: int
    ready_without_worker: int
    ready_unaccepted: int
    quotas: list[QuotaScope] = field(default_factory=list)


@dataclass(frozen=True)
class TurnProgress(Row):
    """Finished and total turns, and sessions running now."""

    finished: int
    total: int
    running_sessions: int


@dataclass(frozen=True)
class TurnTiming(Row):
    """One finished turn's audit times (epoch seconds, database clock) and durations."""

    enqueued_at: float
    started_at: float
    finished_at: float
    end_to_end: float
    queue_wait: float
    run_time: float
    status: TurnStatus
    attempts: int
    worker_id: str | None = None


@dataclass(frozen=True)
class PagedEvent(Event):
    """An event of a page bounded by bytes; ``more`` on the last one says the bound
    left events behind."""

    more: bool


@dataclass(frozen=True)
class LogBounds:
    """Where a session's event log starts and ends: seqs ``pruned_through + 1 ..
    last_event_seq`` exist; retention removed the ones before."""

    pruned_through: int
    last_event_seq: int


@dataclass(frozen=True)
class SessionRecord(Row):
    """A session as a client sees it: no lease internals."""

    id: UUID
    tenant: str | None
    pin: str | None
    status: SessionStatus
    last_event_seq: int
    queued_turns: int
    created_at: datetime
    updated_at: datetime
    parent_id: UUID | None  # spawned by a turn of this session (ctx.spawn)
    depth: int  # 0: made by a client; a child's is its parent's + 1


@dataclass(frozen=True)
class TurnRecord(Row):
    """A turn as a client sees it: its input, and its output or error once finished."""

    id: UUID
    session_id: UUID
    seq: int
    idempotency_key: str
    status: TurnStatus
    input: Any
    output: Any
    error: str | None
    reason: str | None
    attempts: int
    timeout_seconds: float | None
    enqueued_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True)
class TenantStatus(Row):
    """One tenant's sessions by status and queue, and the fleet's live capacity
    (counts only: a tenant sees no worker's host, pid or id)."""

    sessions: dict[str, int]
    queued_turns: int
    oldest_ready_age: float | None
    live_workers: int
    live_slots: int


@dataclass(frozen=True)
class ApiKey(Row):
    """An API key as listed: never its secret, which is shown once at creation."""

    id: str
    tenant: str
    read_only: bool
    label: str | None
    created_at: datetime
    revoked_at: datetime | None
    operator: bool = False
