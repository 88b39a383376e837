"""A model of Stint's store protocol, run against real PostgreSQL under a chosen interleaving.

Two simulated workers and two clients (``tests.interleaving`` actors, each with
a backend of its own) call the real store methods: enqueue, claim, finish (with
and without claim-next, keeping or releasing), park, answer, cancel,
interrupt, defer (the quota hand-back), release (the drain's hand-back),
renew, steps, the conversation's messages (the agents harness's write, with the
lease and with a lost one), quota reservations and settlements, a wait for a
signal (begin, settle, set aside) and a signal sent, a spawn of a child session
(a session like the others from then on; one, or two in one statement as
``spawn_many``), a join of a turn's children (begin, settle, set aside)
and a child's end reported to its parent (after the child's finish, as the
runner does, and by the sweep); the environment lets a
lease run out; a worker that lost a lease writes with it anyway (a fenced
owner). Each move either starts one call on an idle actor or lets one stopped
actor send its next statement; after every move the actors settle (each
stopped, blocked on a lock, or done) and every invariant is checked:

* contiguous cursors, consistent identities, no zombie write (``stint check``'s
  own evidence);
* one terminal event per ended turn, none for any other;
* no stranded lease: every live lease a worker holds in the database is one
  that worker's slots hold, with its turn running (a worker mid-call is
  allowed what its call may be about to return);
* quota: no more reservations occupy the window than the scope allows, and
  the books balance;
* signals: no turn is left set aside until later while a signal it waits for
  is kept (a lost wake), and each consumed signal went to exactly one
  committed wait, whose result is that signal;
* conversation: every message carries the epoch of the lease that ran its
  turn (a fenced owner's write adds nothing);
* children: a parent set aside on a join is resumed (ready now) once all its
  children's ends are reported, no child is created twice (one session
  per children row, one row per spawn step), and no turn starts a child once a
  cancel or an interrupt of it was requested (no ``child.started`` after its
  ``control.requested``: such a child is reached by no cascade);
* at the end, every queued turn of a session nobody holds is claimable and
  is started by the next claim.

The workers behave as the runner does: a claim that started nothing is handed
back next; a finish that returns no next work ends the slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid4

from hypothesis import strategies as st

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.children import ChildStore, NewChild, NewChildren
from stint.store.client import ClientStore
from stint.store.controls import ControlStore
from stint.store.errors import (
    AdmissionRefused,
    AnswerConflict,
    LeaseLost,
    NoOpenQuestion,
    TurnStopRequested,
)
from stint.store.models import Claim, TurnStart, Work
from stint.store.pool import Pool
from stint.store.quotas import QuotaLimits, QuotaStore
from stint.store.vocabulary import (
    AdmissionLimit,
    ControlAction,
    EventKind,
    StepKind,
    StepStatus,
    TurnStatus,
    WaitKind,
)
from stint.store.waits import WaitUntil
from stint.store.worker_store import SqlWorkerStore
from tests.interleaving import Actor, Interleaver
from tests.workers import fetch, set_limits

__all__ = ["Race", "RaceFailure"]

SESSIONS = 2
TREE = 4  # sessions at most, children included: spawns stop there
SCOPE = "p"
RPM = 2
LEASE = 60.0

_TERMINAL = [str(k) for k in EventKind if k.terminal]
_MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
_CHOICES = 256  # more than the moves ever offered at once


class RaceFailure(AssertionError):
    """An invariant broke; the message names it, with the history that led there."""


@dataclass
class Holding:
    """A session one worker's slot holds, and the turn it runs (None: claimed
    with nothing to start; the slot gives it back next)."""

    claim: Claim
    turn: TurnStart | None


@dataclass
class Reservation:
    claim: Claim
    key: str


@dataclass(eq=False)
class Worker:
    name: str
    actor: Actor
    store: SqlWorkerStore
    held: dict[UUID, Holding] = field(default_factory=dict)
    lost: list[Claim] = field(default_factory=list)
    reservations: list[Reservation] = field(default_factory=list)
    # What the call in flight may be about to hand this worker (None: no call).
    in_flight: str | None = None

    def take(self, work: Work) -> None:
        self.held[work.claim.session_id] = Holding(work.claim, work.turn)

    def drop(self, session_id: UUID, *, lost: bool) -> None:
        holding = self.held.pop(session_id, None)
        if holding is not None and lost:
            self.lost.append(holding.claim)


@dataclass(eq=False)
class Client:
    name: str
    actor: Actor
    enqueues: ClientStore
    controls: ControlStore


Move = tuple[str, Callable[[], Awaitable[None]] | None]


class Race:
    """One example: ``await run(data, steps)``; raises ``RaceFailure``."""

    def __init__(self, db: ScratchTarget, observer: Pool, journals: Any) -> None:
        self._db = db
        self._observer = observer
        self._journals = journals
        # Deadlines long enough that a slow or busy machine never turns a wait the
        # scheduler chose into a timeout (which would change the history between
        # two runs of one example).
        self._config = dataclasses.replace(
            db.config,
            statement_timeout=120.0,
            lock_timeout=120.0,
            idle_in_transaction_timeout=300.0,
        )
        self._interleaver = Interleaver(dataclasses.replace(db, config=self._config), observer)
        self.workers: list[Worker] = []
        self.clients: list[Client] = []
        self.sessions: list[UUID] = []
        self.spawned: dict[UUID, list[UUID]] = {}  # a turn's children, in spawn order
        self.history: list[str] = []
        self.offered: list[list[str]] = []  # the moves offered at each step (for debugging)
        self._keys = itertools.count()

    # -- set-up -------------------------------------------------------------

    async def open(self) -> None:
        for name in ("w1", "w2"):
            actor = await self._interleaver.actor(name)
            store = SqlWorkerStore(self._config, actor.pool, concurrency=1)
            self.workers.append(Worker(name, actor, store))
        for name in ("c1", "c2"):
            actor = await self._interleaver.actor(name)
            self.clients.append(
                Client(
                    name,
                    actor,
                    ClientStore(self._config, actor.pool),
                    ControlStore(self._config, actor.pool),
                )
            )

    async def reset(self) -> None:
        """An empty database for the next example (the actors are kept)."""
        async with self._observer.connection() as conn:
            await conn.execute(
                "TRUNCATE events, steps, conversation_messages, quota_reservations, turns, "
                "sessions, workers, quota_scopes CASCADE"
            )
        await set_limits(self._observer, self._db.config, {AdmissionLimit.MAX_SESSION_QUEUE: 1000})
        await QuotaStore(self._db.config, self._observer).quota_set(
            SCOPE, QuotaLimits(rpm=RPM, window_seconds=600)
        )
        for worker in self.workers:
            worker.held.clear()
            worker.lost.clear()
            worker.reservations.clear()
            worker.in_flight = None
            worker.actor.tasks.clear()
        for client in self.clients:
            client.actor.tasks.clear()
        self.history.clear()
        self.offered.clear()
        self.spawned.clear()
        starter = ClientStore(self._db.config, self._observer)
        self.sessions = []
        for n in range(SESSIONS):
            made = await starter.turns_enqueue(
                session_id=None, idempotency_key=f"seed{n}", turn_input={"n": n}
            )
            self.sessions.append(made.session_id)

    async def close(self) -> None:
        await self._interleaver.close()

    async def stop_calls(self) -> None:
        """Let every call still stopped or running end (an example that failed):
        gates open, each call runs out or fails, and the next example starts
        clean (a batch stopped at a gate would otherwise hold its worker's
        batcher for good)."""
        for actor in self._interleaver.actors:
            actor.pause = lambda _: False
            if actor.waiting is not None:
                actor.go()
        for actor in self._interleaver.actors:
            await asyncio.gather(*actor.tasks, return_exceptions=True)
            actor.tasks.clear()
            actor.pause = lambda _: True

    # -- the example --------------------------------------------------------

    async def run(self, data: st.DataObject, steps: int) -> None:
        for _ in range(steps):
            moves = self._moves()
            if not moves:
                break
            self.offered.append([name for name, _ in moves])
            # A draw of fixed bounds, folded onto the moves offered: the offer can
            # differ between two runs of one example when PostgreSQL hands a
            # contended lock to one waiter or another, and a draw whose bounds
            # moved would make hypothesis call the whole test flaky.
            choice = data.draw(st.integers(0, _CHOICES - 1), label="move")
            label, move = moves[choice % len(moves)]
            self.history.append(label)
            if move is not None:
                await move()
            await self._settle_and_check()
        await self._wind_down()

    def _fail(self, what: str) -> RaceFailure:
        steps = "\n  ".join(self.history)
        return RaceFailure(f"{what}\nafter:\n  {steps}")

    # -- moves ---------------------------------------------------------------

    def _moves(self) -> list[Move]:
        moves: list[Move] = []
        for actor in self._interleaver.actors:
            if actor.waiting is not None:
                moves.append((f"{actor.name} sends {actor.waiting}", self._go(actor)))
        for worker in self.workers:
            if worker.actor.busy:
                continue
            empty = sorted(
                (h for h in worker.held.values() if h.turn is None),
                key=lambda h: self.sessions.index(h.claim.session_id),
            )
            if empty:  # the runner gives a session back before anything else
                holding = empty[0]
                moves.append(
                    (f"{worker.name} gives back an empty claim", self._release(worker, holding))
                )
                continue
            moves.append((f"{worker.name} claims", self._claim(worker)))
            # In session order (ids are random: an order by id would change the
            # moves offered between runs of one example, and hypothesis replays them).
            for holding in sorted(
                worker.held.values(), key=lambda h: self.sessions.index(h.claim.session_id)
            ):
                s = self._label(holding.claim.session_id)
                for release, claim_next in ((False, True), (True, True), (False, False)):
                    moves.append(
                        (
                            f"{worker.name} finishes on {s} (release={release}, "
                            f"claim_next={claim_next})",
                            self._finish(worker, holding, release=release, claim_next=claim_next),
                        )
                    )
                moves.append((f"{worker.name} parks on {s}", self._park(worker, holding)))
                moves.append((f"{worker.name} records a step on {s}", self._step(worker, holding)))
                moves.append(
                    (f"{worker.name} remembers messages on {s}", self._remember(worker, holding))
                )
                moves.append(
                    (f"{worker.name} reserves quota on {s}", self._reserve(worker, holding))
                )
                moves.append((f"{worker.name} defers on {s}", self._defer(worker, holding)))
                moves.append(
                    (f"{worker.name} waits for go on {s}", self._wait(worker, holding, join=False))
                )
                if len(self.sessions) < TREE:
                    moves.append(
                        (f"{worker.name} spawns on {s}", self._spawn(worker, holding, join=False))
                    )
                    moves.append(  # spawn, then join: the delegating harness's shape
                        (f"{worker.name} delegates on {s}", self._spawn(worker, holding, join=True))
                    )
                if len(self.sessions) < TREE - 1:
                    moves.append(  # two children in one statement, then join them
                        (
                            f"{worker.name} delegates two on {s}",
                            self._spawn(worker, holding, join=True, many=2),
                        )
                    )
                if holding.turn is not None and self.spawned.get(holding.turn.turn_id):
                    moves.append(
                        (
                            f"{worker.name} joins its children on {s}",
                            self._wait(worker, holding, join=True),
                        )
                    )
                moves.append((f"{worker.name} hands back {s}", self._release(worker, holding)))
                moves.append((f"lease on {s} runs out", self._expire(holding.claim.session_id)))
            if worker.held:
                moves.append((f"{worker.name} renews", self._renew(worker)))
            if len(self.sessions) > SESSIONS:
                moves.append((f"{worker.name} sweeps children's ends", self._sweep(worker)))
            if worker.reservations:
                moves.append((f"{worker.name} settles quota", self._settle(worker)))
            if worker.lost:
                moves.append((f"{worker.name} writes with a lost lease", self._zombie(worker)))
                moves.append(
                    (
                        f"{worker.name} remembers messages with a lost lease",
                        self._zombie(worker, messages=True),
                    )
                )
        for client in self.clients:
            if client.actor.busy:
                continue
            for session_id in self.sessions:
                s = self._label(session_id)
                moves.append((f"{client.name} enqueues on {s}", self._enqueue(client, session_id)))
                moves.append(
                    (
                        f"{client.name} cancels on {s}",
                        self._control(client, session_id, ControlAction.CANCEL),
                    )
                )
                moves.append(
                    (
                        f"{client.name} interrupts on {s}",
                        self._control(client, session_id, ControlAction.INTERRUPT),
                    )
                )
                moves.append((f"{client.name} answers on {s}", self._answer(client, session_id)))
                moves.append((f"{client.name} signals go on {s}", self._signal(client, session_id)))
        return moves

    def _label(self, session_id: UUID) -> str:
        return f"s{self.sessions.index(session_id)}"

    def _go(self, actor: Actor) -> Callable[[], Awaitable[None]]:
        async def go() -> None:
            actor.go()

        return go

    def _call(
        self, worker: Worker, what: str, work: Callable[[], Awaitable[None]]
    ) -> Callable[[], Awaitable[None]]:
        async def start() -> None:
            worker.in_flight = what

            async def wrapped() -> None:
                try:
                    await work()
                finally:
                    worker.in_flight = None

            worker.actor.start(wrapped())

        return start

    def _claim(self, worker: Worker) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            works = await worker.store.turns_claim(
                owner=worker.name, pins=[], limit=2, lease_seconds=LEASE
            )
            for found in works:
                worker.take(found)

        return self._call(worker, "claim", work)

    def _finish(
        self, worker: Worker, holding: Holding, *, release: bool, claim_next: bool
    ) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            assert holding.turn is not None
            sid = holding.claim.session_id
            try:
                result = await worker.store.turns_finish(
                    holding.claim,
                    turn_id=holding.turn.turn_id,
                    status=TurnStatus.SUCCEEDED,
                    output={"ok": True},
                    error=None,
                    events=[(EventKind.TURN_COMPLETED, {"attempt": holding.turn.attempts})],
                    release=release,
                    claim_next=claim_next,
                    lease_seconds=LEASE,
                )
            except LeaseLost:
                worker.drop(sid, lost=True)
                return
            worker.drop(sid, lost=False)
            if result.next is not None:  # the runner's slot moves on to it
                worker.take(result.next)
            await self._report_to_parent(worker, sid)

        return self._call(worker, "finish", work)

    def _park(self, worker: Worker, holding: Holding) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            assert holding.turn is not None
            sid = holding.claim.session_id
            try:
                requested = await worker.store.turns_park(
                    holding.claim,
                    turn_id=holding.turn.turn_id,
                    step_key=f"ask-{holding.turn.turn_id}",
                    digest="d",
                    question={"q": 1},
                )
            except LeaseLost:
                worker.drop(sid, lost=True)
                return
            if requested is None:
                worker.drop(sid, lost=False)
                return
            # A cancel or interrupt came first: the runner ends the turn as asked.
            await self._end_as_asked(worker, holding, requested.action)

        return self._call(worker, "park", work)

    async def _end_as_asked(self, worker: Worker, holding: Holding, action: ControlAction) -> None:
        assert holding.turn is not None
        sid = holding.claim.session_id
        try:
            result = await worker.store.turns_finish(
                holding.claim,
                turn_id=holding.turn.turn_id,
                status=action.turn_status,
                output=None,
                error=str(action),
                events=[(action.event_kind, {"attempt": holding.turn.attempts})],
                release=False,
                claim_next=True,
                lease_seconds=LEASE,
            )
        except LeaseLost:
            worker.drop(sid, lost=True)
            return
        worker.drop(sid, lost=False)
        if result.next is not None:
            worker.take(result.next)
        await self._report_to_parent(worker, sid)

    async def _report_to_parent(self, worker: Worker, session_id: UUID) -> None:
        """As the runner after a finish: a child tells its parent at once."""
        if session_id in self.sessions[SESSIONS:]:
            await worker.store.children.children_report(child_id=session_id)

    def _defer(self, worker: Worker, holding: Holding) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            assert holding.turn is not None
            sid = holding.claim.session_id
            try:
                requested = await worker.store.turns_defer(
                    holding.claim, turn_id=holding.turn.turn_id, scope=SCOPE, wait_seconds=0.0
                )
            except LeaseLost:
                worker.drop(sid, lost=True)
                return
            if requested is None:
                worker.drop(sid, lost=False)
                return
            await self._end_as_asked(worker, holding, requested.action)

        return self._call(worker, "defer", work)

    def _wait(
        self, worker: Worker, holding: Holding, *, join: bool
    ) -> Callable[[], Awaitable[None]]:
        return self._call(worker, "join" if join else "wait", self._waiting(worker, holding, join))

    def _waiting(
        self, worker: Worker, holding: Holding, join: bool
    ) -> Callable[[], Awaitable[None]]:
        """As ``TurnContext.wait_for("go")`` or (``join``) ``join`` of every child the
        turn spawned, ``wait="all"``: record the wait, settle it, else set the turn aside."""

        async def work() -> None:
            assert holding.turn is not None
            sid, turn_id = holding.claim.session_id, holding.turn.turn_id
            key = f"{'join' if join else 'wait'}-{next(self._keys)}"
            waits = worker.store.waits
            try:
                await waits.waits_begin(
                    holding.claim,
                    turn_id=turn_id,
                    step_key=key,
                    digest="d",
                    kind=WaitKind.CHILDREN if join else WaitKind.SIGNAL,
                    until=WaitUntil(),
                    name=None if join else "go",
                    children=list(self.spawned[turn_id]) if join else None,
                    wait_all=True if join else None,
                )
                if await waits.waits_settle(holding.claim, turn_id=turn_id, step_key=key):
                    return  # a kept signal, or every child reported: the turn goes on, held
                requested = await waits.turns_wait(holding.claim, turn_id=turn_id, step_key=key)
            except LeaseLost:
                worker.drop(sid, lost=True)
                return
            if requested is None:
                worker.drop(sid, lost=False)
                return
            await self._end_as_asked(worker, holding, requested.action)

        return work

    def _spawn(
        self, worker: Worker, holding: Holding, *, join: bool, many: int = 0
    ) -> Callable[[], Awaitable[None]]:
        """As ``TurnContext.spawn`` (or, with ``many``, ``spawn_many``: that many
        children in one statement; then, with ``join``, a join of every child of the
        turn): each child becomes one of the example's sessions."""

        async def work() -> None:
            assert holding.turn is not None
            turn_id = holding.turn.turn_id
            try:
                if many:
                    keys = [f"spawn-{next(self._keys)}" for _ in range(many)]
                    spawned = await worker.store.children.children_spawn_many(
                        holding.claim,
                        turn_id=turn_id,
                        children=NewChildren(keys, ["d"] * many, [{}] * many),
                    )
                    children = [child.child_id for child in spawned]
                else:
                    child = await worker.store.children.children_spawn(
                        holding.claim,
                        turn_id=turn_id,
                        step_key=f"spawn-{next(self._keys)}",
                        digest="d",
                        child=NewChild({}),
                    )
                    children = [child.child_id]
            except LeaseLost:
                worker.drop(holding.claim.session_id, lost=True)
                return
            except TurnStopRequested as asked:  # the runner ends the turn as asked
                await self._end_as_asked(worker, holding, asked.request.action)
                return
            self.sessions.extend(children)
            self.spawned.setdefault(turn_id, []).extend(children)
            if join:
                await self._waiting(worker, holding, join=True)()

        what = "spawn_many" if many else "spawn"
        return self._call(worker, f"delegate ({what})" if join else what, work)

    def _sweep(self, worker: Worker) -> Callable[[], Awaitable[None]]:
        """The scheduler's sweep: one child's end its parent was not told of."""

        async def work() -> None:
            await worker.store.children.children_report()

        return self._call(worker, "sweep", work)

    def _release(self, worker: Worker, holding: Holding) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            sid = holding.claim.session_id
            turn_id = None if holding.turn is None else holding.turn.turn_id
            try:
                await worker.store.sessions_release(holding.claim, turn_id=turn_id, reason="drain")
            except LeaseLost:
                worker.drop(sid, lost=True)
                return
            worker.drop(sid, lost=False)

        return self._call(worker, "release", work)

    def _step(self, worker: Worker, holding: Holding) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            assert holding.turn is not None
            key = f"tool-{next(self._keys)}"
            try:
                await worker.store.steps_start(
                    holding.claim,
                    turn_id=holding.turn.turn_id,
                    step_key=key,
                    kind=StepKind.TOOL,
                    digest="d",
                    events=[(EventKind.TOOL_CALLED, {"step_key": key})],
                )
                await worker.store.steps_finish(
                    holding.claim,
                    turn_id=holding.turn.turn_id,
                    step_key=key,
                    status=StepStatus.COMMITTED,
                    result={"r": 1},
                    events=[(EventKind.TOOL_RETURNED, {"step_key": key})],
                )
            except LeaseLost:
                worker.drop(holding.claim.session_id, lost=True)

        return self._call(worker, "step", work)

    def _remember(self, worker: Worker, holding: Holding) -> Callable[[], Awaitable[None]]:
        """The agents harness's conversation write at a turn's end (``ctx.remember``)."""

        async def work() -> None:
            assert holding.turn is not None
            try:
                await worker.store.conversation.messages_append(
                    holding.claim, turn_id=holding.turn.turn_id, messages=_MESSAGES
                )
            except LeaseLost:
                worker.drop(holding.claim.session_id, lost=True)

        return self._call(worker, "remember", work)

    def _reserve(self, worker: Worker, holding: Holding) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            assert holding.turn is not None
            key = f"q-{next(self._keys)}"
            grant = await worker.store.quotas.quota_reserve(
                holding.claim, scope=SCOPE, key=key, turn_id=holding.turn.turn_id, estimate=10
            )
            if grant.granted:
                worker.reservations.append(Reservation(holding.claim, key))

        return self._call(worker, "reserve", work)

    def _settle(self, worker: Worker) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            reservation = worker.reservations.pop(0)
            await worker.store.quotas.quota_settle(scope=SCOPE, key=reservation.key, actual=7)

        return self._call(worker, "settle", work)

    def _renew(self, worker: Worker) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            claims = [h.claim for h in worker.held.values()]
            kept = await worker.store.leases_renew(
                owner=worker.name, pid=0, claims=claims, lease_seconds=LEASE
            )
            for claim in claims:
                if claim.session_id not in kept:
                    worker.drop(claim.session_id, lost=True)

        return self._call(worker, "renew", work)

    def _zombie(self, worker: Worker, *, messages: bool = False) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            claim = worker.lost[0]
            try:
                if messages:
                    running = await fetch(
                        self._observer,
                        "SELECT id FROM turns WHERE session_id = %s AND status = 'running'",
                        claim.session_id,
                    )
                    turn_id = running[0][0] if running else uuid4()
                    before = await self._messages_of(claim)
                    try:
                        await worker.store.conversation.messages_append(
                            claim, turn_id=turn_id, messages=_MESSAGES
                        )
                    except LeaseLost:
                        if await self._messages_of(claim) != before:
                            raise self._fail(f"a fenced owner wrote messages: {claim}") from None
                        raise
                else:
                    await worker.store.events_append(
                        claim, turn_id=None, events=[(EventKind.TOOL_CALLED, {"zombie": True})]
                    )
            except LeaseLost:
                return
            # The write went through: only right if the lease is still this claim's.
            rows = await fetch(
                self._observer,
                "SELECT lease_owner, lease_epoch FROM sessions WHERE id = %s",
                claim.session_id,
            )
            if rows != [(claim.owner, claim.epoch)]:
                raise self._fail(f"a fenced owner wrote: {claim} (now {rows})")

        return self._call(worker, "zombie", work)

    async def _messages_of(self, claim: Claim) -> int:
        """Messages written under ``claim``'s lease (its epoch is that lease's alone)."""
        [(count,)] = await fetch(
            self._observer,
            "SELECT count(*) FROM conversation_messages WHERE session_id = %s AND lease_epoch = %s",
            claim.session_id,
            claim.epoch,
        )
        return int(count)

    def _expire(self, session_id: UUID) -> Callable[[], Awaitable[None]]:
        async def expire() -> None:
            # Skips a row some actor holds locked (the scheduler must never wait).
            await fetch(
                self._observer,
                "UPDATE sessions SET lease_expires_at = now() - interval '1 millisecond' "
                "WHERE id IN (SELECT id FROM sessions WHERE id = %s AND lease_owner IS NOT NULL "
                "FOR UPDATE SKIP LOCKED) RETURNING id",
                session_id,
            )

        return expire

    def _enqueue(self, client: Client, session_id: UUID) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            with contextlib.suppress(AdmissionRefused):
                await client.enqueues.turns_enqueue(
                    session_id=session_id,
                    idempotency_key=f"k{next(self._keys)}",
                    turn_input={},
                )

        async def start() -> None:
            client.actor.start(work())

        return start

    def _control(
        self, client: Client, session_id: UUID, action: ControlAction
    ) -> Callable[[], Awaitable[None]]:
        async def start() -> None:
            client.actor.start(
                client.controls.control(session_id=session_id, action=action, reason="race")
            )

        return start

    def _answer(self, client: Client, session_id: UUID) -> Callable[[], Awaitable[None]]:
        async def work() -> None:
            rows = await fetch(
                self._observer,
                "SELECT st.step_key FROM steps st JOIN turns t ON t.id = st.turn_id "
                "WHERE st.session_id = %s AND st.kind = 'answer' AND st.status = 'started' "
                "AND t.status = 'parked'",
                session_id,
            )
            for (step_key,) in rows:
                with contextlib.suppress(NoOpenQuestion, AnswerConflict):
                    await client.controls.answer(
                        session_id=session_id, step_key=step_key, answer="yes"
                    )

        async def start() -> None:
            client.actor.start(work())

        return start

    def _signal(self, client: Client, session_id: UUID) -> Callable[[], Awaitable[None]]:
        async def start() -> None:
            n = next(self._keys)
            client.actor.start(
                client.controls.signal(
                    session_id=session_id, name="go", idempotency_key=f"sig{n}", payload=n
                )
            )

        return start

    # -- invariants ------------------------------------------------------------

    async def _settle_and_check(self) -> None:
        await self._interleaver.settle()
        for actor in self._interleaver.actors:
            for task in actor.tasks:
                if task.done() and not task.cancelled() and task.exception() is not None:
                    exc = task.exception()
                    raise self._fail(f"{actor.name}'s call failed: {exc!r}") from exc
        await self._check()

    async def _check(self) -> None:
        report = await run_checks(
            self._observer, journals=self._journals, quiesced=False, stranded_grace=3600
        )
        for check in report.checks:
            if not check.passed and check.name in (
                "contiguous_event_cursors",
                "no_zombie_write",
                "consistent_identities",
            ):
                raise self._fail(f"{check.name} failed: {check.evidence}")
        await self._check_terminal_events()
        await self._check_leases()
        await self._check_quota()
        await self._check_signals()
        await self._check_children()
        await self._check_conversation()

    async def _check_conversation(self) -> None:
        """Every message was written under the lease that ran its turn: the epoch it
        carries started that turn (a ``turn.started`` of that epoch), never a fenced one."""
        stray = await fetch(
            self._observer,
            "SELECT m.session_id, m.turn_id, m.lease_epoch FROM conversation_messages m "
            "WHERE NOT EXISTS (SELECT FROM events e WHERE e.session_id = m.session_id "
            "AND e.turn_id = m.turn_id AND e.kind = 'turn.started' "
            "AND e.lease_epoch = m.lease_epoch)",
        )
        if stray:
            raise self._fail(f"messages written outside the lease that ran their turn: {stray}")

    async def _check_terminal_events(self) -> None:
        rows = await fetch(
            self._observer,
            "SELECT t.id, t.status, count(e.seq) FILTER (WHERE e.kind = ANY (%s)) "
            "FROM turns t LEFT JOIN events e ON e.turn_id = t.id AND e.session_id = t.session_id "
            "GROUP BY t.id, t.status",
            _TERMINAL,
        )
        for turn_id, status, terminal in rows:
            expected = 1 if TurnStatus(status).terminal else 0
            if terminal != expected:
                raise self._fail(f"turn {turn_id} is {status} with {terminal} terminal events")

    async def _check_leases(self) -> None:
        rows = await fetch(
            self._observer,
            "SELECT s.id, s.lease_owner, s.lease_epoch, "
            "       (SELECT array_agg(t.id) FROM turns t "
            "        WHERE t.session_id = s.id AND t.status = 'running') "
            "FROM sessions s WHERE s.lease_owner IS NOT NULL AND s.lease_expires_at > now()",
        )
        by_name = {w.name: w for w in self.workers}
        for session_id, owner, epoch, running in rows:
            worker = by_name[owner]
            if worker.in_flight is not None:
                continue  # its call may be about to hand it this lease, or give it up
            holding = worker.held.get(session_id)
            if holding is None or holding.claim.epoch != epoch:
                raise self._fail(
                    f"stranded lease: {self._label(session_id)} is leased by {owner} at "
                    f"epoch {epoch}, which none of {owner}'s slots holds "
                    f"(running turns: {running})"
                )
            if holding.turn is not None and running != [holding.turn.turn_id]:
                raise self._fail(
                    f"{owner} runs turn {holding.turn.turn_id} on {self._label(session_id)} "
                    f"but the running turns there are {running}"
                )

    async def _check_quota(self) -> None:
        [(occupying, reserved, reconciled, unknown, in_flight)] = await fetch(
            self._observer,
            "SELECT (SELECT count(*) FROM quota_reservations WHERE scope = %s), "
            "requests_reserved, requests_reconciled, requests_unknown, requests_in_flight "
            "FROM quota_scopes WHERE scope = %s",
            SCOPE,
            SCOPE,
        )
        if occupying > RPM:  # the window is 600 s: every reservation of the example is in it
            raise self._fail(f"{occupying} reservations occupy a window that allows {RPM}")
        if reserved != reconciled + unknown + in_flight:
            raise self._fail(
                f"quota books: reserved {reserved} != reconciled {reconciled} + unknown "
                f"{unknown} + in flight {in_flight}"
            )

    async def _check_signals(self) -> None:
        asleep = await fetch(
            self._observer,
            "SELECT s.id, w.step_key FROM sessions s "
            "JOIN waits w ON w.session_id = s.id AND w.kind = 'signal' "
            "JOIN steps st ON st.session_id = w.session_id AND st.turn_id = w.turn_id "
            "  AND st.step_key = w.step_key AND st.status = 'started' "
            "JOIN turns t ON t.id = w.turn_id AND t.status = 'queued' "
            "WHERE s.status = 'ready' AND s.ready_at > now() "
            "  AND EXISTS (SELECT FROM signals sg WHERE sg.session_id = s.id "
            "              AND sg.name = w.name AND sg.consumed_at IS NULL)",
        )
        if asleep:
            raise self._fail(f"lost wake: set aside with a signal kept for it: {asleep}")
        twice = await fetch(
            self._observer,
            "SELECT st.turn_id, st.step_key FROM steps st "
            "WHERE st.kind = 'wait' AND st.status = 'committed' "
            "  AND st.result->>'outcome' = 'signal' "
            "  AND (SELECT count(*) FROM signals sg WHERE sg.consumed_turn_id = st.turn_id "
            "       AND sg.consumed_step_key = st.step_key "
            "       AND sg.id::text = st.result->'signal'->>'id') <> 1",
        )
        stray = await fetch(
            self._observer,
            "SELECT sg.id FROM signals sg WHERE sg.consumed_at IS NOT NULL AND NOT EXISTS ("
            "  SELECT FROM steps st WHERE st.turn_id = sg.consumed_turn_id "
            "  AND st.step_key = sg.consumed_step_key AND st.status = 'committed' "
            "  AND st.result->'signal'->>'id' = sg.id::text)",
        )
        if twice or stray:
            raise self._fail(f"a signal not consumed exactly once: {twice} {stray}")

    async def _check_children(self) -> None:
        asleep = await fetch(
            self._observer,
            "SELECT s.id, w.step_key FROM sessions s "
            "JOIN waits w ON w.session_id = s.id AND w.kind = 'children' "
            "JOIN steps st ON st.session_id = w.session_id AND st.turn_id = w.turn_id "
            "  AND st.step_key = w.step_key AND st.status = 'started' "
            "JOIN turns t ON t.id = w.turn_id AND t.status = 'queued' "
            "WHERE s.status = 'ready' AND s.ready_at > now() "
            "  AND (SELECT count(*) FROM children c WHERE c.parent_id = s.id "
            "       AND c.child_id = ANY (w.children) AND c.reported_at IS NOT NULL) "
            "      >= cardinality(w.children)",
        )
        if asleep:
            raise self._fail(f"lost wake: a join set aside with every child reported: {asleep}")
        twice = await fetch(
            self._observer,
            "SELECT st.turn_id, st.step_key FROM steps st WHERE st.kind = 'spawn' "
            "  AND (st.status <> 'committed' OR (SELECT count(*) FROM children c "
            "       WHERE c.parent_turn_id = st.turn_id AND c.step_key = st.step_key) <> 1) "
            "UNION ALL "
            "SELECT s.parent_id, s.id::text FROM sessions s WHERE s.parent_id IS NOT NULL "
            "  AND (SELECT count(*) FROM children c JOIN steps st ON st.turn_id = "
            "       c.parent_turn_id AND st.step_key = c.step_key AND st.kind = 'spawn' "
            "       WHERE c.child_id = s.id AND c.parent_id = s.parent_id) <> 1",
        )
        if twice:
            raise self._fail(f"a spawn step without exactly one child, or a child twice: {twice}")
        orphans = await fetch(
            self._observer,
            "SELECT c.session_id, c.turn_id, c.payload->>'child_id' FROM events c "
            "JOIN events r ON r.session_id = c.session_id AND r.turn_id = c.turn_id "
            "WHERE c.kind = 'child.started' AND r.kind = 'control.requested' AND r.seq < c.seq",
        )
        if orphans:
            raise self._fail(
                f"a child started after its parent's turn was asked to stop: {orphans}"
            )

    # -- the end of an example ---------------------------------------------------

    async def _wind_down(self) -> None:
        """Let every stopped call finish, then every worker finish what it holds,
        and check that what is left queued is claimable and gets started."""
        while True:
            waiting = [a for a in self._interleaver.actors if a.waiting is not None]
            if not waiting and not any(a.busy for a in self._interleaver.actors):
                break
            for actor in waiting:
                actor.go()
            await self._settle_and_check()
        for worker in self.workers:
            worker.actor.pause = lambda _: False
        for client in self.clients:
            client.actor.pause = lambda _: False
        for worker in self.workers:
            while worker.held:
                holding = next(iter(worker.held.values()))
                if holding.turn is None:
                    await self._release(worker, holding)()
                else:
                    await self._finish(worker, holding, release=True, claim_next=False)()
                await self._settle_and_check()
        await self._wake_waiting()
        await self._check_claimable()

    async def _wake_waiting(self) -> None:
        """Send a signal to every session whose turn waits for one, so that what is left
        queued can be claimed (each is kept, or wakes its waiting turn)."""
        waiting = await fetch(
            self._observer,
            "SELECT DISTINCT w.session_id FROM waits w JOIN steps st "
            "ON st.session_id = w.session_id AND st.turn_id = w.turn_id "
            "AND st.step_key = w.step_key AND st.status = 'started' "
            "JOIN turns t ON t.id = w.turn_id AND t.status = 'queued'",
        )
        controls = ControlStore(self._db.config, self._observer)
        for (session_id,) in waiting:
            await controls.signal(
                session_id=session_id, name="go", idempotency_key=f"end{session_id}", payload=0
            )
        if len(self.sessions) > SESSIONS:
            # A parked child would keep its parent's join waiting for ever: every
            # question is answered; then the parents hear of every end (the sweep).
            questions = await fetch(
                self._observer,
                "SELECT st.session_id, st.step_key FROM steps st "
                "JOIN turns t ON t.id = st.turn_id "
                "WHERE st.kind = 'answer' AND st.status = 'started' AND t.status = 'parked'",
            )
            for session_id, step_key in questions:
                await controls.answer(session_id=session_id, step_key=step_key, answer="yes")
            await self._report_all()
        await self._check()

    async def _report_all(self) -> None:
        reporter = ChildStore(self._db.config, self._observer, None)
        while await reporter.children_report() is not None:
            pass

    async def _check_claimable(self) -> None:
        stuck = await fetch(
            self._observer,
            "SELECT s.id, s.status, s.queued_turns, s.lease_owner FROM sessions s "
            "WHERE s.queued_turns > 0 AND s.status <> 'parked' "
            "AND NOT (s.status = 'ready' AND s.lease_owner IS NULL) "
            "AND NOT (s.status = 'running' AND s.lease_expires_at <= now())",
        )
        if stuck:
            raise self._fail(f"queued turns nobody can claim: {stuck}")
        drainer = SqlWorkerStore(self._db.config, self._observer, concurrency=1)
        for _ in range(1000):
            works = await drainer.turns_claim(owner="drain", pins=[], limit=4, lease_seconds=LEASE)
            if not works:
                break
            for work in works:
                following: Work | None = work
                while following is not None:
                    claim, turn = following.claim, following.turn
                    if turn is None:
                        await drainer.sessions_release(claim)
                        break
                    done = await drainer.turns_finish(
                        claim,
                        turn_id=turn.turn_id,
                        status=TurnStatus.SUCCEEDED,
                        output={},
                        error=None,
                        events=[(EventKind.TURN_COMPLETED, {"attempt": turn.attempts})],
                        release=False,
                    )
                    await drainer.children.children_report(child_id=claim.session_id)
                    following = done.next
        left = await fetch(
            self._observer,
            "SELECT t.id, t.status FROM turns t JOIN sessions s ON s.id = t.session_id "
            "WHERE t.status IN ('queued', 'running') AND s.status <> 'parked'",
        )
        if left:
            raise self._fail(f"turns never started or finished: {left}")
        await self._check()
