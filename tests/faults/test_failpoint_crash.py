"""Fault tests: workers crash, stall or fail at named failpoints, and zombies stay fenced.

Every scenario runs real worker processes (``STINT_FAILPOINTS``, signals, a row
lock held by the test) against the test's own database and ends with the shared
invariant checker. Recovery times are measured from database timestamps only.
"""

from __future__ import annotations

import signal
from collections import Counter
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
import pytest
from psycopg import sql

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from stint.worker.failpoints import FAILPOINTS
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, event_kinds, fetch

RESCUER = "rescuer"
VICTIM = "victim"
BLOCKER_PIN = "blocker"  # only the rescuer accepts the blocker session
RECOVERY_MARGIN = 2.0  # seconds on top of the protocol bound (poll interval + 1 s)

Row = tuple[Any, ...]


# -- helpers -----------------------------------------------------------------


async def _enqueue(
    client: ClientStore,
    turn_input: dict[str, object],
    *,
    turns: int = 1,
    pin: str | None = None,
) -> UUID:
    first = await client.turns_enqueue(
        session_id=None, idempotency_key="t0", turn_input=turn_input, pin=pin
    )
    for n in range(1, turns):
        await client.turns_enqueue(
            session_id=first.session_id,
            idempotency_key=f"t{n}",
            turn_input=turn_input,
        )
    return first.session_id


async def _events(pool: Pool, sid: UUID) -> list[Row]:
    """(kind, lease_epoch, payload, created_at, turn_id) in seq order."""
    return await fetch(
        pool,
        "SELECT kind, lease_epoch, payload, created_at, turn_id FROM events "
        "WHERE session_id = %s ORDER BY seq",
        sid,
    )


async def _turns(pool: Pool, sid: UUID) -> list[Row]:
    """(id, status, attempts, worker_id, error) in turn order."""
    return await fetch(
        pool,
        "SELECT id, status, attempts, worker_id, error FROM turns WHERE session_id = %s "
        "ORDER BY seq",
        sid,
    )


async def _has_event(pool: Pool, sid: UUID, kind: str, count: int = 1) -> bool:
    return (await event_kinds(pool, sid)).count(kind) >= count


async def _session_finished(pool: Pool, sid: UUID) -> bool:
    rows = await fetch(
        pool,
        "SELECT count(*) FILTER (WHERE finished_at IS NULL), count(*) FROM turns "
        "WHERE session_id = %s",
        sid,
    )
    unfinished: int = rows[0][0]
    total: int = rows[0][1]
    return unfinished == 0 and total > 0


async def _exit_code(worker: WorkerProc, *, what: str, within: float = 30) -> int:
    async def exited() -> bool:
        return worker.proc.poll() is not None

    await wait_until(exited, what=what, within=within)
    code = worker.proc.returncode
    assert code is not None
    return code


async def _log_says(worker: WorkerProc, text: str, *, what: str) -> None:
    async def found() -> bool:
        return text in worker.log_text()

    await wait_until(found, what=what)


async def _busy_rescuer(cluster: Cluster, client: ClientStore, pool: Pool) -> WorkerProc:
    """A rescuer that is already running but busy, so it cannot claim the victim's
    session before the victim does; opening the ``blocker`` gate frees its slot.

    The blocker session is pinned, so a victim started at the same time cannot
    take it; the rescuer starts before the fault, so recovery time measures the
    protocol (expiry + poll), not a Python start-up.
    """
    rescuer = cluster.start_worker(slots=1, worker_id=RESCUER, pins=BLOCKER_PIN)
    blocker = await _enqueue(client, {"min_wait_ms": 0, "gate": "blocker"}, pin=BLOCKER_PIN)
    await wait_until(lambda: _has_event(pool, blocker, "turn.started"), what="rescuer busy")
    return rescuer


