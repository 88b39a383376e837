"""The API's request and response bodies: the shapes its OpenAPI spec documents.

Request bodies are strict (no type coercion) and refuse unknown fields, so a
typo is a 422 naming the field instead of a silently ignored option.
Responses are built from the store's rows, one function per row kind.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from stint.store.children import ChildLink
from stint.store.controls import ControlResult
from stint.store.input_rules import IDEMPOTENCY_KEY_PATTERN, MAX_BATCH_TURNS, PIN_PATTERN
from stint.store.models import EnqueueResult, Event, SessionRecord, TenantStatus, TurnRecord
from stint.store.vocabulary import BusyStrategy, EventKind, SessionStatus, TurnStatus

__all__ = [
    "AnswerCreate",
    "AnswerOut",
    "ChildOut",
    "ChildPage",
    "ControlCreate",
    "ControlOut",
    "EventOut",
    "EventPage",
    "Health",
    "Readiness",
    "SessionCreate",
    "SessionOut",
    "SessionPage",
    "SignalCreate",
    "SignalOut",
    "StatusOut",
    "TurnCreate",
    "TurnOut",
    "TurnPage",
    "TurnQueued",
]

MAX_SEQ = 2**63 - 1
"""Cursors are PostgreSQL bigints; a larger one is refused as input, never sent to SQL."""

_LABEL = PIN_PATTERN  # one rule for every door: stint.store.input_rules


class _Request(BaseModel):
    """Strict: "5" is not a number and 1 is not a string. (FastAPI validates the
    parsed JSON in Python mode, so enums and UUIDs, which JSON spells as
    strings, opt out field by field.)"""

    model_config = ConfigDict(extra="forbid", strict=True)


class SessionCreate(_Request):
    """A new session of the caller's tenant."""

    pin: str | None = Field(
        None, pattern=_LABEL, description="only workers started with --pin PIN run this session"
    )


class TurnCreate(_Request):
    """A turn to queue on the session."""

    input: dict[str, JsonValue] = Field(description="the turn's input, handed to the harness")
    busy: BusyStrategy = Field(
        BusyStrategy.ENQUEUE,
        strict=False,
        description="if a turn is in progress: queue behind it, reject this input (429), "
        "or interrupt the running turn and run this one next",
    )
    timeout_seconds: float | None = Field(
        None,
        ge=0.1,
        le=86_400,
        description="interrupt this turn after this many seconds (as STINT_TURN_TIMEOUT's range)",
    )


class BatchTurnCreate(TurnCreate):
    """One turn of a batch: the session it is for and its own idempotency key."""

    session_id: UUID = Field(strict=False, description="an existing session of the caller's")
    idempotency_key: str | None = Field(
        None,
        pattern=IDEMPOTENCY_KEY_PATTERN,
        description="a retry with the same key returns the same turn (default: a new key)",
    )


class TurnBatchCreate(_Request):
    """Turns to queue together: all of them, or (on any refusal) none."""

    turns: list[BatchTurnCreate] = Field(min_length=1, max_length=MAX_BATCH_TURNS)


class ControlCreate(_Request):
    """Optional details of a cancel or interrupt."""

    turn_id: UUID | None = Field(None, strict=False, description="only this turn")
    reason: str = Field("api", min_length=1, max_length=200, description="recorded with the turn")


class AnswerCreate(_Request):
    """The answer to a parked turn's question (its step key is in approval.requested)."""

    step_key: str = Field(min_length=1, max_length=200)
    answer: JsonValue = Field(description="any JSON value; the turn resumes with it")


class SignalCreate(_Request):
    """What the signal carries to the wait that consumes it."""

    payload: JsonValue = Field(None, description="any JSON value (default null)")


class SignalOut(BaseModel):
    session_id: UUID
    signal_id: UUID
    name: str
    created: bool = Field(description="false: an earlier request with this key kept it")


class SessionOut(BaseModel):
    id: UUID
    tenant: str | None
    pin: str | None
    status: SessionStatus
    last_event_seq: int
    queued_turns: int
    created_at: datetime
    updated_at: datetime
    parent_id: UUID | None = Field(description="the session whose turn spawned this one, if any")
    depth: int = Field(description="0: made by a client; a child's is its parent's + 1")

    @classmethod
    def of(cls, row: SessionRecord) -> SessionOut:
        return cls(
            id=row.id,
            tenant=row.tenant,
            pin=row.pin,
            status=row.status,
            last_event_seq=row.last_event_seq,
            queued_turns=row.queued_turns,
            created_at=row.created_at,
            updated_at=row.updated_at,
            parent_id=row.parent_id,
            depth=row.depth,
        )


