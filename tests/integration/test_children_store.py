"""Child sessions in the store: an interrupt of the parent reaches each ``cascade``
child's turn in whatever state it is (and theirs), never an ``abandon`` one, and a
waiting parent reads the ends; a spawn counts against the tenant's ``max_sessions``;
once a cancel or an interrupt of a turn has committed, that turn spawns no child
(the spawn is refused, and the slot ends the turn as asked)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest
import pytest_asyncio

from stint.postgres.scratch import ScratchTarget
from stint.store.children import NewChildren, SpawnedChild
from stint.store.client import ClientStore
from stint.store.controls import ControlStore
from stint.store.errors import ChildRefused, LeaseLost, TurnStopRequested
from stint.store.models import Claim, ControlRequest, TurnStart
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit, BusyStrategy, ControlAction, WaitKind
from stint.store.waits import WaitUntil
from stint.store.worker_store import SqlWorkerStore
from stint.worker.context import TurnContext
from stint.worker.slots import Held
from tests.integration.claims import claim_one, parent_running, slot_runner, spawn_child
from tests.interleaving import Interleaver
from tests.workers import count_rows, event_kinds, fetch, set_limits


@pytest_asyncio.fixture(loop_scope="session")
async def interleaver(db: ScratchTarget, pool: Pool) -> AsyncIterator[Interleaver]:
    made = Interleaver(db, pool)
    try:
        yield made
    finally:
        await made.close()


async def _turn(pool: Pool, turn_id: UUID) -> str:
    [(status,)] = await fetch(pool, "SELECT status FROM turns WHERE id = %s", turn_id)
    return str(status)


async def _control(pool: Pool, session_id: UUID) -> tuple[Any, ...]:
    [row] = await fetch(
        pool, "SELECT status, control, control_turn_id FROM sessions WHERE id = %s", session_id
    )
    return row


async def test_an_interrupt_reaches_each_cascade_child_in_its_state_and_no_abandoned_one(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    parent, claim, turn = await parent_running(db.config, pool, runtime)
    running = await spawn_child(runtime, claim, turn, 0, pin="hot")
    queued = await spawn_child(runtime, claim, turn, 1)
    kept = await spawn_child(runtime, claim, turn, 2, on_cancel="abandon")
    # The `hot` child runs on another worker (a live lease) and spawned a child of its own.
    [work] = await runtime.turns_claim(owner="w2", pins=["hot"], limit=1, lease_seconds=30)
    assert work.claim.session_id == running.child_id and work.turn is not None
    grandchild = await spawn_child(runtime, work.claim, work.turn, 0)

    result = await ControlStore(db.config, pool).control(
        session_id=parent.session_id, action=ControlAction.INTERRUPT, reason="stop"
    )

    assert result.active_turn == parent.turn_id
    assert result.outcome.endswith("; interrupted 3 child turn(s) (cascade)")
    # Running turns are asked of their workers (the parent's and the running child's) ...
    assert await _control(pool, parent.session_id) == ("running", "interrupt", parent.turn_id)
    assert await _control(pool, running.child_id) == ("running", "interrupt", running.child_turn_id)
    assert await _turn(pool, running.child_turn_id) == "running"
    # ... queued ones end in the database, the grandchild too; the abandoned child runs on.
    assert await _turn(pool, queued.child_turn_id) == "interrupted"
    assert await _turn(pool, grandchild.child_turn_id) == "interrupted"
    assert (await _control(pool, queued.child_id))[0] == "idle"
    assert await _turn(pool, kept.child_turn_id) == "queued"
    [(kind, payload)] = await fetch(
        pool,
        "SELECT kind, payload FROM events WHERE session_id = %s AND kind LIKE 'turn.%%'",
        queued.child_id,
    )
    assert kind == "turn.interrupted" and payload["reason"] == "parent interrupted"


@pytest.mark.parametrize("door", ["interrupt", "enqueue busy=interrupt"])
async def test_a_parent_waiting_on_a_join_reads_its_interrupted_children(
    db: ScratchTarget, pool: Pool, door: str
) -> None:
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    client = ClientStore(db.config, pool)
    parent = await client.turns_enqueue(session_id=None, idempotency_key="p", turn_input={})
    claim, turn = await claim_one(runtime, "w1")
    kids = [await spawn_child(runtime, claim, turn, n) for n in range(2)]
    ids = [kid.child_id for kid in kids]
    await runtime.waits.waits_begin(
        claim,
        turn_id=turn.turn_id,
        step_key="wait:0",
        digest="j",
        kind=WaitKind.CHILDREN,
        until=WaitUntil(),
        children=ids,
        wait_all=True,
    )
    assert await runtime.waits.waits_settle(claim, turn_id=turn.turn_id, step_key="wait:0") is None
    assert await runtime.waits.turns_wait(claim, turn_id=turn.turn_id, step_key="wait:0") is None

    if door == "interrupt":
        result = await ControlStore(db.config, pool).control(
            session_id=parent.session_id, action=ControlAction.INTERRUPT, reason="stop"
        )
        assert result.active_turn is None
        assert result.outcome == "no turn in progress; interrupted 2 child turn(s) (cascade)"
    else:
        await client.turns_enqueue(
            session_id=parent.session_id,
            idempotency_key="next",
            turn_input={},
            busy=BusyStrategy.INTERRUPT,
        )

    # The waiting turn is not ended: it waits for its children's ends, reported as any end.
    assert await _turn(pool, parent.turn_id) == "queued"
    assert [await _turn(pool, kid.child_turn_id) for kid in kids] == ["interrupted"] * 2
    assert [await runtime.children.children_report() for _ in kids] == [parent.session_id] * 2
    assert await runtime.children.children_report() is None
    again, resumed = await claim_one(runtime, "w1")  # woken by the last report
    assert resumed.turn_id == parent.turn_id
    joined = await runtime.waits.waits_settle(again, turn_id=turn.turn_id, step_key="wait:0")
    assert joined is not None
    ends = sorted((UUID(end["child_id"]), end["status"]) for end in joined["children"])
    assert ends == sorted((i, "interrupted") for i in ids)


async def test_a_spawn_past_the_tenants_session_limit_is_refused_and_writes_nothing(
    db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSIONS: 2}, tenant="acme")
    for _ in range(3):  # another tenant's sessions are not acme's
        await client.sessions_create(tenant="other")
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    await client.turns_enqueue(session_id=None, idempotency_key="p", turn_input={}, tenant="acme")
    claim, turn = await claim_one(runtime, "w1")
    await spawn_child(runtime, claim, turn, 0)  # acme's second session: within the limit
    tables = ("sessions", "turns", "children", "steps", "events", "waits")
    before = [await count_rows(pool, table) for table in tables]
    seqs = await fetch(pool, "SELECT id, last_event_seq FROM sessions ORDER BY id")

    with pytest.raises(ChildRefused) as refused:
        await spawn_child(runtime, claim, turn, 1)

    assert str(refused.value).startswith(
        "child refused: max_sessions limit of 2 sessions reached for tenant acme"
    )
    assert (refused.value.limit, refused.value.value) == ("max_sessions", 2)
    assert [await count_rows(pool, table) for table in tables] == before
    assert await fetch(pool, "SELECT id, last_event_seq FROM sessions ORDER BY id") == seqs


async def test_a_spawn_waits_for_a_session_being_created_and_counts_it(
    db: ScratchTarget, pool: Pool, interleaver: Interleaver
) -> None:
    """A client creating acme's last session holds the tenant's sessions lock while it
    counts; the spawn's prelude waits for that lock, so its count sees the new session
    and refuses the child (without the lock both would pass: three sessions of two)."""
    await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSIONS: 2}, tenant="acme")
    creator = await interleaver.actor("client", pause=lambda name: name == "admission_sessions")
    worker = await interleaver.actor("w1", pause=lambda name: False)
    runtime = SqlWorkerStore(db.config, worker.pool, concurrency=1)
    await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key="p", turn_input={}, tenant="acme"
    )
    claim, turn = await claim_one(runtime, "w1")
    creating = creator.start(ClientStore(db.config, creator.pool).sessions_create(tenant="acme"))
    await interleaver.until_waiting(creator, "admission_sessions")  # holds the tenant's lock
    spawning = worker.start(spawn_child(runtime, claim, turn, 0))
    await interleaver.until_blocked(worker)
    creator.go()
    await creating
    with pytest.raises(ChildRefused, match="max_sessions limit of 2"):
        await spawning
    assert await fetch(pool, "SELECT count(*) FROM sessions WHERE tenant = 'acme'") == [(2,)]


async def _spawns(
    runtime: SqlWorkerStore, claim: Claim, turn: TurnStart, how: str
) -> list[SpawnedChild]:
    """One ``ctx.spawn``'s statement, or one ``ctx.spawn_many`` of two children."""
    if how == "spawn":
        return [await spawn_child(runtime, claim, turn, 0)]
    return await runtime.children.children_spawn_many(
        claim,
        turn_id=turn.turn_id,
        children=NewChildren(["spawn:0", "spawn:1"], ["d0", "d1"], [{}, {}], pin="cold"),
    )


