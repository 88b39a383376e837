"""Durable timers in real workers: ``ctx.sleep`` frees the slot, survives a kill -9,
resumes once by replay, and ends with a cancel of its turn."""

from __future__ import annotations

import signal
from typing import Any
from uuid import UUID

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, event_kinds, fetch


async def _enqueue(client: ClientStore, key: str, turn_input: dict[str, Any]) -> UUID:
    queued = await client.turns_enqueue(session_id=None, idempotency_key=key, turn_input=turn_input)
    return queued.session_id


async def _turn(pool: Pool, session_id: UUID) -> tuple[str, int, Any]:
    rows = await fetch(
        pool, "SELECT status, attempts, output FROM turns WHERE session_id = %s", session_id
    )
    return rows[0]


async def _waiting(pool: Pool, session_id: UUID) -> bool:
    """The turn is set aside on its wait: queued, its session ready without a lease."""
    kinds = await event_kinds(pool, session_id)
    rows = await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", session_id)
    return "wait.started" in kinds and rows[0] == ("ready", None)


async def _ended(pool: Pool, session_id: UUID) -> str | None:
    status = (await _turn(pool, session_id))[0]
    return status if status in ("succeeded", "failed", "cancelled", "interrupted") else None


async def test_a_sleeping_turn_frees_its_slot_and_a_cancel_ends_the_sleep(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    worker = cluster.start_worker(slots=1)
    sleeper = await _enqueue(client, "sleeper", {"min_wait_ms": 0, "sleep_s": 3600})
    await wait_until(lambda: _waiting(pool, sleeper), what="the sleeper set aside")
    other = await _enqueue(client, "other", {"min_wait_ms": 0})
    # The one slot runs another session's turn while the first one sleeps.
    assert await wait_until(lambda: _ended(pool, other), what="the other turn ends") == "succeeded"
    assert await _turn(pool, sleeper) == ("queued", 1, None)
    result = cluster.stint("cancel", str(sleeper))
    assert result.returncode == 0, result.stderr
    assert await wait_until(lambda: _ended(pool, sleeper), what="cancelled") == "cancelled"
    assert (await event_kinds(pool, sleeper))[-2:] == ["wait.started", "turn.cancelled"]
    rows = await fetch(pool, "SELECT status, ready_at FROM sessions WHERE id = %s", sleeper)
    assert rows == [("idle", None)]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()


async def test_a_sleep_survives_a_kill_and_resumes_once_after_its_deadline(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    client = ClientStore(db.config, pool)
    first = cluster.start_worker(slots=1)
    sid = await _enqueue(client, "nap", {"min_wait_ms": 0, "sleep_s": 1.5})
    await wait_until(lambda: _waiting(pool, sid), what="the sleeper set aside")
    first.proc.kill()  # kill -9 while the turn sleeps
    first.wait()
    second = cluster.start_worker(slots=1)
    assert await wait_until(lambda: _ended(pool, sid), what="resumed") == "succeeded"
    _, attempts, output = await _turn(pool, sid)
    assert (attempts, output["slept_s"]) == (2, 1.5)
    assert await event_kinds(pool, sid) == [
        "turn.started",
        "tool.called",
        "tool.returned",
        "wait.started",
        "turn.started",
        "wait.finished",
        "turn.completed",
    ]
    # Woken by the database clock, never before the deadline it fixed at the first reach.
    [(deadline, woke, outcome)] = await fetch(
        pool,
        "SELECT w.deadline, st.finished_at, st.result->>'outcome' FROM waits w "
        "JOIN steps st USING (session_id, turn_id, step_key) WHERE w.session_id = %s",
        sid,
    )
    assert woke >= deadline and outcome == "elapsed"
    [(turn_id,)] = await fetch(pool, "SELECT id FROM turns WHERE session_id = %s", sid)
    assert cluster.journal_keys(sid) == [f"effect-{turn_id}"]  # the effect once
    second.signal(signal.SIGTERM)
    assert second.wait() == 0
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()
