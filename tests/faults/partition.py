"""A worker cut off from PostgreSQL while it holds a lease, then healed: the scenario
the fault proxy's blackhole test and the network-namespace hosts' test share.

What differs between them is how the worker reaches the database and how the link
is cut and healed; the scenario takes both as callables. The cut-off worker runs
one turn whose harness waits at a gate, then makes one native effect
(``GateThenEffect``): after the cut it must fence itself and write nothing, a
rescuer takes the session over once the lease has passed, and after the heal the
cut-off worker's next claim is a fresh one, with nothing stale written.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, event_kinds, fetch, turn_states

RENEWAL_FAILED = "lease renewal failed"
SELF_FENCED = "leases not renewed in time"  # LeaseExpired's message: the in-process fence
PARTITION_LEASE = 2.0


@dataclass(frozen=True)
class Partition:
    """Seconds from the cut to the rescuer's takeover and to the cut-off worker's
    renewal ending at its client deadline (monotonic clock of the test)."""

    takeover_s: float
    timed_out_s: float


@dataclass(frozen=True)
class Link:
    """How the scenario starts the cut-off worker and the rescuer, and cuts and heals."""

    start_cut_off: Callable[[], WorkerProc]
    start_rescuer: Callable[[], WorkerProc]
    cut: Callable[[], None]
    heal: Callable[[], None]


async def enqueue(
    client: ClientStore, sessions: int, turn_input: dict[str, object], *, turns: int = 1
) -> list[UUID]:
    ids = []
    for i in range(sessions):
        sid: UUID | None = None
        for t in range(turns):
            queued = await client.turns_enqueue(
                session_id=sid, idempotency_key=f"s{i}-{t}", turn_input=turn_input
            )
            sid = queued.session_id
        assert sid is not None
        ids.append(sid)
    return ids


async def finished(pool: Pool, expected: int) -> bool:
    """At least ``expected`` turns have finished."""
    rows = await fetch(pool, "SELECT count(*) FROM turns WHERE finished_at IS NOT NULL")
    return bool(rows[0][0] >= expected)


async def has_event(pool: Pool, sid: UUID, kind: str, count: int = 1) -> bool:
    return (await event_kinds(pool, sid)).count(kind) >= count


async def log_shows(worker: WorkerProc, text: str, *, after: int = 0) -> bool:
    return text in worker.log_text()[after:]


async def worker_id(pool: Pool, worker: WorkerProc) -> str:
    async def registered() -> str:
        rows = await fetch(pool, "SELECT id FROM workers WHERE pid = %s", worker.pid)
        return str(rows[0][0]) if rows else ""

    return await wait_until(registered, what=f"worker {worker.pid} registered")


async def cut_heal_and_rejoin(
    cluster: Cluster,
    pool: Pool,
    link: Link,
    stop: Callable[[WorkerProc], Any],
    *,
    renewal_deadline: float,
) -> tuple[UUID, Partition]:
    """The scenario; returns the session it cut off and the figures. Asserts the
    events and effects, not the checkers (the caller runs them, with the fault)."""
    lease = PARTITION_LEASE
    cut = link.start_cut_off()
    cut_id = await worker_id(pool, cut)
    client = ClientStore(cluster.db.config, pool)
    [sid] = await enqueue(client, 1, {"gate": "cut"})
    await wait_until(lambda: has_event(pool, sid, "turn.started"), what="the turn started")
    [(epoch, expires)] = await fetch(
        pool, "SELECT lease_epoch, lease_expires_at FROM sessions WHERE id = %s", sid
    )

    async def renewed() -> bool:
        rows = await fetch(pool, "SELECT lease_expires_at FROM sessions WHERE id = %s", sid)
        return bool(rows[0][0] > expires)

    await wait_until(renewed, what="a lease renewal after the turn started")
    rescuer = link.start_rescuer()
    await worker_id(pool, rescuer)

    link.cut()
    cut_off_at = time.monotonic()
    await wait_until(lambda: has_event(pool, sid, "turn.started", 2), what="the rescuer took over")
    takeover = time.monotonic() - cut_off_at
    [(new_epoch, owner)] = await fetch(
        pool, "SELECT lease_epoch, lease_owner FROM sessions WHERE id = %s", sid
    )
    assert new_epoch == epoch + 1 and owner != cut_id

    # Both workers' turns now ask to start their step; only the holder may.
    cluster.open_gate("cut")
    await wait_until(lambda: finished(pool, 1), what="the rescuer finished the turn")
    await wait_until(lambda: log_shows(cut, SELF_FENCED), what="the cut-off worker fenced itself")
    await wait_until(
        lambda: log_shows(cut, RENEWAL_FAILED),
        what="the cut-off worker's renewal ended at its client deadline",
        within=renewal_deadline + lease / 3 + 12,
    )
    timed_out_after = time.monotonic() - cut_off_at
    assert cut.proc.poll() is None, "the cut-off worker died instead of waiting it out"
    settled = await fetch(
        pool, "SELECT seq, kind, lease_epoch FROM events WHERE session_id = %s ORDER BY seq", sid
    )
    assert [(k, e) for _, k, e in settled] == [
        ("turn.started", epoch),
        ("turn.started", epoch + 1),
        ("tool.called", epoch + 1),
        ("tool.returned", epoch + 1),
        ("turn.completed", epoch + 1),
    ]

    link.heal()
    await stop(rescuer)
    [later] = await enqueue(client, 1, {"gate": "cut"})

    async def cut_off_worker_served_again() -> bool:
        rows = await fetch(
            pool,
            "SELECT worker_id FROM turns WHERE session_id = %s AND status = 'succeeded'",
            later,
        )
        return bool(rows) and rows[0][0] == cut_id

    await wait_until(cut_off_worker_served_again, what="the healed worker ran a new turn")
    await stop(cut)
    after = await fetch(
        pool, "SELECT seq, kind, lease_epoch FROM events WHERE session_id = %s ORDER BY seq", sid
    )
    assert after == settled, "the healed worker wrote to the session it lost"
    assert len(cluster.journal_keys(sid)) == 1
    assert await turn_states(pool) == [("succeeded", 2), ("succeeded", 1)]
    return sid, Partition(takeover_s=takeover, timed_out_s=timed_out_after)
