"""The work channel's notifications against real PostgreSQL: an enqueue notifies
only when it makes a session ready, naming the session (and its pin) so one worker
claims for it (stint/worker/roster.py); a batch of new sessions and a nudge wake
everyone; the roster lists the live running workers, and a worker registering or
draining tells every worker to read it again.

Absence is shown by order, not by waiting: after the statement under test the test
sends a marker notification, and the next one to arrive must be the marker
(PostgreSQL delivers notifications in commit order).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.config import ROLE_LISTEN
from stint.store.enqueue_batch import EnqueueItem
from stint.store.listen import Listener
from stint.store.models import ROSTER_CHANGED, WorkerPeer
from stint.store.pool import Pool
from stint.store.vocabulary import WorkerState
from stint.store.worker_store import SqlWorkerStore
from tests.workers import fetch

MARKER = "marker"


@pytest.fixture
async def heard(db: ScratchTarget) -> AsyncIterator[Listener]:
    async with Listener(db.config, channels=[db.config.work_channel], role=ROLE_LISTEN) as one:
        yield one


async def _next_payloads(listener: Listener, pool: Pool, channel: str) -> list[str]:
    """Every work notification up to the marker this sends (the marker left out)."""
    await fetch(pool, "SELECT pg_notify(%s, %s)", channel, MARKER)
    payloads: list[str] = []
    async for _, payload in listener.notifications(listen_seconds=30):
        if payload == MARKER:
            return payloads
        payloads.append(payload)
    raise AssertionError(f"the marker never came; heard {payloads}")


async def test_an_enqueue_names_the_session_it_makes_ready_and_only_then(
    db: ScratchTarget, pool: Pool, heard: Listener
) -> None:
    client = ClientStore(db.config, pool)
    channel = db.config.work_channel
    first = await client.turns_enqueue(session_id=None, idempotency_key="a", turn_input={})
    assert await _next_payloads(heard, pool, channel) == [str(first.session_id)]
    # Already ready (no worker here): notified when it became ready, not again.
    await client.turns_enqueue(session_id=first.session_id, idempotency_key="b", turn_input={})
    assert await _next_payloads(heard, pool, channel) == []
    pinned = await client.turns_enqueue(
        session_id=None, idempotency_key="c", turn_input={}, pin="gpu:a100"
    )
    assert await _next_payloads(heard, pool, channel) == [f"{pinned.session_id} gpu:a100"]
    # Two turns into one idle session in one transaction: one notification.
    await fetch(pool, "UPDATE sessions SET status = 'idle', queued_turns = 0 RETURNING id")
    both = [
        EnqueueItem(idempotency_key=key, turn_input={}, session_id=first.session_id)
        for key in ("d", "e")
    ]
    await client.turns_enqueue_many(both)
    assert await _next_payloads(heard, pool, channel) == [str(first.session_id)]


async def test_new_sessions_in_a_batch_and_a_nudge_wake_every_worker(
    db: ScratchTarget, pool: Pool, heard: Listener
) -> None:
    client = ClientStore(db.config, pool)
    channel = db.config.work_channel
    await client.turns_enqueue_many(
        [EnqueueItem(idempotency_key=f"k{n}", turn_input={}) for n in range(3)]
    )
    assert await _next_payloads(heard, pool, channel) == [""]
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    await runtime.work_nudge()
    assert await _next_payloads(heard, pool, channel) == [""]


async def test_the_roster_lists_the_live_running_workers_in_id_order(
    db: ScratchTarget, pool: Pool, heard: Listener
) -> None:
    channel = db.config.work_channel
    runtime = SqlWorkerStore(db.config, pool, concurrency=1)
    workers = [("w-b", ["gpu"], 2), ("w-a", [], 1), ("w-c", [], 3), ("w-d", [], 4)]
    for worker_id, pins, pid in workers:
        await runtime.workers_register(
            worker_id=worker_id, host="h", pid=pid, version="t", pins=pins, slots=1,
            lease_seconds=30,
        )  # fmt: skip
        # Every worker is told to read its roster again, so it learns of this one at once.
        assert await _next_payloads(heard, pool, channel) == [ROSTER_CHANGED]
    await runtime.workers_set_state(worker_id="w-c", pid=3, state=WorkerState.DRAINING)
    assert await _next_payloads(heard, pool, channel) == [ROSTER_CHANGED]
    stale = "UPDATE workers SET heartbeat_at = now() - interval '31 s' WHERE id = 'w-d' RETURNING 1"
    await fetch(pool, stale)
    assert await runtime.workers_peers() == [WorkerPeer("w-a", ()), WorkerPeer("w-b", ("gpu",))]
