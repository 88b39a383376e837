"""Stint's vocabulary: every status, action and event kind the database knows.

The migrations' CHECK constraints are the truth; these enums mirror them so
that Python code names states instead of spelling strings, and a test
(``tests/integration/test_vocabulary.py``) fails when the two disagree. Each
member is a ``str``, so it goes to PostgreSQL and to JSON as its value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "EVENTS",
    "AdmissionLimit",
    "BusyStrategy",
    "ControlAction",
    "DeliveryStatus",
    "EventDoc",
    "EventKind",
    "QuotaState",
    "SessionStatus",
    "StepKind",
    "StepStatus",
    "TickOutcome",
    "TurnStatus",
    "WaitKind",
    "WorkerState",
]


class AdmissionLimit(StrEnum):
    """The columns of ``admission_limits``: what an enqueue may be refused for."""

    MAX_QUEUED = "max_queued"
    MAX_RUNNING = "max_running"
    MAX_SESSION_QUEUE = "max_session_queue"
    GLOBAL_BACKLOG = "global_backlog"
    MAX_SESSIONS = "max_sessions"
    MAX_DEPTH = "max_depth"  # how deep a tree of child sessions may grow (ctx.spawn)
    MAX_FANOUT = "max_fanout"  # children one turn may spawn


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
    WAIT = "wait"
    SPAWN = "spawn"


class WaitKind(StrEnum):
    """``waits.kind``: what a durable wait step waits for."""

    TIMER = "timer"
    SIGNAL = "signal"
    CHILDREN = "children"


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


class TickOutcome(StrEnum):
    """``schedule_ticks.outcome``: what a schedule's tick did."""

    ENQUEUED = "enqueued"
    BUSY = "busy"  # the session had a turn in progress and the schedule says reject
    REFUSED = "refused"  # an admission limit or a missing session refused the turn