async def _log(pool: Pool, session_id: UUID) -> tuple[list[int], int]:
    """The session's event seqs, in order, and its last_event_seq."""
    seqs = await fetch(
        pool, "SELECT seq FROM events WHERE session_id = %s ORDER BY seq", session_id
    )
    [(last,)] = await fetch(pool, "SELECT last_event_seq FROM sessions WHERE id = %s", session_id)
    return [seq for (seq,) in seqs], int(last)


_TABLES = ("sessions", "turns", "children", "steps", "events", "waits")


@pytest.mark.parametrize("how", ["spawn", "spawn_many"])
@pytest.mark.parametrize("action", [ControlAction.INTERRUPT, ControlAction.CANCEL])
async def test_a_spawn_after_a_control_of_its_turn_committed_is_refused_and_writes_nothing(
    db: ScratchTarget, pool: Pool, action: ControlAction, how: str
) -> None:
    """The worker has not yet heard of the control (its harness goes on): the
    spawn is refused with the request, not as a lost lease nor as a limit, and
    writes nothing; the request stays on the row for the worker's end of the turn."""
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    parent, claim, turn = await parent_running(db.config, pool, runtime)
    result = await ControlStore(db.config, pool).control(
        session_id=parent.session_id, action=action, reason="stop"
    )
    assert result.outcome == "requested from worker w1"
    before = [await count_rows(pool, table) for table in _TABLES]
    log = await _log(pool, parent.session_id)

    with pytest.raises(TurnStopRequested) as refused:
        await _spawns(runtime, claim, turn, how)

    assert refused.value.request == ControlRequest(action, turn.turn_id, "stop")
    assert not isinstance(refused.value, LeaseLost)
    assert [await count_rows(pool, table) for table in _TABLES] == before
    assert await fetch(pool, "SELECT count(*) FROM sessions WHERE parent_id IS NOT NULL") == [(0,)]
    assert await fetch(pool, "SELECT count(*) FROM steps WHERE kind = 'spawn'") == [(0,)]
    seqs, last = await _log(pool, parent.session_id)
    assert (seqs, last) == log and seqs == list(range(1, last + 1))
    kinds = await event_kinds(pool, parent.session_id)
    assert "child.started" not in kinds and kinds[-1] == "control.requested"
    assert await _control(pool, parent.session_id) == ("running", action, turn.turn_id)


