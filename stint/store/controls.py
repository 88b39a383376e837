"""Controls from outside a worker: cancel, interrupt, answers to parked turns, signals.

Queued turns are ended in the database directly. A running turn belongs to the
worker holding the session's lease: it is asked (a flag on the row plus a
NOTIFY) and ends the turn itself, cooperatively. When no live worker holds it
(a parked turn, or an expired lease), the database alone ends the turn and the
epoch bump fences any previous owner. Every path appends its events under the
session row lock, so cursors stay contiguous.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from psycopg import AsyncConnection
from psycopg.rows import TupleRow
from psycopg.types.json import Jsonb

from stint.store.children import SpawnedTurn, children_cascading, children_interrupting
from stint.store.config import StoreConfig
from stint.store.deadlock import retried_on_deadlock
from stint.store.errors import (
    AnswerConflict,
    IdempotencyConflict,
    NoOpenQuestion,
    UnknownSession,
    UnknownTurn,
)
from stint.store.fetch import execute, fetch_all, fetch_optional
from stint.store.pool import Pool
from stint.store.translate import guarded
from stint.store.vocabulary import ControlAction, TurnStatus

__all__ = [
    "Actor",
    "AnswerResult",
    "ControlResult",
    "ControlStore",
    "SignalResult",
    "interrupt_children",
    "stop_active_turn",
]


@dataclass(frozen=True)
class _ActiveTurn:
    id: UUID
    status: str


@dataclass(frozen=True)
class _LockedSession:
    status: str
    lease_owner: str | None
    lease_live: bool | None


@dataclass(frozen=True)
class _Cancelled:
    id: UUID
    notified: bool | None  # a claimer was woken: turns remain, the session is ready


@dataclass(frozen=True)
class _Resumed:
    id: UUID
    notified: bool


@dataclass(frozen=True)
class _TurnStatus:
    status: str


@dataclass(frozen=True)
class _PriorAnswer:
    turn_id: UUID
    same_answer: bool


@dataclass(frozen=True)
class AnswerResult:
    """The turn an answer resumed; ``created`` is false for a retry with the same value."""

    session_id: UUID
    turn_id: UUID
    step_key: str
    created: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "turn_id": str(self.turn_id),
            "step_key": self.step_key,
            "resumed": True,
            "created": self.created,
        }


@dataclass(frozen=True)
class ControlResult:
    """What a control did: queued turns it cancelled, and what became of the active turn."""

    session_id: UUID
    cancelled_queued: list[UUID] = field(default_factory=list)
    active_turn: UUID | None = None
    outcome: str = "no turn in progress"

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "cancelled_queued": [str(t) for t in self.cancelled_queued],
            "active_turn": str(self.active_turn) if self.active_turn else None,
            "outcome": self.outcome,
        }


@dataclass(frozen=True)
class SignalResult:
    """A signal kept for a session; ``created`` false: a retry found it kept already."""

    session_id: UUID
    signal_id: UUID
    name: str
    created: bool

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": str(self.session_id),
            "signal_id": str(self.signal_id),
            "name": self.name,
            "created": self.created,
        }


@dataclass(frozen=True)
class _Sent:
    id: UUID
    notified: bool | None


@dataclass(frozen=True)
class _PriorSignal:
    id: UUID
    same_signal: bool


Actor = Mapping[str, str | bool | None]
"""Who asked for a control or gave an answer: ``door`` (api, dashboard, cli) and
the key (``key_id``, ``tenant``, ``operator``) or the OS ``user``."""


def _actor_json(actor: Actor | None) -> Jsonb | None:
    return None if actor is None else Jsonb(dict(actor))


async def stop_active_turn(
    conn: AsyncConnection[TupleRow],
    config: StoreConfig,
    *,
    session_id: UUID,
    action: ControlAction,
    reason: str,
    turn_id: UUID | None,
    lease_owner: str | None,
    lease_live: bool,
    actor: Actor | None = None,
) -> tuple[UUID | None, str]:
    """Inside a transaction holding the session lock: stop its running or parked turn.
    ``actor`` (who asked) goes into the event that records it."""
    active = await fetch_optional(
        conn, _ActiveTurn, "controls_active_turn", session_id=session_id, turn_id=turn_id
    )
    if active is None:
        return None, "no turn in progress"
    if active.status == TurnStatus.RUNNING and lease_live:
        await execute(
            conn,
            "controls_request",
            session_id=session_id,
            action=action,
            turn_id=active.id,
            reason=reason,
            actor=_actor_json(actor),
            control_channel=config.control_channel,
            events_channel=config.events_channel,
        )
        return active.id, f"requested from worker {lease_owner}"
    await execute(
        conn,
        "controls_end_turn",
        session_id=session_id,
        turn_id=active.id,
        status=action.turn_status,
        kind=action.event_kind,
        reason=reason,
        actor=_actor_json(actor),
        events_channel=config.events_channel,
        work_channel=config.work_channel,
    )
    why = "parked" if active.status == TurnStatus.PARKED else "no live worker holds its lease"
    return active.id, f"{action.turn_status} in the database ({why})"


async def _lock_session(
    conn: AsyncConnection[TupleRow], session_id: UUID, tenant: str | None
) -> _LockedSession:
    """Lock the session row first (controls serialise on it); UnknownSession if absent."""
    locked = await fetch_optional(
        conn, _LockedSession, "controls_lock_session", session_id=session_id, tenant=tenant
    )
    if locked is None:
        raise UnknownSession(session=session_id)
    return locked


async def interrupt_children(
    conn: AsyncConnection[TupleRow],
    config: StoreConfig,
    children: list[SpawnedTurn],
    *,
    actor: Actor | None = None,
) -> int:
    """An interrupt's cascade, in the parent's transaction (the parent locked, its
    ``children_interrupting`` read before its turn was stopped): each child is
    locked in turn, the turn it was spawned with ends ``interrupted`` (queued or
    set aside on a wait, parked, or running with no live lease: in the database;
    running: asked of its worker), and the cascade goes on to that turn's own
    ``cascade`` children, read under the child's lock before its turn ends.
    Returns how many turns it reached."""
    reason = "parent interrupted"
    action = ControlAction.INTERRUPT
    reached = 0
    for child in children:
        locked = await _lock_session(conn, child.child_id, None)
        below = await children_interrupting(
            conn, session_id=child.child_id, turn_id=child.child_turn_id
        )
        ended = await fetch_all(
            conn,
            _Cancelled,
            "controls_end_queued",
            session_id=child.child_id,
            turn_id=child.child_turn_id,
            status=action.turn_status,
            kind=action.event_kind,
            reason=reason,
            actor=_actor_json(actor),
            events_channel=config.events_channel,
            work_channel=config.work_channel,
        )
        if not ended:
            active, _ = await stop_active_turn(
                conn,
                config,
                session_id=child.child_id,
                action=action,
                reason=reason,
                turn_id=child.child_turn_id,
                lease_owner=locked.lease_owner,
                lease_live=bool(locked.lease_live),
                actor=actor,
            )
            if active is None:
                continue  # it ended between the parent's read and this lock
        reached += 1 + await interrupt_children(conn, config, below, actor=actor)
    return reached


class ControlStore:
    """``stint cancel``, ``stint interrupt``, ``stint answer`` and ``stint signal``."""

    def __init__(self, config: StoreConfig, pool: Pool) -> None:
        self._config = config
        self._pool = pool

    async def control(
        self,
        *,
        session_id: UUID,
        action: ControlAction,
        reason: str,
        turn_id: UUID | None = None,
        within_tenant: str | None = None,
        actor: Actor | None = None,
    ) -> ControlResult:
        """``cancel``: queued turns (or ``turn_id``) directly, and the running one.
        ``interrupt``: the running turn only, and the turns its ``cascade`` children
        were spawned with (whatever their state; the parent's own turn, when it is
        set aside waiting for them, waits on and sees them end). With
        ``within_tenant``, a session of another tenant is an ``UnknownSession``.
        ``actor`` (who asked, through which door) is recorded in every event the
        control writes."""
        action = ControlAction(action)
        operation = f"control {action}"

        async def once() -> ControlResult:
            async with (
                guarded(operation, self._config),
                self._pool.connection() as conn,
                conn.transaction(),
            ):
                return await self._control_locked(
                    conn,
                    session_id=session_id,
                    action=action,
                    reason=reason,
                    turn_id=turn_id,
                    within_tenant=within_tenant,
                    actor=actor,
                )

        # The cascade locks parent, then child: against a worker's batch, which
        # locks in id order, it may lose a deadlock, and then runs again.
        return await retried_on_deadlock(operation, once)

    async def _control_locked(
        self,
        conn: AsyncConnection[TupleRow],
        *,
        session_id: UUID,
        action: ControlAction,
        reason: str,
        turn_id: UUID | None,
        within_tenant: str | None,
        actor: Actor | None,
    ) -> ControlResult:
        """The control, inside its transaction; a cancel or an interrupt goes on to
        the unfinished children its turns spawned with ``cascade`` (and theirs), each
        locked after its parent, in the same transaction."""
        locked = await _lock_session(conn, session_id, within_tenant)
        if turn_id is not None:
            named = await fetch_optional(
                conn,
                _TurnStatus,
                "controls_turn_of_session",
                session_id=session_id,
                turn_id=turn_id,
            )
            if named is None:
                raise UnknownTurn(session=session_id, turn=turn_id)
            if TurnStatus(named.status).terminal:
                return ControlResult(
                    session_id, [], None, f"turn already {named.status}; nothing to do"
                )
        # Read before anything ends: the children of the turn as it is now (an
        # interrupt's turn may be running, parked, or set aside waiting for them).
        interrupting = (
            await children_interrupting(conn, session_id=session_id, turn_id=turn_id)
            if action is ControlAction.INTERRUPT
            else []
        )
        cancelled: list[UUID] = []
        if action is ControlAction.CANCEL:
            rows = await fetch_all(
                conn,
                _Cancelled,
                "controls_end_queued",
                session_id=session_id,
                turn_id=turn_id,
                status=action.turn_status,
                kind=action.event_kind,
                reason=reason,
                actor=_actor_json(actor),
                events_channel=self._config.events_channel,
                work_channel=self._config.work_channel,
            )
            cancelled = [row.id for row in rows]
        active, outcome = await stop_active_turn(
            conn,
            self._config,
            session_id=session_id,
            action=action,
            reason=reason,
            turn_id=turn_id,
            lease_owner=locked.lease_owner,
            lease_live=bool(locked.lease_live),
            actor=actor,
        )
        if action is ControlAction.CANCEL:
            ended = cancelled + ([active] if active is not None else [])
            for child in await children_cascading(conn, session_id=session_id, turn_ids=ended):
                await self._control_locked(
                    conn,
                    session_id=child,
                    action=action,
                    reason="parent cancelled",
                    turn_id=None,
                    within_tenant=None,
                    actor=actor,
                )
        interrupted = await interrupt_children(conn, self._config, interrupting, actor=actor)
        if active is None and cancelled:
            outcome = f"cancelled {len(cancelled)} queued turn(s); no turn was running"
        if interrupted:
            outcome = f"{outcome}; interrupted {interrupted} child turn(s) (cascade)"
        return ControlResult(session_id, cancelled, active, outcome)

    async def answer(
        self,
        *,
        session_id: UUID,
        step_key: str,
        answer: Any,
        within_tenant: str | None = None,
        actor: Actor | None = None,
    ) -> AnswerResult:
        """Record an answer; the parked turn is queued again.

        Answering again with the same value is a retry and succeeds without
        writing (``created`` false); another value is refused (``AnswerConflict``).
        An unknown session (or another tenant's) is ``UnknownSession``; a known one
        with no such open question is ``NoOpenQuestion``.
        """
        params = {
            "session_id": session_id,
            "step_key": step_key,
            "answer": Jsonb(answer),
            "actor": _actor_json(actor),
            "events_channel": self._config.events_channel,
            "work_channel": self._config.work_channel,
        }
        async with (
            guarded("answer", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            await _lock_session(conn, session_id, within_tenant)
            resumed = await fetch_optional(conn, _Resumed, "answers_record", **params)
            if resumed is not None:
                return AnswerResult(session_id, resumed.id, step_key, created=True)
            prior = await fetch_optional(
                conn,
                _PriorAnswer,
                "answers_find_committed",
                session_id=session_id,
                step_key=step_key,
                answer=params["answer"],
            )
        if prior is None:
            raise NoOpenQuestion(session=session_id, step_key=step_key)
        if not prior.same_answer:
            raise AnswerConflict(session=session_id, step_key=step_key)
        return AnswerResult(session_id, prior.turn_id, step_key, created=False)

    async def signal(
        self,
        *,
        session_id: UUID,
        name: str,
        idempotency_key: str,
        payload: Any,
        within_tenant: str | None = None,
        actor: Actor | None = None,
    ) -> SignalResult:
        """Keep a signal for the session until a wait on ``name`` consumes it (the
        oldest first, each by exactly one wait); a turn waiting for it now is woken.

        A retry with the same key, name and payload returns the same signal
        (``created`` false); the key with another name or payload is refused
        (``IdempotencyConflict``). An unknown session (or another tenant's) is
        ``UnknownSession``. A refusal writes nothing.
        """
        params = {
            "session_id": session_id,
            "signal_name": name,
            "idempotency_key": idempotency_key,
            "payload": Jsonb(payload),
            "actor": _actor_json(actor),
            "events_channel": self._config.events_channel,
            "work_channel": self._config.work_channel,
        }
        async with (
            guarded("signal", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            await _lock_session(conn, session_id, within_tenant)
            sent = await fetch_optional(conn, _Sent, "signals_send", **params)
            if sent is not None:
                return SignalResult(session_id, sent.id, name, created=True)
            prior = await fetch_optional(
                conn,
                _PriorSignal,
                "signals_find_by_key",
                session_id=session_id,
                signal_name=name,
                idempotency_key=idempotency_key,
                payload=params["payload"],
            )
        if prior is None or not prior.same_signal:
            raise IdempotencyConflict(session=session_id, idempotency_key=idempotency_key)
        return SignalResult(session_id, prior.id, name, created=False)
