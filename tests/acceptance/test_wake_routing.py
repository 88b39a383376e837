"""Acceptance: a session's work notification wakes one worker, with real workers and
PostgreSQL. The workers poll once a minute here, so a turn not woken by a
notification would wait past every timeout below: each turn that finishes in time
was claimed by the notification's routing, and the claim counters say by how many
claims (stint/worker/roster.py).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.models import WorkerPeer
from stint.store.pool import Pool
from stint.worker.roster import Roster
from tests.polling import wait_until
from tests.scrape import Samples, free_port, scrape, total
from tests.workers import Cluster, WorkerProc, fetch

pytestmark = pytest.mark.acceptance

POLL_SECONDS = 60  # the longest the settings allow: the poll never finds these turns
LEASE_SECONDS = 6  # the roster is read every 2 s


def _start(cluster: Cluster, worker_id: str, slots: int, port: int) -> WorkerProc:
    return cluster.start_worker(
        slots=slots,
        worker_id=worker_id,
        poll_interval=POLL_SECONDS,
        lease_seconds=LEASE_SECONDS,
        health_port=port,
        schedule_poll_seconds=0,
    )


async def _both_see_both(workers: list[WorkerProc]) -> bool:
    return all("roster: 2 live workers" in w.log_text() for w in workers)


async def _claims(ports: list[int]) -> tuple[float, float] | None:
    """(claim statements, sessions claimed) over the workers."""
    pages: list[Samples] = []
    for port in ports:
        page = await scrape(f"http://127.0.0.1:{port}/metrics")
        if page is None:
            return None
        pages.append(page)
    return total(pages, "stint_claims_total"), total(pages, "stint_claimed_sessions_total")


def _succeeded(pool: Pool, session_id: uuid.UUID) -> Callable[[], Awaitable[bool]]:
    async def succeeded() -> bool:
        rows = await fetch(pool, "SELECT status FROM turns WHERE session_id = %s", session_id)
        return [r[0] for r in rows] == ["succeeded"]

    return succeeded


async def _enqueue(db: ScratchTarget, pool: Pool, key: str, **turn: object) -> uuid.UUID:
    queued = await ClientStore(db.config, pool).turns_enqueue(
        session_id=None, idempotency_key=key, turn_input={"min_wait_ms": 0, **turn}
    )
    return queued.session_id


async def test_each_new_session_is_claimed_once_by_the_worker_it_names(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    ports = [free_port(), free_port()]
    workers = [_start(cluster, f"wake-{n}", 2, port) for n, port in enumerate(ports)]
    await wait_until(lambda: _both_see_both(workers), what="both rosters hold both workers")
    before = await wait_until(lambda: _claims(ports), what="both workers serve /metrics")
    for n in range(10):
        sid = await _enqueue(db, pool, f"k{n}")
        await wait_until(_succeeded(pool, sid), what=f"turn {n} succeeded")
    after = await wait_until(lambda: _claims(ports), what="the counters")
    # One claim statement a turn, and it claimed the turn's session: no herd.
    assert (after[0] - before[0], after[1] - before[1]) == (10, 10)


async def test_a_busy_picked_worker_passes_the_session_on_to_a_free_one(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    ports = [free_port(), free_port()]
    busy = _start(cluster, "wake-busy", 1, ports[0])
    held = await _enqueue(db, pool, "held", gate="hold")
    await wait_until(lambda: _running_under(pool, held, "wake-busy"), what="the slot is taken")
    free = _start(cluster, "wake-free", 2, ports[1])
    await wait_until(lambda: _both_see_both([busy, free]), what="both rosters hold both workers")
    roster = Roster("wake-busy", [])
    roster.update([WorkerPeer("wake-busy", ()), WorkerPeer("wake-free", ())])
    passed_on = 0
    for n in range(8):
        sid = await _enqueue(db, pool, f"k{n}")
        passed_on += roster.picks_me(str(sid))
        await wait_until(_succeeded(pool, sid), what=f"turn {n} succeeded")
        assert await _ran_under(pool, sid) == "wake-free"
    assert passed_on, "no session was picked for the busy worker: the case was not exercised"
    cluster.open_gate("hold")
    await wait_until(_succeeded(pool, held), what="the held turn succeeded")


async def _running_under(pool: Pool, session_id: uuid.UUID, worker_id: str) -> bool:
    rows = await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", session_id)
    return [(r[0], r[1]) for r in rows] == [("running", worker_id)]


async def _ran_under(pool: Pool, session_id: uuid.UUID) -> str:
    """The worker that started the session's turn (its turn.started event)."""
    rows = await fetch(
        pool,
        "SELECT payload->>'worker' FROM events WHERE session_id = %s AND kind = 'turn.started'",
        session_id,
    )
    return str(rows[0][0])