@pytest.mark.parametrize("how", ["spawn", "spawn_many"])
async def test_a_spawn_that_waited_for_an_interrupts_lock_is_refused_once_it_commits(
    db: ScratchTarget, pool: Pool, interleaver: Interleaver, how: str
) -> None:
    """READ COMMITTED: the interrupt holds the parent's row (its cascade read found no
    child) and the spawn waits for that row, its snapshot taken before the interrupt
    wrote anything. Once the interrupt commits, the spawn must see it on the row's
    newest version and refuse: a child created now would be reached by nobody."""
    client = await interleaver.actor("client", pause=lambda name: name == "controls_request")
    worker = await interleaver.actor("w1", pause=lambda name: False)
    runtime = SqlWorkerStore(db.config, worker.pool, concurrency=1)
    parent, claim, turn = await parent_running(db.config, pool, runtime)
    interrupting = client.start(
        ControlStore(db.config, client.pool).control(
            session_id=parent.session_id, action=ControlAction.INTERRUPT, reason="stop"
        )
    )
    await interleaver.until_waiting(client, "controls_request")  # the parent's row held
    spawning = worker.start(_spawns(runtime, claim, turn, how))
    await interleaver.until_blocked(worker)
    client.go()
    result = await interrupting
    assert result.outcome == "requested from worker w1"  # no child to cascade to
    with pytest.raises(TurnStopRequested) as refused:
        await spawning
    assert refused.value.request == ControlRequest(ControlAction.INTERRUPT, turn.turn_id, "stop")
    assert await fetch(pool, "SELECT count(*) FROM children") == [(0,)]
    assert await fetch(pool, "SELECT count(*) FROM sessions WHERE parent_id IS NOT NULL") == [(0,)]
    assert "child.started" not in await event_kinds(pool, parent.session_id)