class ChildOut(BaseModel):
    """One child session and the turn that spawned it."""

    id: UUID = Field(description="the child session")
    turn_id: UUID = Field(description="the child's first turn, the one spawned")
    parent_turn_id: UUID = Field(description="the parent's turn that spawned it")
    step_key: str = Field(description="the spawn's step key in that turn")
    on_cancel: str = Field(description="`cascade` or `abandon`: what a cancel of the parent does")
    status: TurnStatus | None = Field(description="the child turn's status")
    reported_at: datetime | None = Field(description="when its end was told to the parent")
    created_at: datetime

    @classmethod
    def of(cls, row: ChildLink) -> ChildOut:
        return cls(
            id=row.child_id,
            turn_id=row.child_turn_id,
            parent_turn_id=row.parent_turn_id,
            step_key=row.step_key,
            on_cancel=row.on_cancel,
            status=None if row.status is None else TurnStatus(row.status),
            reported_at=row.reported_at,
            created_at=row.created_at,
        )


class ChildPage(BaseModel):
    children: list[ChildOut]


class SessionPage(BaseModel):
    sessions: list[SessionOut]
    next_cursor: str | None = Field(description="pass as ?cursor= for the next page; null: last")


class TurnQueued(BaseModel):
    session_id: UUID
    turn_id: UUID
    seq: int
    created: bool = Field(description="false: an earlier request with this Idempotency-Key")

    @classmethod
    def of(cls, result: EnqueueResult) -> TurnQueued:
        return cls(
            session_id=result.session_id,
            turn_id=result.turn_id,
            seq=result.seq,
            created=result.created,
        )


class TurnBatchQueued(BaseModel):
    turns: list[TurnQueued] = Field(description="one per turn of the request, in its order")


class TurnOut(BaseModel):
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

    @classmethod
    def of(cls, row: TurnRecord) -> TurnOut:
        return cls(
            id=row.id,
            session_id=row.session_id,
            seq=row.seq,
            idempotency_key=row.idempotency_key,
            status=row.status,
            input=row.input,
            output=row.output,
            error=row.error,
            reason=row.reason,
            attempts=row.attempts,
            timeout_seconds=row.timeout_seconds,
            enqueued_at=row.enqueued_at,
            started_at=row.started_at,
            finished_at=row.finished_at,
        )


class TurnPage(BaseModel):
    turns: list[TurnOut]
    next_after_seq: int | None = Field(description="pass as ?after_seq= for more; null: last")


class ControlOut(BaseModel):
    session_id: UUID
    cancelled_queued: list[UUID]
    active_turn: UUID | None
    outcome: str
    settled: bool | None = Field(
        None, description="with wait=true: whether the active turn ended within wait_seconds"
    )
    turn: TurnOut | None = Field(None, description="with wait=true: the active turn as it is now")

    @classmethod
    def of(
        cls, result: ControlResult, *, settled: bool | None = None, turn: TurnOut | None = None
    ) -> ControlOut:
        return cls(
            session_id=result.session_id,
            cancelled_queued=result.cancelled_queued,
            active_turn=result.active_turn,
            outcome=result.outcome,
            settled=settled,
            turn=turn,
        )


class AnswerOut(BaseModel):
    session_id: UUID
    turn_id: UUID
    resumed: bool


class EventOut(BaseModel):
    session_id: UUID
    seq: int
    kind: EventKind
    turn_id: UUID | None
    payload: Any
    created_at: datetime

    @classmethod
    def of(cls, event: Event) -> EventOut:
        return cls(
            session_id=event.session_id,
            seq=event.seq,
            kind=event.kind,
            turn_id=event.turn_id,
            payload=event.payload,
            created_at=event.created_at,
        )


class EventPage(BaseModel):
    events: list[EventOut]
    next_after: int = Field(description="the cursor to pass as ?after= next (the last seq seen)")
    pruned_through: int | None = Field(
        None,
        description="set when events after the requested seq are gone: retention removed "
        "every seq up to this one (the page starts after it); null when nothing is missing",
    )


class StatusOut(BaseModel):
    tenant: str
    sessions: dict[str, int]
    queued_turns: int
    oldest_ready_age_s: float | None
    live_workers: int
    live_slots: int

    @classmethod
    def of(cls, tenant: str, status: TenantStatus) -> StatusOut:
        return cls(
            tenant=tenant,
            sessions=status.sessions,
            queued_turns=status.queued_turns,
            oldest_ready_age_s=status.oldest_ready_age,
            live_workers=status.live_workers,
            live_slots=status.live_slots,
        )


class Health(BaseModel):
    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    ready: bool
    database: bool
    pending_migrations: list[str]
    listening: bool
    detail: str
