"""A write that waited for a connection while its worker fenced itself claims nothing.

Through an outage a slot's finish (or the claimer's claim) is called while the
worker may still write and then waits for a connection; by the time PostgreSQL
answers the worker has fenced itself (its leases unrenewed for a whole lease).
Before the fix the statement ran with the flags read at the call: it kept the
lease and started the session's next turn, or claimed another session, and the
slot then handed that turn back unrun, an attempt spent for nothing (after a 5 s
outage under load, sessions showed three attempts for one fault). The flags are
now read as the statement is sent (``stint.store.batch.Late``).

Here the pool's only connection is held by the test while the write waits.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI
from stint.store.pool import Pool, open_pool
from stint.store.worker_store import SqlWorkerStore
from stint.worker.claimer import Claimer
from stint.worker.service import Wakeup
from stint.worker.slots import Held, Slots
from tests.integration.claims import claim_one, slot_runner
from tests.polling import wait_until
from tests.workers import fetch


@pytest_asyncio.fixture(loop_scope="session")
async def one_connection(db: ScratchTarget) -> AsyncIterator[Pool]:
    opened = await open_pool(db.config, ROLE_CLI, min_size=1, max_size=1)
    try:
        yield opened
    finally:
        await opened.close()


class _Done:
    """Completes each turn at once, writing nothing."""

    async def run_turn(self, ctx: Any) -> dict[str, Any]:
        return {}


async def _waiting_for_a_connection(pool: Pool) -> bool:
    return pool.get_stats().get("requests_waiting", 0) > 0


async def _others_untouched(pool: Pool, first: Any) -> None:
    """Only the first turn ran; every other is queued, never started; no lease held."""
    rows = await fetch(pool, "SELECT id, status, attempts FROM turns")
    assert {(r[1], r[2]) for r in rows if r[0] != first} == {("queued", 0)}, rows
    assert {(r[1], r[2]) for r in rows if r[0] == first} <= {("succeeded", 1), ("queued", 0)}
    held = await fetch(pool, "SELECT id FROM sessions WHERE lease_owner IS NOT NULL")
    assert held == []


@pytest.mark.parametrize("next_work", ["queued_behind", "another_session"])
async def test_a_finish_sent_after_the_fence_fell_starts_no_turn(
    db: ScratchTarget, pool: Pool, one_connection: Pool, next_work: str
) -> None:
    """The finish's next work is the session's own next turn (the lease kept) or
    another session (claimed): neither is started once the worker fenced itself."""
    client = ClientStore(db.config, pool)
    first = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    if next_work == "queued_behind":
        await client.turns_enqueue(session_id=first.session_id, idempotency_key="b", turn_input={})
    runtime = SqlWorkerStore(db.config, one_connection, concurrency=1)
    claim, turn = await claim_one(runtime, "w1")
    await client.turns_enqueue(session_id=None, idempotency_key="c", turn_input={})
    fenced = asyncio.Event()
    runner = slot_runner(runtime, _Done(), may_write=lambda: not fenced.is_set())
    async with one_connection.connection():  # an outage, as the finish sees it
        slot = asyncio.create_task(runner.run(Held(claim), turn))
        await wait_until(lambda: _waiting_for_a_connection(one_connection), what="the finish waits")
        fenced.set()
    await asyncio.wait_for(slot, timeout=30)
    await _others_untouched(pool, turn.turn_id)


async def test_a_claim_sent_after_the_fence_fell_claims_nothing(
    db: ScratchTarget, pool: Pool, one_connection: Pool
) -> None:
    client = ClientStore(db.config, pool)
    await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    fenced = asyncio.Event()
    started: list[Held] = []

    async def run_slot(held: Held, _turn: Any) -> None:
        started.append(held)

    def failed(name: str, exc: BaseException) -> None:
        raise AssertionError(f"{name} failed: {exc}")

    claimer = Claimer(
        store=SqlWorkerStore(db.config, one_connection, concurrency=1),
        slots=Slots(2, claim_wakeup=Wakeup()),
        run_slot=run_slot,
        owner="w1",
        pins=[],
        lease_seconds=30,
        poll_interval=1,
        may_write=lambda: not fenced.is_set(),
        wakeup=Wakeup(),
        on_failure=failed,
    )
    async with one_connection.connection():
        claim = asyncio.create_task(claimer.run_once())
        await wait_until(lambda: _waiting_for_a_connection(one_connection), what="the claim waits")
        fenced.set()
    assert await asyncio.wait_for(claim, timeout=30) == 0
    assert started == []
    await _others_untouched(pool, None)