class _StoppedThenSpawns:
    """A harness whose turn is cancelled or interrupted (committed) before it spawns.
    No lease keeper runs, so only the spawn's refusal can tell the slot; with
    ``swallow`` the harness catches that refusal and returns as if all went well."""

    def __init__(self, controls: ControlStore, action: ControlAction, how: str, swallow: bool):
        self._controls = controls
        self._action = action
        self._how = how
        self._swallow = swallow

    async def run_turn(self, ctx: TurnContext) -> Any:
        await self._controls.control(session_id=ctx.session_id, action=self._action, reason="stop")
        try:
            if self._how == "spawn":
                await ctx.spawn({}, pin="cold")
            else:
                await ctx.spawn_many([{}, {}], pin="cold")
        except TurnStopRequested:
            if not self._swallow:
                raise
        return {"spawned": "maybe"}


@pytest.mark.parametrize(
    ("action", "how", "swallow"),
    [
        (ControlAction.INTERRUPT, "spawn", False),
        (ControlAction.INTERRUPT, "spawn_many", False),
        (ControlAction.CANCEL, "spawn", False),
        (ControlAction.CANCEL, "spawn_many", True),
    ],
)
async def test_a_refused_spawn_ends_the_turn_as_the_control_asks_and_frees_the_slot(
    db: ScratchTarget, pool: Pool, action: ControlAction, how: str, swallow: bool
) -> None:
    """The slot ends the turn as the request would have: its status and terminal
    event, the request's reason, the lease released at once; not a lost lease,
    not a harness failure, not a hand-back (even when the harness swallowed it)."""
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    parent, claim, turn = await parent_running(db.config, pool, runtime)
    harness = _StoppedThenSpawns(ControlStore(db.config, pool), action, how, swallow)
    held = Held(claim)
    await asyncio.wait_for(
        slot_runner(runtime, harness, may_write=lambda: True).run(held, turn), 30
    )

    assert not held.lost
    rows = await fetch(pool, "SELECT status, reason, output FROM turns WHERE id = %s", turn.turn_id)
    assert rows == [(str(action.turn_status), "stop", None)]
    kinds = await event_kinds(pool, parent.session_id)
    assert kinds[-2:] == ["control.requested", str(action.event_kind)]
    assert "child.started" not in kinds and "turn.released" not in kinds
    assert await fetch(
        pool,
        "SELECT status, lease_owner, control FROM sessions WHERE id = %s",
        parent.session_id,
    ) == [("idle", None, None)]
    assert await fetch(pool, "SELECT count(*) FROM children") == [(0,)]
    assert held.control == ControlRequest(action, turn.turn_id, "stop")
