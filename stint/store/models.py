"""Frozen rows the store returns. Plain data: no behaviour, no connection."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

__all__ = [
    "Claim",
    "ControlRequest",
    "EnqueueResult",
    "Event",
    "FinishResult",
    "StatusSummary",
    "StepRecord",
    "TurnProgress",
    "TurnStart",
    "TurnTiming",
    "WorkerRow",
]


@dataclass(frozen=True)
class Claim:
    """A session lease held by one worker: the fencing token for every write."""

    session_id: UUID
    owner: str
    epoch: int


@dataclass(frozen=True)
class TurnStart:
    """The turn a slot is about to run (attempts > 1 means a retry)."""

    turn_id: UUID
    seq: int
    input: dict[str, Any]
    attempts: int
    timeout_seconds: float | None = None


@dataclass(frozen=True)
class ControlRequest:
    """An operator's request to stop a running turn: ``cancel`` or ``interrupt``."""

    action: str
    turn_id: UUID
    reason: str | None


@dataclass(frozen=True)
class StepRecord:
    """A durable step as recorded: started, committed (with result) or unknown."""

    step_key: str
    kind: str
    status: str
    request_digest: str
    result: Any


@dataclass(frozen=True)
class FinishResult:
    """What remains after a turn finished: queued turns, and whether we still hold the lease."""

    queued_turns: int
    still_held: bool


@dataclass(frozen=True)
class Event:
    """One entry of a session's event log."""

    session_id: UUID
    seq: int
    kind: str
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
class EnqueueResult:
    """The turn an enqueue call refers to; created is false for an idempotent retry."""

    session_id: UUID
    turn_id: UUID
    seq: int
    created: bool


@dataclass(frozen=True)
class WorkerRow:
    """A worker as ``stint status`` shows it."""

    id: str
    state: str
    slots: int
    pid: int
    host: str
    version: str
    pins: list[str]
    heartbeat_age: float
    active: int


@dataclass(frozen=True)
class StatusSummary:
    """Workers, sessions by status, queued turns, the oldest ready session's age, and
    ready sessions no live worker accepts (pinned to a version nobody runs)."""

    workers: list[WorkerRow]
    sessions: dict[str, int]
    queued_turns: int
    oldest_ready_age: float | None
    ready_unaccepted: int


@dataclass(frozen=True)
class TurnProgress:
    """Finished and total turns, and sessions running now."""

    finished: int
    total: int
    running_sessions: int


@dataclass(frozen=True)
class TurnTiming:
    """One finished turn's audit times (epoch seconds, database clock) and durations."""

    enqueued_at: float
    finished_at: float
    end_to_end: float
    queue_wait: float
    run_time: float
    status: str
    attempts: int