async def _dead_lease(pool: Pool, sid: UUID) -> tuple[str, int, datetime, datetime]:
    """(owner, epoch, lease_expires_at, now()) of a session that is still leased."""
    [(status, owner, epoch, expires, now)] = await fetch(
        pool,
        "SELECT status, lease_owner, lease_epoch, lease_expires_at, now() FROM sessions "
        "WHERE id = %s",
        sid,
    )
    assert status == "running", (status, owner)
    return owner, epoch, expires, now


async def _first_start_after(pool: Pool, sid: UUID, epoch: int) -> datetime:
    rows = await fetch(
        pool,
        "SELECT min(created_at) FROM events "
        "WHERE session_id = %s AND kind = 'turn.started' AND lease_epoch > %s",
        sid,
        epoch,
    )
    started: datetime = rows[0][0]
    assert started is not None
    return started


async def _assert_each_turn_and_effect_once(
    pool: Pool, cluster: Cluster, sid: UUID, *, status: str = "succeeded"
) -> None:
    """Every turn ended exactly once with ``status``; each effect is one journal
    line and one step committed once (one ``tool.returned``)."""
    turns = await _turns(pool, sid)
    assert [t[1] for t in turns] == [status] * len(turns), turns
    events = await _events(pool, sid)
    terminal = Counter(
        e[4] for e in events if e[0] in ("turn.completed", "turn.failed", "turn.interrupted")
    )
    assert terminal == Counter({t[0]: 1 for t in turns}), events
    keys = [f"effect-{t[0]}" for t in turns]
    assert sorted(cluster.journal_keys(sid)) == sorted(keys)
    steps = await fetch(
        pool, "SELECT step_key, status FROM steps WHERE session_id = %s ORDER BY step_key", sid
    )
    assert steps == [(k, "committed") for k in sorted(keys)]
    returned = Counter(e[2]["step_key"] for e in events if e[0] == "tool.returned")
    assert returned == Counter(dict.fromkeys(keys, 1)), events


async def _assert_checks_pass(pool: Pool, cluster: Cluster, faults: dict[UUID, int]) -> None:
    report = await run_checks(pool, journals=cluster.workspace / "journals", faults=faults)
    assert report.passed, report.as_json()