class DeliveryStatus(StrEnum):
    """``webhook_deliveries.status``: pending until a 2xx (delivered) or the last attempt
    (failed)."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


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
    CONTROL_REQUESTED = "control.requested"
    WAIT_STARTED = "wait.started"
    WAIT_FINISHED = "wait.finished"
    SIGNAL_RECEIVED = "signal.received"
    CHILD_STARTED = "child.started"
    CHILD_FINISHED = "child.finished"

    @property
    def terminal(self) -> bool:
        """One of the kinds that end a turn: every ended turn has exactly one."""
        return self in _TERMINAL_EVENTS


_ACTOR = (
    "who acted: `door` (`api`, `dashboard` or `cli`), and `key_id`, `tenant`, `operator` "
    "for a key (the API, the dashboard) or `user` for the command line"
)
_ACTOR_IN_DATABASE = (
    "when the turn was ended in the database: " + _ACTOR + " (a live worker's end follows a "
    "`control.requested` event that names it)"
)

_TERMINAL_EVENTS = frozenset(
    {
        EventKind.TURN_COMPLETED,
        EventKind.TURN_FAILED,
        EventKind.TURN_CANCELLED,
        EventKind.TURN_INTERRUPTED,
    }
)


@dataclass(frozen=True)
class EventDoc:
    """What an event kind records, and its payload's fields (name: meaning), as
    docs/reference/events.md shows them. ``writer`` says who appends it."""

    writer: str
    what: str
    payload: Mapping[str, str]


_STEP_KEY = "the step's key, unique within the session (e.g. `<turn>:tool:0.1`)"
_ATTEMPT = "the turn's attempt (1, then +1 each time the turn starts again)"
_WORKER = "the id of the worker that wrote it"
_TERMINAL_BY_WORKER = {
    "attempt": _ATTEMPT,
    "status": "the turn's final status",
    "error": "failed, cancelled or interrupted by a worker: what ended it",
    "reason": "cancelled or interrupted: the reason given (`operator`, `timeout`, ...)",
}
_TERMINAL_BY_DATABASE = {
    "reason": "the reason given with the cancel or interrupt",
    "was": "`queued`: the turn was cancelled before it ever ran",
    "by": "`database`: no live worker held it, so the command ended it in the database",
}

EVENTS: Mapping[EventKind, EventDoc] = {
    EventKind.TURN_STARTED: EventDoc(
        "worker",
        "a turn attempt started (by a claim, or by the statement finishing the previous turn)",
        {"attempt": _ATTEMPT, "worker": _WORKER},
    ),
    EventKind.TOOL_CALLED: EventDoc(
        "worker",
        "a tool step was recorded started, before its effect",
        {"step_key": _STEP_KEY, "name": "the tool's name"},
    ),
    EventKind.TOOL_RETURNED: EventDoc(
        "worker",
        "the tool step committed with its result",
        {
            "step_key": _STEP_KEY,
            "reconciled": "true: the result was recovered from the effect journal after a crash",
        },
    ),
    EventKind.MODEL_CALLED: EventDoc(
        "worker",
        "a model step was recorded started, before the provider is called",
        {"step_key": _STEP_KEY, "name": "the model's name"},
    ),
    EventKind.MODEL_RETURNED: EventDoc(
        "worker",
        "the model step committed with the provider's answer",
        {"step_key": _STEP_KEY, "reconciled": "always false: a model call is called again"},
    ),
    EventKind.APPROVAL_REQUESTED: EventDoc(
        "worker",
        "the turn asked a question and parked; its lease and slot are free",
        {
            "step_key": "the key to answer with (`stint answer SESSION STEP_KEY VALUE`)",
            "question": "the question, any JSON",
        },
    ),
    EventKind.APPROVAL_ANSWERED: EventDoc(
        "client",
        "the question was answered; the turn is queued again and replays past it",
        {"step_key": "the question's key", "actor": _ACTOR},
    ),
    EventKind.EFFECT_UNKNOWN: EventDoc(
        "worker",
        "a step's effect may or may not have happened; it will not be run again",
        {"step_key": _STEP_KEY, "reason": "why it could not be settled"},
    ),
    EventKind.TURN_RELEASED: EventDoc(
        "worker",
        "the turn was handed back to the queue unfinished (its committed steps kept)",
        {"reason": "`drain`, `error` or `fenced`", "worker": _WORKER},
    ),
    EventKind.TURN_DEFERRED: EventDoc(
        "worker",
        "a model call waits for provider quota: the turn is queued again, ready at not_before",
        {
            "scope": "the quota scope",
            "not_before": "when the session may be claimed again (database clock)",
            "wait_s": "seconds from the hand-back to not_before",
            "waited_s": "seconds the call had already waited in its slot",
            "worker": _WORKER,
        },
    ),
    EventKind.MESSAGE: EventDoc(
        "harness",
        "whatever a harness emits with `ctx.emit(payload)`",
        {"*": "the harness's own fields"},
    ),
    EventKind.MESSAGE_DELTA: EventDoc(
        "harness",
        "streamed model text, coalesced (one event per STINT_STREAM_FLUSH_DELTAS deltas or "
        "STINT_STREAM_FLUSH_MS)",
        {
            "step_key": "the model step streaming",
            "attempt": "the turn attempt",
            "try": "the provider attempt within the step: keep the latest (attempt, try)",
            "index": "of its first delta within that try",
            "count": "deltas in this event",
            "text": "their text",
        },
    ),
    EventKind.MODEL_RETRIED: EventDoc(
        "harness",
        "a provider call failed in a way worth retrying, and will be retried",
        {
            "step_key": "the model step",
            "attempt": "the turn attempt",
            "try": "the provider attempt that failed",
            "reason": "what failed (a status, a timeout, a dropped stream)",
            "status": "the HTTP status, or null",
            "delay_s": "seconds until the retry",
        },
    ),
    EventKind.HISTORY_TRUNCATED: EventDoc(
        "harness",
        "the conversation was longer than STINT_AGENT_HISTORY_MESSAGES; the oldest were cut",
        {
            "loaded": "earlier messages loaded",
            "dropped": "earlier messages left out",
            "limit": "the setting's value",
        },
    ),
    EventKind.TURN_COMPLETED: EventDoc(
        "worker",
        "the turn succeeded; its output is on the turn",
        {"attempt": _ATTEMPT, "status": "`succeeded`"},
    ),
    EventKind.TURN_FAILED: EventDoc(
        "worker",
        "the turn failed; its error is on the turn",
        {"attempt": _ATTEMPT, "status": "`failed`", "error": "what failed"},
    ),
    EventKind.TURN_CANCELLED: EventDoc(
        "worker or client",
        "the turn was cancelled (by its worker, or in the database when no live worker held it)",
        {**_TERMINAL_BY_WORKER, **_TERMINAL_BY_DATABASE, "actor": _ACTOR_IN_DATABASE},
    ),
    EventKind.TURN_INTERRUPTED: EventDoc(
        "worker or client",
        "the turn was interrupted (an interrupt, its time limit, or in the database)",
        {
            **_TERMINAL_BY_WORKER,
            "reason": _TERMINAL_BY_WORKER["reason"],
            "by": _TERMINAL_BY_DATABASE["by"],
            "actor": _ACTOR_IN_DATABASE,
        },
    ),
    EventKind.CONTROL_REQUESTED: EventDoc(
        "client",
        "a cancel or interrupt was asked of the live worker running the turn; the turn's "
        "end follows from that worker",
        {"action": "`cancel` or `interrupt`", "reason": "the reason given", "actor": _ACTOR},
    ),
    EventKind.WAIT_STARTED: EventDoc(
        "worker",
        "the turn waits (a timer, a signal, children): it is queued again and its session "
        "ready at the wait's deadline, its slot free",
        {
            "step_key": _STEP_KEY,
            "kind": "`timer`, `signal` or `children`",
            "name": "the signal's name (a signal wait), else null",
            "deadline": "when the wait ends if nothing else ends it (database clock), or null",
            "worker": _WORKER,
        },
    ),
    EventKind.WAIT_FINISHED: EventDoc(
        "worker",
        "a wait step committed with its outcome; the turn goes on past it",
        {
            "step_key": _STEP_KEY,
            "kind": "`timer`, `signal` or `children`",
            "outcome": "`elapsed` (a timer), `signal`, `children` or `timeout`",
            "signal_id": "the consumed signal's id (outcome `signal`), else null",
        },
    ),
    EventKind.SIGNAL_RECEIVED: EventDoc(
        "client",
        "a signal was sent to the session; it is kept until a wait on its name consumes it",
        {"name": "the signal's name", "signal_id": "its id", "actor": _ACTOR},
    ),
    EventKind.CHILD_STARTED: EventDoc(
        "worker",
        "the turn started a child session (a spawn step) with its first turn queued",
        {
            "step_key": _STEP_KEY,
            "child_id": "the child session's id",
            "child_turn_id": "the child's turn",
        },
    ),
    EventKind.CHILD_FINISHED: EventDoc(
        "worker",
        "a child's turn ended (reported to its parent's log once)",
        {
            "child_id": "the child session's id",
            "child_turn_id": "the child's turn",
            "status": "the child turn's final status",
        },
    ),
}
"""Every event kind's writer, meaning and payload fields."""
