"""An in-memory stand-in for the worker's store, for unit tests of the services.

It keeps only what the lifecycle logic depends on: leases (owner, epoch),
queued turns, steps and a write log. Every write checks the fence like the
real statements do and raises ``LeaseLost`` when it fails, so the services
can be driven through lease loss, controls and drains without a database.
The SQL itself is tested against real PostgreSQL elsewhere; nothing here
tries to imitate it beyond the fence.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from stint.store.batch import Late, now
from stint.store.children import ChildStore
from stint.store.conversation import ConversationStore
from stint.store.errors import LeaseLost
from stint.store.fenced import EventSpec
from stint.store.models import (
    Claim,
    ControlRequest,
    FinishResult,
    StepRecord,
    TurnStart,
    Work,
    WorkerPeer,
)
from stint.store.quotas import QuotaStore
from stint.store.vocabulary import (
    ControlAction,
    StepKind,
    StepStatus,
    TurnStatus,
    WorkerState,
)
from stint.store.waits import WaitStore


@dataclass
class FakeTurn:
    id: UUID
    session_id: UUID
    input: dict[str, Any]
    status: TurnStatus = TurnStatus.QUEUED
    attempts: int = 0
    output: Any = None


@dataclass
class FakeSession:
    id: UUID
    owner: str | None = None
    epoch: int = 0
    turns: list[FakeTurn] = field(default_factory=list)
    control: ControlRequest | None = None

    @property
    def open_turns(self) -> list[FakeTurn]:
        return [t for t in self.turns if not t.status.terminal]


class FakeWorkerStore:
    """Implements ``stint.worker.protocols.WorkerStore`` in memory."""

    def __init__(self) -> None:
        self.sessions: dict[UUID, FakeSession] = {}
        self.steps: dict[tuple[UUID, str], StepRecord] = {}
        self.events: list[tuple[UUID, str]] = []
        self.states: list[WorkerState] = []
        self.released: list[tuple[UUID, UUID | None, str]] = []
        self.deferred: list[tuple[UUID, str, float]] = []
        self.renewals = 0
        self.peers: list[WorkerPeer] = []
        self.peer_reads = 0
        self.peers_error: BaseException | None = None
        self.nudges = 0
        self.nudge_error: BaseException | None = None
        self.nudge_gate: asyncio.Event | None = None  # set: a nudge on its way waits for it
        self.renew_error: BaseException | None = None
        self.while_renewing: Callable[[], None] = lambda: None  # e.g. the clock moves on

    @property
    def conversation(self) -> ConversationStore:
        raise NotImplementedError("the fake keeps no conversation memory")

    @property
    def quotas(self) -> QuotaStore:
        raise NotImplementedError("the fake reserves no provider quota")

    @property
    def children(self) -> ChildStore:
        raise NotImplementedError("the fake spawns no children")

    @property
    def waits(self) -> WaitStore:
        raise NotImplementedError("the fake keeps no durable waits")

    # -- test setup ----------------------------------------------------------

    def add_session(self, *inputs: dict[str, Any]) -> UUID:
        sid = uuid.uuid4()
        session = FakeSession(sid)
        session.turns = [FakeTurn(uuid.uuid4(), sid, dict(i)) for i in inputs]
        self.sessions[sid] = session
        return sid

    def steal(self, session_id: UUID) -> None:
        """Another worker takes the lease over (its epoch is newer)."""
        session = self.sessions[session_id]
        session.owner = "another-worker"
        session.epoch += 1

    def request(self, session_id: UUID, action: ControlAction) -> None:
        session = self.sessions[session_id]
        running = next(t for t in session.turns if t.status is TurnStatus.RUNNING)
        session.control = ControlRequest(action, running.id, "test")

    def turn(self, session_id: UUID, index: int = 0) -> FakeTurn:
        return self.sessions[session_id].turns[index]

    # -- the WorkerStore protocol --------------------------------------------

    def _fenced(self, claim: Claim) -> FakeSession:
        session = self.sessions[claim.session_id]
        if session.owner != claim.owner or session.epoch != claim.epoch:
            raise LeaseLost(session=claim.session_id, epoch=claim.epoch)
        return session

    def _release(self, session: FakeSession) -> None:
        session.owner = None

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
        self.states.append(WorkerState.RUNNING)

    async def workers_set_state(self, *, worker_id: str, pid: int, state: WorkerState) -> None:
        self.states.append(state)

    async def workers_peers(self) -> list[WorkerPeer]:
        self.peer_reads += 1
        if self.peers_error is not None:
            raise self.peers_error
        return list(self.peers)

    async def work_nudge(self) -> None:
        if self.nudge_gate is not None:
            await self.nudge_gate.wait()
        if self.nudge_error is not None:
            raise self.nudge_error
        self.nudges += 1

    def _start_next(self, session: FakeSession) -> TurnStart | None:
        for turn in session.turns:
            if turn.status in (TurnStatus.QUEUED, TurnStatus.RUNNING):
                turn.status = TurnStatus.RUNNING
                turn.attempts += 1
                self.events.append((session.id, "turn.started"))
                return TurnStart(turn.id, 1, turn.input, turn.attempts)
        return None

    def _claim(self, owner: str, limit: int, *, but: UUID | None = None) -> list[Work]:
        works: list[Work] = []
        for session in self.sessions.values():
            if len(works) == limit:
                break
            if (
                session.id != but
                and session.owner is None
                and any(t.status in (TurnStatus.QUEUED, TurnStatus.RUNNING) for t in session.turns)
            ):
                session.owner = owner
                session.epoch += 1
                claim = Claim(session.id, owner, session.epoch)
                works.append(Work(claim, self._start_next(session)))
        return works

    async def turns_claim(
        self, *, owner: str, pins: Sequence[str], limit: int | Late[int], lease_seconds: float
    ) -> list[Work]:
        return self._claim(owner, now(limit))

    async def leases_renew(
        self, *, owner: str, pid: int, claims: Sequence[Claim], lease_seconds: float
    ) -> dict[UUID, ControlRequest | None]:
        self.renewals += 1
        self.while_renewing()
        if self.renew_error is not None:
            raise self.renew_error
        kept: dict[UUID, ControlRequest | None] = {}
        for claim in claims:
            session = self.sessions[claim.session_id]
            if session.owner == claim.owner and session.epoch == claim.epoch:
                kept[claim.session_id] = session.control
        return kept

    async def steps_for_turn(self, claim: Claim, turn_id: UUID) -> dict[str, StepRecord]:
        return {key: step for (tid, key), step in self.steps.items() if tid == turn_id}

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
        self._fenced(claim)
        self.steps[(turn_id, step_key)] = StepRecord(
            step_key, kind, StepStatus.STARTED, digest, None
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
        self._fenced(claim)
        started = self.steps[(turn_id, step_key)]
        self.steps[(turn_id, step_key)] = StepRecord(
            step_key, started.kind, status, started.request_digest, result
        )

    async def events_append(
        self, claim: Claim, *, turn_id: UUID | None, events: Sequence[EventSpec]
    ) -> int:
        self._fenced(claim)
        self.events.extend((claim.session_id, kind) for kind, _ in events)
        return len(self.events)

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
        release, claim_next = now(release), now(claim_next)
        session = self._fenced(claim)
        turn = next(t for t in session.turns if t.id == turn_id)
        turn.status = status
        turn.output = output
        self.events.extend((claim.session_id, kind) for kind, _ in events)
        if session.control is not None and session.control.turn_id == turn_id:
            session.control = None
        queued = len(session.open_turns)
        if queued > 0 and not release:
            return FinishResult(queued, True, Work(claim, self._start_next(session)))
        self._release(session)
        works = self._claim(claim.owner, 1, but=session.id) if claim_next else []
        return FinishResult(queued, False, works[0] if works else None)

    async def turns_park(
        self, claim: Claim, *, turn_id: UUID, step_key: str, digest: str, question: Any
    ) -> ControlRequest | None:
        session = self._fenced(claim)
        if session.control is not None and session.control.turn_id == turn_id:
            return session.control
        next(t for t in session.turns if t.id == turn_id).status = TurnStatus.PARKED
        self._release(session)
        return None

    async def turns_defer(
        self,
        claim: Claim,
        *,
        turn_id: UUID,
        scope: str,
        wait_seconds: float,
        waited_seconds: float = 0.0,
    ) -> ControlRequest | None:
        session = self._fenced(claim)
        if session.control is not None and session.control.turn_id == turn_id:
            return session.control
        next(t for t in session.turns if t.id == turn_id).status = TurnStatus.QUEUED
        self._release(session)
        self.events.append((session.id, "turn.deferred"))
        self.deferred.append((turn_id, scope, wait_seconds))
        return None

    async def sessions_release(
        self, claim: Claim, *, turn_id: UUID | None = None, reason: str = "released"
    ) -> bool:
        session = self._fenced(claim)
        requeued = False
        for turn in session.turns:
            if turn.id == turn_id and turn.status is TurnStatus.RUNNING:
                turn.status = TurnStatus.QUEUED
                requeued = True
        self._release(session)
        self.released.append((claim.session_id, turn_id, reason))
        return requeued


class FakeNotifications:
    """A notification source whose notifications the test sends by hand."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[tuple[str, str]] = asyncio.Queue()
        self.subscriptions = 0

    def __call__(self) -> contextlib.AbstractAsyncContextManager[FakeNotifications]:
        return self._subscribed()

    @contextlib.asynccontextmanager
    async def _subscribed(self) -> AsyncIterator[FakeNotifications]:
        self.subscriptions += 1
        yield self

    async def notifications(self) -> AsyncIterator[tuple[str, str]]:
        while True:
            yield await self.queue.get()
