"""The worker's side of the store: claims, leases, and fenced writes.

Every write a slot makes for a session is one statement that first matches the
session row on ``lease_owner`` and ``lease_epoch`` (the fence). A worker whose
lease was taken gets ``LeaseLost`` and nothing of the statement is written;
event seqs come from ``sessions.last_event_seq`` under the same row lock, so a
session's log is always exactly 1..N.

A worker needs few connections whatever its slot count: the slots' statements
go through a ``StatementBatcher`` (group commit over a small pool), and the
registration, heartbeat and lease renewal borrow from the same pool; only the
listener holds a connection of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar
from uuid import UUID

from psycopg.types.json import Jsonb

from stint.store.batch import Late, StatementBatcher
from stint.store.children import ChildStore
from stint.store.config import StoreConfig
from stint.store.conversation import ConversationStore
from stint.store.errors import WorkerIdInUse
from stint.store.fenced import EventSpec, run_fenced
from stint.store.fetch import execute, fetch_all, fetch_one, fetch_optional
from stint.store.models import (
    ROSTER_CHANGED,
    Claim,
    ControlRequest,
    FinishResult,
    ParkResult,
    RenewedLease,
    StepRecord,
    TurnStart,
    Work,
    WorkerPeer,
)
from stint.store.pool import Pool
from stint.store.quotas import QuotaStore
from stint.store.retention import RetentionStore
from stint.store.textarray import text_array
from stint.store.translate import guarded
from stint.store.vocabulary import StepKind, StepStatus, TurnStatus, WorkerState
from stint.store.waits import WaitStore

__all__ = ["EventSpec", "SqlWorkerStore"]


_R = TypeVar("_R")

# A worker row without a recorded lease (from before migration 0004) is live while
# its heartbeat is this young.
_LIVE_SECONDS = 90.0


@dataclass(frozen=True)
class _LogEnd:
    last_event_seq: int


@dataclass(frozen=True)
class _Released:
    requeued: int
    notified: bool | None  # a claimer was woken: the session is ready


@dataclass(frozen=True)
class _Peer:
    worker_id: str
    pins: list[str]


@dataclass(frozen=True)
class _Claimed:
    session_id: UUID
    epoch: int
    turn_id: UUID | None
    seq: int | None
    input: dict[str, Any] | None
    attempts: int | None
    timeout_seconds: float | None
    traceparent: str | None
    queue_wait: float | None


@dataclass(frozen=True)
class _WorkerId:
    id: str
    notified: bool


@dataclass(frozen=True)
class _Holder:
    host: str
    pid: int
    heartbeat_age: float
    lease_seconds: float | None


@dataclass(frozen=True)
class _Finished:
    queued_turns: int
    still_held: bool
    parent_id: UUID | None  # the finished turn's session is a child of this one
    notified: bool | None  # a claimer was woken: the session was left ready
    next_session_id: UUID | None
    next_epoch: int | None
    next_turn_id: UUID | None
    next_seq: int | None
    next_input: dict[str, Any] | None
    next_attempts: int | None
    next_timeout_seconds: float | None
    next_traceparent: str | None
    next_queue_wait: float | None


def _work(
    owner: str,
    session_id: UUID,
    epoch: int,
    turn_id: UUID | None,
    seq: int | None,
    turn_input: dict[str, Any] | None,
    attempts: int | None,
    timeout_seconds: float | None,
    traceparent: str | None = None,
    queue_wait: float | None = None,
) -> Work:
    turn = None
    if turn_id is not None:
        assert seq is not None and turn_input is not None and attempts is not None
        turn = TurnStart(
            turn_id, seq, turn_input, attempts, timeout_seconds, traceparent, queue_wait
        )
    return Work(Claim(session_id, owner, epoch), turn)


class SqlWorkerStore:
    """Data access for one worker, over one small pool."""

    def __init__(self, config: StoreConfig, pool: Pool, *, concurrency: int) -> None:
        self._config = config
        self._pool = pool
        self._batcher = StatementBatcher(config, pool, concurrency=concurrency)
        self.conversation = ConversationStore(self._batcher)
        """Conversation memory (a turn's reads and fenced writes), in the slots' batches."""
        self.retention = RetentionStore(config, pool)
        """Pruning, for the worker's scheduled retention runs."""
        self.quotas = QuotaStore(config, pool, batcher=self._batcher)
        """Provider quota reservations, for harnesses that call a provider."""
        self.waits = WaitStore(config, self._batcher)
        """Durable waits' fenced statements: timers, signals, children."""
        self.children = ChildStore(config, pool, self._batcher)
        """Child sessions: spawns under the lease, reports of their ends to parents."""

    @property
    def batcher(self) -> StatementBatcher:
        return self._batcher

    @property
    def pool(self) -> Pool:
        """The worker's pool, for its other stores (the queue sampler's few reads)."""
        return self._pool

    async def close(self) -> None:
        await self._batcher.close()

    async def workers_register(
        self,
        *,
        worker_id: str,
        host: str,
        pid: int,
        version: str,
        pins: Sequence[str],
        slots: int,
        lease_seconds: float,
    ) -> None:
        """Register this process; ``WorkerIdInUse`` when a live worker has this id."""
        params = {
            "id": worker_id,
            "host": host,
            "pid": pid,
            "version": version,
            "pins": list(pins),
            "slots": slots,
            "lease_seconds": lease_seconds,
            "work_channel": self._config.work_channel,
            "roster_changed": ROSTER_CHANGED,
        }
        async with (
            guarded("workers_register", self._config),
            self._pool.connection() as conn,
            conn.transaction(),
        ):
            if await fetch_optional(conn, _WorkerId, "workers_register", **params) is not None:
                return
            holder = await fetch_one(conn, _Holder, "workers_holder", id=worker_id)
        raise WorkerIdInUse(
            worker=worker_id,
            host=holder.host,
            pid=holder.pid,
            heartbeat_age=round(holder.heartbeat_age, 1),
            lease_seconds=holder.lease_seconds,
        )

    async def workers_set_state(self, *, worker_id: str, pid: int, state: WorkerState) -> None:
        params = {
            "id": worker_id,
            "pid": pid,
            "state": state,
            "work_channel": self._config.work_channel,
            "roster_changed": ROSTER_CHANGED,
        }
        async with guarded("workers_set_state", self._config), self._pool.connection() as conn:
            await execute(conn, "workers_set_state", **params)

    async def workers_peers(self) -> list[WorkerPeer]:
        """The live running workers, in id order (the roster a notification picks from)."""
        async with guarded("workers_peers", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, _Peer, "workers_peers", live_seconds=_LIVE_SECONDS)
        return [WorkerPeer(row.worker_id, tuple(row.pins)) for row in rows]

    async def work_nudge(self) -> None:
        """Wake every worker's claimer (an empty notification on the work channel)."""
        params = {"work_channel": self._config.work_channel}
        async with guarded("work_nudge", self._config), self._pool.connection() as conn:
            await execute(conn, "work_nudge", **params)

    async def turns_claim(
        self, *, owner: str, pins: Sequence[str], limit: int | Late[int], lease_seconds: float
    ) -> list[Work]:
        """Claim up to ``limit`` sessions and start each one's next turn (a ``Late``
        limit is read as the claim is sent)."""
        params = {
            "owner": owner,
            "pins": text_array(pins),
            "limit": limit,
            "lease_seconds": lease_seconds,
            "events_channel": self._config.events_channel,
            "finishing_session": None,
        }
        rows = await self._batcher.fetch_all("turns_claim", _Claimed, params)
        return [
            _work(
                owner,
                r.session_id,
                r.epoch,
                r.turn_id,
                r.seq,
                r.input,
                r.attempts,
                r.timeout_seconds,
                r.traceparent,
                r.queue_wait,
            )
            for r in rows
        ]

    async def leases_renew(
        self, *, owner: str, pid: int, claims: Sequence[Claim], lease_seconds: float
    ) -> dict[UUID, ControlRequest | None]:
        """Renew all leases in one statement; returns the sessions still ours, each
        with the control request waiting for it, if any."""
        params = {
            "owner": owner,
            "pid": pid,
            "session_ids": [c.session_id for c in claims],
            "epochs": [c.epoch for c in claims],
            "lease_seconds": lease_seconds,
        }
        async with guarded("leases_renew", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, RenewedLease, "leases_renew", **params)
        return {row.session_id: row.request for row in rows}

    async def steps_for_turn(self, claim: Claim, turn_id: UUID) -> dict[str, StepRecord]:
        """Every step recorded for a turn (read on retries, to replay)."""
        params = {"session_id": claim.session_id, "turn_id": turn_id}
        async with guarded("steps_for_turn", self._config), self._pool.connection() as conn:
            rows = await fetch_all(conn, StepRecord, "steps_for_turn", **params)
        return {row.step_key: row for row in rows}

    async def steps_start(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        step_key: str,
        kind: StepKind,
        digest: str,
        events: Sequence[EventSpec] = (),
    ) -> None:
        await self._fenced(
            "steps_start",
            claim,
            turn_id,
            events,
            _LogEnd,
            step_key=step_key,
            kind=kind,
            digest=digest,
        )

    async def steps_finish(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        step_key: str,
        status: StepStatus,
        result: Any,
        events: Sequence[EventSpec] = (),
    ) -> None:
        """Record a started step as ``committed`` (with result) or ``unknown``."""
        await self._fenced(
            "steps_finish",
            claim,
            turn_id,
            events,
            _LogEnd,
            step_key=step_key,
            status=status,
            result=Jsonb(result) if status is StepStatus.COMMITTED else None,
        )

    async def events_append(
        self, claim: Claim, *, turn_id: UUID | None, events: Sequence[EventSpec]
    ) -> int:
        """Append events under the lease; returns the last seq written."""
        end = await self._fenced("events_append", claim, turn_id, events, _LogEnd)
        return end.last_event_seq

    async def turns_finish(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        status: TurnStatus,
        output: Any,
        error: str | None,
        events: Sequence[EventSpec],
        release: bool | Late[bool],
        reason: str | None = None,
        claim_next: bool | Late[bool] = False,
        pins: Sequence[str] = (),
        lease_seconds: float = 30.0,
    ) -> FinishResult:
        """Finish a turn and find the slot's next work in the same statement: the
        same session's next turn when more are queued and ``release`` is false;
        otherwise the session is released and, with ``claim_next``, another
        session is claimed (under ``pins``, for ``lease_seconds``). ``Late``
        flags are read as the statement is sent."""
        row = await self._fenced(
            "turns_finish",
            claim,
            turn_id,
            events,
            _Finished,
            status=status,
            output=None if output is None else Jsonb(output),
            error=error,
            release=release,
            reason=reason,
            claim_next=claim_next,
            pins=text_array(pins),
            finishing_session=claim.session_id,
            limit=1,
            lease_seconds=lease_seconds,
        )
        following = None
        if row.next_session_id is not None and row.next_epoch is not None:
            following = _work(
                claim.owner,
                row.next_session_id,
                row.next_epoch,
                row.next_turn_id,
                row.next_seq,
                row.next_input,
                row.next_attempts,
                row.next_timeout_seconds,
                row.next_traceparent,
                row.next_queue_wait,
            )
        return FinishResult(row.queued_turns, row.still_held, following, row.parent_id)

    async def turns_park(
        self, claim: Claim, *, turn_id: UUID, step_key: str, digest: str, question: Any
    ) -> ControlRequest | None:
        """Park the turn on a question: the lease is released, the slot is free.
        Returns the cancel or interrupt already requested for this turn instead,
        having parked nothing: the caller ends the turn as asked."""
        result = await self._fenced(
            "turns_park",
            claim,
            turn_id,
            (),
            ParkResult,
            step_key=step_key,
            digest=digest,
            question=Jsonb(question),
        )
        if result.parked:
            return None
        assert result.control is not None
        return ControlRequest(result.control, turn_id, result.control_reason)

    async def turns_defer(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        scope: str,
        wait_seconds: float,
        waited_seconds: float = 0.0,
    ) -> ControlRequest | None:
        """Hand the turn back to the queue until ``wait_seconds`` from now, when
        quota of ``scope`` frees: the lease is released, the slot is free, and
        no worker claims the session before then; the event records the
        ``waited_seconds`` the call spent waiting in its slot first. Returns the cancel or
        interrupt already requested for this turn instead, having changed
        nothing: the caller ends the turn as asked."""
        result = await self._fenced(
            "turns_defer",
            claim,
            turn_id,
            (),
            ParkResult,
            scope=scope,
            wait_seconds=wait_seconds,
            waited_seconds=waited_seconds,
        )
        if result.parked:
            return None
        assert result.control is not None
        return ControlRequest(result.control, turn_id, result.control_reason)

    async def sessions_release(
        self, claim: Claim, *, turn_id: UUID | None = None, reason: str = "released"
    ) -> bool:
        """Give the session back; a still-running ``turn_id`` returns to queued
        (with a ``turn.released`` event). Returns whether a turn was requeued."""
        released = await self._fenced(
            "sessions_release", claim, turn_id, (), _Released, reason=reason
        )
        return released.requeued > 0

    async def _fenced(
        self,
        name: str,
        claim: Claim,
        turn_id: UUID | None,
        events: Sequence[EventSpec],
        row: type[_R],
        **extra: Any,
    ) -> _R:
        """Run one fenced statement in the next batch (``LeaseLost`` if the fence failed)."""
        return await run_fenced(
            self._batcher, self._config, name, claim, turn_id, events, row, **extra
        )
