"""Stint's vocabulary: every status, action and event kind the database knows.

The migrations' CHECK constraints are the truth; these enums mirror them so
that Python code names states instead of spelling strings, and a test
(``tests/integration/test_vocabulary.py``) fails when the two disagree. Each
member is a ``str``, so it goes to PostgreSQL and to JSON as its value.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = [
    "AdmissionLimit",
    "BusyStrategy",
    "ControlAction",
    "EventKind",
    "QuotaState",
    "SessionStatus",
    "StepKind",
    "StepStatus",
    "TurnStatus",
    "WorkerState",
]


class AdmissionLimit(StrEnum):
    """The columns of ``admission_limits``: what an enqueue may be refused for."""

    MAX_QUEUED = "max_queued"
    MAX_RUNNING = "max_running"
    MAX_SESSION_QUEUE = "max_session_queue"
    GLOBAL_BACKLOG = "global_backlog"


class SessionStatus(StrEnum):
    """``sessions.status``: a lease exists exactly while ``running``."""

    IDLE = "idle"
    READY = "ready"
    RUNNING = "running"
    PARKED = "parked"
    CLOSED = "closed"


class TurnStatus(StrEnum):
    """``turns.status``; the last four are terminal (``finished_at`` is set)."""

    QUEUED = "queued"
    RUNNING = "running"
    PARKED = "parked"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"

    @property
    def terminal(self) -> bool:
        return self in _TERMINAL_TURNS


_TERMINAL_TURNS = frozenset(
    {TurnStatus.SUCCEEDED, TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.INTERRUPTED}
)


class StepKind(StrEnum):
    """``steps.kind``: what a durable step records."""

    MODEL = "model"
    TOOL = "tool"
    ANSWER = "answer"


class StepStatus(StrEnum):
    """``steps.status``: ``started`` before the effect, then ``committed`` or ``unknown``."""

    STARTED = "started"
    COMMITTED = "committed"
    UNKNOWN = "unknown"


class WorkerState(StrEnum):
    """``workers.state``."""

    RUNNING = "running"
    DRAINING = "draining"
    STOPPED = "stopped"


class ControlAction(StrEnum):
    """``sessions.control``: what an operator asked of a running turn."""

    CANCEL = "cancel"
    INTERRUPT = "interrupt"

    @property
    def turn_status(self) -> TurnStatus:
        """The status a turn stopped this way ends in."""
        return TurnStatus.CANCELLED if self is ControlAction.CANCEL else TurnStatus.INTERRUPTED

    @property
    def event_kind(self) -> EventKind:
        """The terminal event a turn stopped this way gets."""
        if self is ControlAction.CANCEL:
            return EventKind.TURN_CANCELLED
        return EventKind.TURN_INTERRUPTED


class QuotaState(StrEnum):
    """``quota_reservations.state``: a request counted ``reserved`` until its usage is
    known (``reconciled``) or cannot be (``unknown``: the estimate stays counted)."""

    RESERVED = "reserved"
    RECONCILED = "reconciled"
    UNKNOWN = "unknown"


class BusyStrategy(StrEnum):
    """What an enqueue does when the session already has a turn in progress."""

    ENQUEUE = "enqueue"
    REJECT = "reject"
    INTERRUPT = "interrupt"


class EventKind(StrEnum):
    """``events.kind``: dotted nouns with past-tense verbs; one terminal kind per turn."""

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

    @property
    def terminal(self) -> bool:
        """One of the kinds that end a turn: every ended turn has exactly one."""
        return self in _TERMINAL_EVENTS


_TERMINAL_EVENTS = frozenset(
    {
        EventKind.TURN_COMPLETED,
        EventKind.TURN_FAILED,
        EventKind.TURN_CANCELLED,
        EventKind.TURN_INTERRUPTED,
    }
)
