"""Liveness against real PostgreSQL: a queued turn never waits behind a lease no slot uses.

The reproductions of the races that stranded turns for a whole lease, each
forced deterministically by stopping one transaction between two statements
(``tests.interleaving``), and the check that reports a stranded lease.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.controls import ControlStore
from stint.store.pool import Pool
from stint.store.vocabulary import ControlAction, EventKind, TurnStatus
from stint.store.worker_store import SqlWorkerStore
from stint.worker.slots import Held
from tests.integration.claims import claim_one, slot_runner
from tests.interleaving import Interleaver
from tests.workers import fetch


@pytest_asyncio.fixture(loop_scope="session")
async def interleaver(db: ScratchTarget, pool: Pool) -> AsyncIterator[Interleaver]:
    made = Interleaver(db, pool)
    try:
        yield made
    finally:
        await made.close()


async def _session_row(pool: Pool, session_id: uuid.UUID) -> tuple[Any, ...]:
    [row] = await fetch(
        pool,
        "SELECT status, lease_owner, queued_turns FROM sessions WHERE id = %s",
        session_id,
    )
    return row


async def test_a_turn_queued_while_its_predecessor_finishes_is_started_or_claimable(
    db: ScratchTarget, pool: Pool, interleaver: Interleaver
) -> None:
    """Reproduction 1: the enqueue holds the session's row lock while the finish
    waits for it; the finish's snapshot predates the new turn. Before the fix
    the lease was kept with nothing started (status running, queued_turns 1,
    no running turn) until it expired."""
    producer = await interleaver.actor("client", pause=lambda name: name == "turns_insert")
    worker = await interleaver.actor("w1", pause=lambda name: False)
    client = ClientStore(db.config, producer.pool)
    runtime = SqlWorkerStore(db.config, worker.pool, concurrency=1)
    first = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    claim, turn = await claim_one(runtime, "w1")

    enqueue = producer.start(
        client.turns_enqueue(session_id=first.session_id, idempotency_key="b", turn_input={})
    )
    await interleaver.until_waiting(producer, "turns_insert")  # holds the session row lock
    finish = worker.start(
        runtime.turns_finish(
            claim,
            turn_id=turn.turn_id,
            status=TurnStatus.SUCCEEDED,
            output={},
            error=None,
            events=[(EventKind.TURN_COMPLETED, {"attempt": 1})],
            release=False,
            claim_next=True,
        )
    )
    await interleaver.until_blocked(worker)
    producer.go()
    second = await enqueue
    finished = await finish

    following = finished.next
    if following is not None:  # started by the finish itself
        assert following.claim.session_id == first.session_id
        assert following.turn is not None and following.turn.turn_id == second.turn_id
        assert finished.still_held
        return
    # Released instead: no lease held, the turn claimable by any worker at once.
    status, owner, queued = await _session_row(pool, first.session_id)
    assert (status, owner, queued, finished.still_held) == ("ready", None, 1, False)
    other = SqlWorkerStore(db.config, pool, concurrency=1)
    [work] = await other.turns_claim(owner="w2", pins=[], limit=1, lease_seconds=30)
    assert work.turn is not None and work.turn.turn_id == second.turn_id


async def test_a_claim_never_starts_a_turn_cancelled_after_its_snapshot(
    db: ScratchTarget, pool: Pool, interleaver: Interleaver
) -> None:
    """A claim locks a ready session at its newest version but reads its turns
    from the snapshot taken before. The finish's claim of a next session is
    held up (its own session's row is locked by someone else) after its
    snapshot; meanwhile the other session's oldest turn is cancelled. Before
    the fix the claim started that cancelled turn."""
    worker = await interleaver.actor("w1", pause=lambda name: False)
    client = ClientStore(db.config, pool)
    runtime = SqlWorkerStore(db.config, worker.pool, concurrency=1)
    mine = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    claim, turn = await claim_one(runtime, "w1")
    assert claim.session_id == mine.session_id
    first = await client.turns_enqueue(session_id=None, idempotency_key="b1", turn_input={})
    second = await client.turns_enqueue(
        session_id=first.session_id, idempotency_key="b2", turn_input={}
    )
    async with pool.connection() as holder, holder.transaction():
        await holder.execute("SELECT FROM sessions WHERE id = %s FOR UPDATE", (mine.session_id,))
        finish = worker.start(
            runtime.turns_finish(
                claim,
                turn_id=turn.turn_id,
                status=TurnStatus.SUCCEEDED,
                output={},
                error=None,
                events=[(EventKind.TURN_COMPLETED, {"attempt": 1})],
                release=True,
                claim_next=True,
            )
        )
        await interleaver.until_blocked(worker)  # its snapshot is taken
        controls = ControlStore(db.config, pool)
        await controls.control(
            session_id=first.session_id,
            action=ControlAction.CANCEL,
            reason="test",
            turn_id=first.turn_id,
        )
    finished = await finish
    rows = dict(await fetch(pool, "SELECT id, status FROM turns"))
    assert rows[first.turn_id] == "cancelled"
    following = finished.next
    if following is not None:
        assert following.turn is not None and following.turn.turn_id == second.turn_id
        assert rows[second.turn_id] == "running"
    else:  # skipped as changed since the snapshot: still claimable at once
        [work] = await runtime.turns_claim(owner="w1", pins=[], limit=1, lease_seconds=30)
        assert work.turn is not None and work.turn.turn_id == second.turn_id
    [(queued,)] = await fetch(
        pool, "SELECT queued_turns FROM sessions WHERE id = %s", first.session_id
    )
    assert queued == 1


class _Harness:
    """Completes each turn; the worker fences itself during the first."""

    def __init__(self, fence: asyncio.Event) -> None:
        self._fence = fence

    async def run_turn(self, ctx: Any) -> dict[str, Any]:
        self._fence.set()
        return {}


async def test_a_worker_that_fenced_itself_takes_no_lease_through_its_finish(
    db: ScratchTarget, pool: Pool
) -> None:
    """Reproduction 2: the slot finishes its turn after the worker fenced itself
    (its leases unrenewed for a whole lease). Before the fix the finish claimed
    the next session anyway, and the slot then stopped without running or
    releasing it: that session waited a lease."""
    client = ClientStore(db.config, pool)
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    first = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    other = await client.turns_enqueue(session_id=None, idempotency_key="b", turn_input={})
    claim, turn = await claim_one(runtime, "w1")
    assert claim.session_id == first.session_id
    fenced = asyncio.Event()
    runner = slot_runner(runtime, _Harness(fenced), may_write=lambda: not fenced.is_set())
    await runner.run(Held(claim), turn)

    status, owner, queued = await _session_row(pool, other.session_id)
    assert owner is None, f"the fenced worker holds {other.session_id} ({status})"
    assert (status, queued) == ("ready", 1)
    [(turn_status,)] = await fetch(pool, "SELECT status FROM turns WHERE id = %s", first.turn_id)
    assert turn_status == "succeeded"


async def test_a_claim_that_commits_as_the_worker_fences_itself_is_handed_back(
    db: ScratchTarget, pool: Pool
) -> None:
    """A slot that starts after its worker fenced itself hands its freshly
    claimed session back at once (the turn requeued, a turn.released event)."""
    client = ClientStore(db.config, pool)
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    queued = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    claim, turn = await claim_one(runtime, "w1")
    runner = slot_runner(runtime, _Harness(asyncio.Event()), may_write=lambda: False)
    held = Held(claim)
    await runner.run(held, turn)
    assert held.lost
    status, owner, count = await _session_row(pool, queued.session_id)
    assert (status, owner, count) == ("ready", None, 1)
    kinds = [
        r[0]
        for r in await fetch(
            pool, "SELECT kind FROM events WHERE session_id = %s ORDER BY seq", queued.session_id
        )
    ]
    assert kinds == ["turn.started", "turn.released"]


async def _stranded(pool: Pool, tmp: Any) -> list[dict[str, object]]:
    report = await run_checks(pool, journals=tmp, quiesced=False)
    [check] = [c for c in report.checks if c.name == "no_stranded_lease"]
    assert check.passed == (not check.evidence["stranded"])
    stranded: list[dict[str, object]] = check.evidence["stranded"]
    return stranded


async def _register(pool: Pool, worker_id: str) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO workers (id, host, pid, version, pins, slots, lease_seconds) "
            "VALUES (%s, 'test', 1, 'test', '{}', 1, 30)",
            (worker_id,),
        )


async def test_check_reports_a_lease_held_with_no_running_turn(
    db: ScratchTarget, pool: Pool, tmp_path: Any
) -> None:
    client = ClientStore(db.config, pool)
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    await _register(pool, "w1")
    queued = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    claim, _turn = await claim_one(runtime, "w1")
    assert await _stranded(pool, tmp_path) == []
    # The state reproduction 1 left: leased, its turn queued, none running, for a while.
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE turns SET status = 'queued' WHERE session_id = %s", (queued.session_id,)
        )
        await conn.execute(
            "UPDATE sessions SET claimed_at = now() - interval '6 seconds' WHERE id = %s",
            (queued.session_id,),
        )
    [found] = await _stranded(pool, tmp_path)
    assert found["session_id"] == str(claim.session_id)
    assert (found["owner"], found["no_running_turn"], found["queued_turns"]) == ("w1", True, 1)


async def test_check_reports_a_lease_its_live_owner_no_longer_renews(
    db: ScratchTarget, pool: Pool, tmp_path: Any
) -> None:
    client = ClientStore(db.config, pool)
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    await _register(pool, "w1")
    await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    claim, _turn = await claim_one(runtime, "w1", lease_seconds=30)
    # The owner renews (its heartbeat moves) but not this lease: reproduction 2's state.
    async with pool.connection() as conn:
        await conn.execute(
            "UPDATE sessions SET lease_expires_at = now() + interval '3 seconds' WHERE id = %s",
            (claim.session_id,),
        )
    [found] = await _stranded(pool, tmp_path)
    assert (found["owner"], found["no_running_turn"]) == ("w1", False)
    assert isinstance(found["unrenewed_s"], float) and found["unrenewed_s"] > 25
    # A renewal by the owner ends it.
    renewed = await runtime.leases_renew(owner="w1", pid=1, claims=[claim], lease_seconds=30)
    assert claim.session_id in renewed
    assert await _stranded(pool, tmp_path) == []
