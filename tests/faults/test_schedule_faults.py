"""Schedules on a fleet of real workers, some killed with SIGKILL mid-tick: every tick
from the schedule's creation to where it stands is enqueued, once.

``STINT_SOAK_SCHEDULE_SECONDS`` (default 12) sets how long the fleet test runs; the
5-minute run of docs/load/schedules-webhooks.md is the same test with 300, and
``STINT_SOAK_SCHEDULE_REPORT=FILE`` writes its figures as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from stint.store.schedules import tick_key
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, fetch

SECONDS = float(os.environ.get("STINT_SOAK_SCHEDULE_SECONDS", "12"))


def _start(cluster: Cluster, failpoints: str = "") -> WorkerProc:
    """A worker whose scheduler looks every 0.2 s and that delivers no webhooks."""
    return cluster.start_worker(
        schedule_poll_seconds=0.2, webhook_poll_seconds=0, failpoints=failpoints
    )


def _create(cluster: Cluster, name: str) -> UUID:
    made = cluster.stint(
        "schedule", "create", name, '{"min_wait_ms": 0}', "--every", "1", "--tenant", "acme"
    )
    assert made.returncode == 0, made.stderr
    return UUID(json.loads(made.stdout)["schedule_id"])


async def _ticks(pool: Pool, schedule_id: UUID) -> int:
    rows = await fetch(
        pool, "SELECT count(*) FROM schedule_ticks WHERE schedule_id = %s", schedule_id
    )
    return int(rows[0][0])


async def _exited(worker: WorkerProc) -> bool:
    return worker.proc.poll() is not None


async def _settled(pool: Pool) -> bool:
    rows = await fetch(pool, "SELECT count(*) FROM turns WHERE finished_at IS NULL")
    return rows == [(0,)]


async def _assert_every_tick_once(pool: Pool, schedule_id: UUID) -> dict[str, Any]:
    """The schedule's ticks are exactly anchor + 1 s, + 2 s ... up to the tick before its
    next run: none lost, none twice; each has one turn with its key, on its own
    session, finished once. Returns the figures."""
    [(anchor, next_run, skipped, refused, enqueued)] = await fetch(
        pool,
        "SELECT anchor_at, next_run_at, ticks_skipped, ticks_refused, ticks_enqueued "
        "FROM schedules WHERE id = %s",
        schedule_id,
    )
    rows = await fetch(
        pool,
        "SELECT t.tick_at, t.outcome, t.created_at, x.idempotency_key, x.status, x.attempts, "
        "x.session_id, t.worker FROM schedule_ticks t JOIN turns x ON x.id = t.turn_id "
        "WHERE t.schedule_id = %s ORDER BY t.tick_at",
        schedule_id,
    )
    count = round((next_run - anchor) / timedelta(seconds=1)) - 1
    assert [r[0] for r in rows] == [anchor + timedelta(seconds=k) for k in range(1, count + 1)]
    assert (skipped, refused, enqueued) == (0, 0, count)
    assert all(r[1] == "enqueued" and r[3] == tick_key(schedule_id, r[0]) for r in rows)
    assert all(r[4] == "succeeded" for r in rows)
    assert len({r[6] for r in rows}) == count  # a new session per tick
    [(turns,)] = await fetch(
        pool,
        "SELECT count(*) FROM turns WHERE idempotency_key LIKE %s",
        f"schedule:{schedule_id}:%",
    )
    assert turns == count
    late = [(r[2] - r[0]).total_seconds() for r in rows]
    return {
        "ticks": count,
        "span_seconds": (rows[-1][0] - rows[0][0]).total_seconds() + 1 if rows else 0,
        # Ticks each worker ran, most first (worker ids name hosts: not in a report).
        "ticks_per_worker": sorted(Counter(r[7] for r in rows).values(), reverse=True),
        "lateness_s": {
            "p50": round(statistics.median(late), 3) if late else None,
            "max": round(max(late), 3) if late else None,
        },
    }


async def test_a_second_schedule_on_three_workers_one_killed_mid_tick(
    cluster: Cluster, pool: Pool, db: ScratchTarget, tmp_path: Path
) -> None:
    """Three workers run a 1-second schedule; one is killed (SIGKILL, from a failpoint)
    in the middle of its first tick, after enqueuing the tick's turn and before the
    commit. The tick it held is neither lost nor run twice: another worker runs it."""
    victim = _start(cluster, "schedule_before_commit:kill")
    others = [_start(cluster) for _ in range(2)]
    started = time.monotonic()
    schedule_id = _create(cluster, "fleet")
    await wait_until(lambda: _exited(victim), what="the victim died mid-tick", within=60)
    assert victim.proc.returncode == -signal.SIGKILL
    want = max(3, round(SECONDS))

    async def enough() -> bool:
        return await _ticks(pool, schedule_id) >= want

    await wait_until(enough, what=f"{want} ticks", within=SECONDS * 3 + 60)
    assert cluster.stint("schedule", "pause", str(schedule_id)).returncode == 0
    elapsed = time.monotonic() - started
    await wait_until(lambda: _settled(pool), what="every tick's turn finished")
    for worker in others:
        worker.signal(signal.SIGTERM)
    assert [w.wait() for w in others] == [0, 0]
    figures = await _assert_every_tick_once(pool, schedule_id)
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()
    if path := os.environ.get("STINT_SOAK_SCHEDULE_REPORT"):
        _write_report(
            Path(path),
            {
                "schema_version": 1,
                "test": "test_a_second_schedule_on_three_workers_one_killed_mid_tick",
                "seconds_asked": SECONDS,
                "wall_seconds_to_pause": round(elapsed, 1),
                "workers": 3,
                "killed_mid_tick": 1,
                **figures,
                "checks": {c.name: c.passed for c in report.checks},
            },
        )


def _write_report(path: Path, document: dict[str, Any]) -> None:
    path.write_text(json.dumps(document, indent=2) + "\n")


async def test_a_worker_killed_just_after_its_commit_runs_no_tick_twice(
    cluster: Cluster, pool: Pool
) -> None:
    """Killed right after committing a pass: the ticks it committed are recorded and the
    schedule moved, so the worker that carries on runs none of them again."""
    victim = _start(cluster, "schedule_after_commit:kill")
    schedule_id = _create(cluster, "after-commit")
    await wait_until(lambda: _exited(victim), what="the victim died after its commit")
    by_victim = await _ticks(pool, schedule_id)
    assert by_victim >= 1
    rescuer = _start(cluster)

    async def more() -> bool:
        return await _ticks(pool, schedule_id) >= by_victim + 3

    await wait_until(more, what="three ticks after the kill")
    assert cluster.stint("schedule", "pause", str(schedule_id)).returncode == 0
    await wait_until(lambda: _settled(pool), what="every tick's turn finished")
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    await _assert_every_tick_once(pool, schedule_id)
    report = await run_checks(pool, journals=cluster.workspace / "journals")
    assert report.passed, report.as_json()