async def _stop(worker: WorkerProc) -> None:
    """SIGTERM: the worker drains and exits 0 (its log is the failure message)."""
    worker.signal(signal.SIGTERM)
    try:
        code = await _exit_code(worker, what="the worker drained and exited", within=30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- worker log ---\n{worker.log_text()}") from None
    assert code == 0, worker.log_text()


# -- 1. kill -9 at every failpoint -------------------------------------------

# The victim session has two plain turns. Per failpoint: who wrote each event,
# "A" (the killed victim's lease) or "B" (the rescuer's, one epoch later).
_T = ["turn.started", "tool.called", "tool.returned", "turn.completed"]
_EXPECTED: dict[str, list[tuple[str, str]]] = {
    # The claim statement also started the turn: the rescuer starts it again.
    "after_claim": [("turn.started", "A"), *[(k, "B") for k in _T * 2]],
    "after_step_started": [
        ("turn.started", "A"),
        ("tool.called", "A"),
        ("turn.started", "B"),
        ("tool.returned", "B"),
        ("turn.completed", "B"),
        *[(k, "B") for k in _T],
    ],
    "after_effect": [
        ("turn.started", "A"),
        ("tool.called", "A"),
        ("turn.started", "B"),
        ("tool.returned", "B"),
        ("turn.completed", "B"),
        *[(k, "B") for k in _T],
    ],
    "after_step_commit": [
        ("turn.started", "A"),
        ("tool.called", "A"),
        ("tool.returned", "A"),
        ("turn.started", "B"),
        ("turn.completed", "B"),
        *[(k, "B") for k in _T],
    ],
    # The finish statement also started turn 2: the rescuer starts it again.
    "after_turn_finish": [(k, "A") for k in _T] + [("turn.started", "A")] + [(k, "B") for k in _T],
}
# (attempts of turn 1, who started turn 1 last, was turn 1's effect reconciled,
#  attempts of turn 2)
_TURN1: dict[str, tuple[int, str, bool, int]] = {
    "after_claim": (2, RESCUER, False, 1),  # started, nothing run: B starts it again
    "after_step_started": (2, RESCUER, False, 1),  # the effect never ran: B runs it
    "after_effect": (2, RESCUER, True, 1),  # fsync'd but not committed: B finds it
    "after_step_commit": (2, RESCUER, False, 1),  # committed: B replays its result
    "after_turn_finish": (1, VICTIM, False, 2),  # finished: B must not rerun it
}


@pytest.mark.parametrize("name", FAILPOINTS)
async def test_crash_kill9_at_failpoint_is_recovered_exactly_once(
    cluster: Cluster, db: ScratchTarget, pool: Pool, name: str
) -> None:
    """SIGKILL at each failpoint: a running rescuer takes the session over once the
    dead lease expires (within poll interval + 1 s, by DB clock), every turn ends
    once, every effect is journalled and committed once, nothing is rerun."""
    client = ClientStore(db.config, pool)
    victim = cluster.start_worker(slots=1, worker_id=VICTIM, failpoints=f"{name}:kill")
    rescuer = await _busy_rescuer(cluster, client, pool)
    sid = await _enqueue(client, {"min_wait_ms": 0}, turns=2)

    assert await _exit_code(victim, what=f"victim killed at {name}") == -signal.SIGKILL
    owner, dead_epoch, expires, freed_at = await _dead_lease(pool, sid)
    assert (owner, dead_epoch) == (VICTIM, 1)
    cluster.open_gate("blocker")  # the rescuer's slot is free from here on
    await wait_until(lambda: _session_finished(pool, sid), what="rescuer finished both turns")

    started = await _first_start_after(pool, sid, dead_epoch)
    recovery = (started - expires).total_seconds()
    since_free = (started - max(expires, freed_at)).total_seconds()
    print(f"\nfailpoint {name}: recovery {recovery:.3f}s after the dead lease expired")
    assert recovery > 0, "the rescuer took over a lease that had not expired yet"
    poll = float(cluster.env["STINT_POLL_INTERVAL"])
    assert since_free <= poll + 1.0 + RECOVERY_MARGIN, (recovery, since_free)

    epochs = {"A": dead_epoch, "B": dead_epoch + 1}
    events = await _events(pool, sid)
    assert [(e[0], e[1]) for e in events] == [(k, epochs[w]) for k, w in _EXPECTED[name]]
    turns = await _turns(pool, sid)
    attempts, starter, reconciled, second = _TURN1[name]
    assert [(t[2], t[3]) for t in turns] == [(attempts, starter), (second, RESCUER)]
    flags = [e[2]["reconciled"] for e in events if e[0] == "tool.returned"]
    assert flags == [reconciled, False]
    await _assert_each_turn_and_effect_once(pool, cluster, sid)
    assert await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", sid) == [
        ("idle", None)
    ]
    await _stop(rescuer)
    await _assert_checks_pass(pool, cluster, {sid: 1})


# -- 2. raise after the effect -----------------------------------------------


async def test_failpoint_raise_after_effect_fails_the_turn_without_duplicating(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """A FailpointError after the effect is fsync'd but before the step commits
    takes the harness's error path: the turn fails once and is never retried,
    the effect stays a single journal line, nothing more is written, and the
    step must not stay 'started' (committed, or surfaced as unknown)."""
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=1, failpoints="after_effect:raise")
    sid = await _enqueue(client, {"min_wait_ms": 0})
    await wait_until(lambda: _session_finished(pool, sid), what="the turn ended")

    [(turn_id, status, attempts, _, error)] = await _turns(pool, sid)
    assert (status, attempts) == ("failed", 1)
    assert error == "FailpointError: failpoint after_effect"
    kinds = await event_kinds(pool, sid)
    assert kinds[:2] == ["turn.started", "tool.called"]
    assert kinds[-1] == "turn.failed"
    assert kinds.count("turn.started") == 1  # a failed turn is terminal: never retried
    assert cluster.journal_keys(sid) == [f"effect-{turn_id}"]
    steps = await fetch(pool, "SELECT step_key, status FROM steps WHERE session_id = %s", sid)
    assert [s[0] for s in steps] == [f"effect-{turn_id}"]
    await _stop(worker)
    assert await event_kinds(pool, sid) == kinds  # the worker wrote nothing more
    if steps[0][1] == "unknown":
        assert "effect.unknown" in kinds
    else:
        assert steps[0][1] == "committed"
    await _assert_checks_pass(pool, cluster, {sid: 1})


