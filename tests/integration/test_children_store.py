"""Child sessions in the store: an interrupt of the parent reaches each ``cascade``
child's turn in whatever state it is (and theirs), never an ``abandon`` one, and a
waiting parent reads the ends; a spawn counts against the tenant's ``max_sessions``."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.children import NewChild, SpawnedChild
from stint.store.client import ClientStore
from stint.store.controls import ControlStore
from stint.store.errors import ChildRefused
from stint.store.models import Claim, TurnStart
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit, BusyStrategy, ControlAction, WaitKind
from stint.store.waits import WaitUntil
from stint.store.worker_store import SqlWorkerStore
from tests.integration.claims import claim_one
from tests.workers import count_rows, fetch, set_limits


async def _spawn(
    runtime: SqlWorkerStore,
    claim: Claim,
    turn: TurnStart,
    n: int,
    *,
    pin: str = "cold",
    on_cancel: str = "cascade",
) -> SpawnedChild:
    """The turn's n-th spawn; a ``cold`` pin keeps the child from every claim below."""
    return await runtime.children.children_spawn(
        claim,
        turn_id=turn.turn_id,
        step_key=f"spawn:{n}",
        digest=f"d{n}",
        child=NewChild({}, pin=pin, on_cancel=on_cancel),
    )


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
    parent = await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key="p", turn_input={}
    )
    claim, turn = await claim_one(runtime, "w1")
    running = await _spawn(runtime, claim, turn, 0, pin="hot")
    queued = await _spawn(runtime, claim, turn, 1)
    kept = await _spawn(runtime, claim, turn, 2, on_cancel="abandon")
    # The `hot` child runs on another worker (a live lease) and spawned a child of its own.
    [work] = await runtime.turns_claim(owner="w2", pins=["hot"], limit=1, lease_seconds=30)
    assert work.claim.session_id == running.child_id and work.turn is not None
    grandchild = await _spawn(runtime, work.claim, work.turn, 0)

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
    kids = [await _spawn(runtime, claim, turn, n) for n in range(2)]
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
    await _spawn(runtime, claim, turn, 0)  # acme's second session: within the limit
    tables = ("sessions", "turns", "children", "steps", "events", "waits")
    before = [await count_rows(pool, table) for table in tables]
    seqs = await fetch(pool, "SELECT id, last_event_seq FROM sessions ORDER BY id")

    with pytest.raises(ChildRefused) as refused:
        await _spawn(runtime, claim, turn, 1)

    assert str(refused.value).startswith(
        "child refused: max_sessions limit of 2 sessions reached for tenant acme"
    )
    assert (refused.value.limit, refused.value.value) == ("max_sessions", 2)
    assert [await count_rows(pool, table) for table in tables] == before
    assert await fetch(pool, "SELECT id, last_event_seq FROM sessions ORDER BY id") == seqs
