"""Signals in real workers: ``ctx.wait_for`` parks slot-free until ``stint signal``;
a signal sent before the wait is kept for it; each is consumed exactly once, through
a kill -9 before and after its consumption."""

from __future__ import annotations

import json
import signal
from typing import Any
from uuid import UUID

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, event_kinds, fetch


async def _enqueue(
    client: ClientStore, key: str, turn_input: dict[str, Any], session: UUID | None = None
) -> UUID:
    queued = await client.turns_enqueue(
        session_id=session, idempotency_key=key, turn_input=turn_input
    )
    return queued.session_id


async def _output(pool: Pool, session_id: UUID) -> Any:
    """The session's only turn's output once it succeeded."""
    rows = await fetch(pool, "SELECT status, output FROM turns WHERE session_id = %s", session_id)
    status, output = rows[0]
    assert status in ("queued", "running", "succeeded"), status
    return output if status == "succeeded" else None


async def _waiting(pool: Pool, session_id: UUID) -> bool:
    rows = await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", session_id)
    return "wait.started" in await event_kinds(pool, session_id) and rows[0] == ("ready", None)


def _send(cluster: Cluster, session_id: UUID, name: str, payload: Any, key: str) -> Any:
    result = cluster.stint(
        "signal", str(session_id), name, json.dumps(payload), "--idempotency-key", key
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


async def _signals(pool: Pool, session_id: UUID) -> list[tuple[str, Any, bool]]:
    rows = await fetch(
        pool,
        "SELECT idempotency_key, payload, consumed_at IS NOT NULL FROM signals "
        "WHERE session_id = %s ORDER BY created_at",
        session_id,
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def _checks(pool: Pool, cluster: Cluster) -> None:
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()


async def test_a_wait_frees_its_slot_until_the_signal_and_a_retry_sends_nothing(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=1)
    sid = await _enqueue(client, "waiter", {"min_wait_ms": 0, "wait_for": "go"})
    await wait_until(lambda: _waiting(pool, sid), what="the turn waits for go")
    other = await _enqueue(client, "other", {"min_wait_ms": 0})
    assert await wait_until(lambda: _output(pool, other), what="the other turn ran meanwhile")
    first = _send(cluster, sid, "go", {"n": 1}, "k1")
    assert _send(cluster, sid, "go", {"n": 1}, "k1") == {**first, "created": False}
    refused = cluster.stint("signal", str(sid), "go", '{"n": 2}', "--idempotency-key", "k1")
    assert refused.returncode == 2 and refused.stdout == ""
    output = await wait_until(lambda: _output(pool, sid), what="the turn resumed")
    assert output["signal"] == {"id": first["signal_id"], "payload": {"n": 1}}
    assert await _signals(pool, sid) == [("k1", {"n": 1}, True)]
    kinds = await event_kinds(pool, sid)
    assert kinds.count("signal.received") == 1 and kinds.count("wait.finished") == 1
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


async def test_a_signal_sent_before_the_wait_is_kept_for_the_first_wait_on_its_name(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    sid = await client.sessions_create()
    _send(cluster, sid, "other-name", "not mine", "k0")
    _send(cluster, sid, "go", "first", "k1")
    _send(cluster, sid, "go", "second", "k2")
    worker = cluster.start_worker(slots=1)
    await _enqueue(client, "t1", {"min_wait_ms": 0, "wait_for": "go"}, session=sid)
    output = await wait_until(lambda: _output(pool, sid), what="the turn took a kept signal")
    assert output["signal"]["payload"] == "first"  # the oldest of its name
    assert "wait.started" not in await event_kinds(pool, sid)  # it never had to wait
    assert await _signals(pool, sid) == [
        ("k0", "not mine", False),
        ("k1", "first", True),
        ("k2", "second", False),  # kept for the next wait on "go"
    ]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


async def test_a_wait_for_a_signal_times_out_as_a_value(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=1)
    sid = await _enqueue(client, "t", {"min_wait_ms": 0, "wait_for": "go", "timeout_s": 0.5})
    output = await wait_until(lambda: _output(pool, sid), what="the wait timed out")
    assert output["signal"] is None
    rows = await fetch(pool, "SELECT result->>'outcome' FROM steps WHERE kind = 'wait'")
    assert rows == [("timeout",)]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    await _checks(pool, cluster)


async def _consumed_once_across_a_kill(
    cluster: Cluster, db: ScratchTarget, pool: Pool, failpoint: str
) -> None:
    client = ClientStore(db.config, pool)
    sid = await client.sessions_create()
    _send(cluster, sid, "go", "a", "k1")
    _send(cluster, sid, "go", "b", "k2")
    doomed = cluster.start_worker(slots=1, failpoints=f"{failpoint}:kill")
    await _enqueue(client, "t1", {"min_wait_ms": 0, "wait_for": "go"}, session=sid)
    assert doomed.wait() == -signal.SIGKILL
    successor = cluster.start_worker(slots=1)
    output = await wait_until(lambda: _output(pool, sid), what="the turn resumed")
    assert output["signal"]["payload"] == "a"
    assert await _signals(pool, sid) == [("k1", "a", True), ("k2", "b", False)]
    rows = await fetch(pool, "SELECT attempts FROM turns WHERE session_id = %s", sid)
    assert rows == [(2,)]
    assert (await event_kinds(pool, sid)).count("wait.finished") == 1
    successor.signal(signal.SIGTERM)
    assert successor.wait() == 0
    await _checks(pool, cluster)


async def test_a_kill_before_the_consumption_consumes_the_signal_once(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    await _consumed_once_across_a_kill(cluster, db, pool, "after_wait_begun")


async def test_a_kill_after_the_consumption_replays_the_same_signal(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    await _consumed_once_across_a_kill(cluster, db, pool, "after_wait_settled")