# -- 3. a paused worker loses its lease and wakes as a zombie ----------------


async def test_failpoint_pause_after_step_started_zombie_writes_nothing(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """A worker stalled (whole process) right after recording a step started loses
    its 1 s lease; the rescuer reconciles (the effect never ran), runs the effect
    once and finishes; the woken zombie neither runs the effect nor writes."""
    client = ClientStore(db.config, pool)
    zombie = cluster.start_worker(
        slots=1, worker_id=VICTIM, failpoints="after_step_started:pause:3"
    )
    rescuer = await _busy_rescuer(cluster, client, pool)
    sid = await _enqueue(client, {"min_wait_ms": 0})
    await wait_until(lambda: _has_event(pool, sid, "tool.called"), what="zombie paused")
    cluster.open_gate("blocker")
    await wait_until(lambda: _session_finished(pool, sid), what="rescuer finished the turn")
    settled = await _events(pool, sid)

    await _log_says(zombie, f"session {sid}: lease lost", what="the zombie woke and gave up")
    await _stop(zombie)
    assert await _events(pool, sid) == settled
    assert [(e[0], e[1]) for e in settled] == [
        ("turn.started", 1),
        ("tool.called", 1),
        ("turn.started", 2),
        ("tool.returned", 2),
        ("turn.completed", 2),
    ]
    assert settled[3][2]["reconciled"] is False  # the rescuer ran the effect itself
    [(_, _, attempts, worker_id, _)] = await _turns(pool, sid)
    assert (attempts, worker_id) == (2, RESCUER)
    await _assert_each_turn_and_effect_once(pool, cluster, sid)
    await _stop(rescuer)
    await _assert_checks_pass(pool, cluster, {sid: 1})


# -- 4. identity reuse: the epoch alone fences the zombie --------------------


async def test_zombie_identity_reuse_is_fenced_by_the_epoch_alone(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """Two processes with the same STINT_WORKER_ID: the stopped first one wakes
    while the second holds the session (same owner string, newer epoch, the turn
    still running) and tries to finish the turn. Its own clock says its lease is
    still good, so only the database's epoch check can refuse it, and it does:
    the event log is unchanged and the effect stays single."""
    client = ClientStore(db.config, pool)
    # Long leases: neither process fences itself on its own clock (nor renews
    # during the test), so the zombie's write really reaches the fence.
    zombie = cluster.start_worker(slots=1, worker_id="twin", lease_seconds=30)
    sid = await _enqueue(client, {"min_wait_ms": 0, "gate": "g"})
    await wait_until(lambda: _has_event(pool, sid, "tool.returned"), what="effect committed")
    zombie.signal(signal.SIGSTOP)
    # The database's view of time moves on: the stopped holder's lease runs out.
    assert await fetch(
        pool,
        "UPDATE sessions SET lease_expires_at = now() "
        "WHERE id = %s AND lease_owner = 'twin' AND lease_epoch = 1 RETURNING id",
        sid,
    ) == [(sid,)]
    # ...and so does its heartbeat: a live worker's id is refused to a second
    # process, but one whose heartbeat outlived its lease may be taken over.
    assert await fetch(
        pool,
        "UPDATE workers SET heartbeat_at = now() - interval '1 hour' "
        "WHERE id = 'twin' RETURNING pid",
    ) == [(zombie.pid,)]

    twin = cluster.start_worker(slots=1, worker_id="twin", lease_seconds=30)
    await wait_until(lambda: _has_event(pool, sid, "turn.started", 2), what="twin takeover")
    twin.signal(signal.SIGSTOP)  # it holds the lease: owner "twin", epoch 2, turn running
    assert await fetch(
        pool, "SELECT status, lease_owner, lease_epoch FROM sessions WHERE id = %s", sid
    ) == [("running", "twin", 2)]
    settled = await _events(pool, sid)

    cluster.open_gate("g")  # the zombie's harness returns: it calls turns_finish at epoch 1
    zombie.signal(signal.SIGCONT)
    refused = f"session {sid}: lease lost, stopping its slot"

    async def refused_or_wrote() -> bool:
        return refused in zombie.log_text() or await _events(pool, sid) != settled

    await wait_until(refused_or_wrote, what="the zombie's turns_finish is refused")
    assert await _events(pool, sid) == settled, "the zombie wrote under the twin's lease"
    assert "operation=turns_finish" in zombie.log_text()
    await _stop(zombie)
    assert await _events(pool, sid) == settled
    assert await fetch(pool, "SELECT status, attempts FROM turns") == [("running", 2)]

    twin.signal(signal.SIGCONT)
    await wait_until(lambda: _session_finished(pool, sid), what="the twin finished the turn")
    events = await _events(pool, sid)
    assert events[: len(settled)] == settled
    assert [(e[0], e[1]) for e in events] == [
        ("turn.started", 1),
        ("tool.called", 1),
        ("tool.returned", 1),
        ("turn.started", 2),
        ("turn.completed", 2),
    ]
    assert await fetch(pool, "SELECT status, attempts FROM turns") == [("succeeded", 2)]
    await _assert_each_turn_and_effect_once(pool, cluster, sid)
    await _stop(twin)
    await _assert_checks_pass(pool, cluster, {sid: 1})


# -- 5. a transaction sits on the session row --------------------------------


async def test_zombie_transaction_holding_the_session_row_is_outlived(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """A client pauses inside a transaction holding the session row (FOR UPDATE).
    The worker's turn-finish write hits lock_timeout (LockTimeout: the session is
    given back or left to expiry); once the server's idle-in-transaction timeout
    ends the holder, the turn is retried by replay and completes exactly once."""
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=1, lock_timeout=0.5)
    sid = await _enqueue(client, {"min_wait_ms": 0, "gate": "g"})
    await wait_until(lambda: _has_event(pool, sid, "tool.returned"), what="effect committed")

    holder = await psycopg.AsyncConnection.connect(
        db.conninfo, autocommit=True, application_name="stint-fault-holder"
    )
    try:
        await holder.execute(
            sql.SQL("SET search_path TO {}").format(sql.Identifier(db.config.schema))
        )
        await holder.execute("SET idle_in_transaction_session_timeout = '1s'")
        await holder.execute("BEGIN")
        await holder.execute("SELECT id FROM sessions WHERE id = %s FOR UPDATE", (sid,))
        cluster.open_gate("g")  # the harness returns; turns_finish now waits on our lock
        await wait_until(lambda: _session_finished(pool, sid), what="turn finished after all")
        with pytest.raises(psycopg.errors.IdleInTransactionSessionTimeout):
            await holder.execute("SELECT 1")  # the server ended the idle transaction
    finally:
        await holder.close()

    log = worker.log_text()
    assert "store failed, giving it back" in log
    assert "lock_timeout" in log and "operation=turns_finish" in log
    assert [(e[0], e[1]) for e in await _events(pool, sid)] == [
        ("turn.started", 1),
        ("tool.called", 1),
        ("tool.returned", 1),
        ("turn.started", 2),
        ("turn.completed", 2),
    ]
    assert await fetch(pool, "SELECT status, attempts FROM turns") == [("succeeded", 2)]
    await _assert_each_turn_and_effect_once(pool, cluster, sid)
    await _stop(worker)
    await _assert_checks_pass(pool, cluster, {sid: 1})
