"""Fault test: a worker whose wall clock is two minutes off.

Stint takes every time that measures the system from the database clock, and a
worker's own timing (renewal interval, self-fencing) from its monotonic clock.
So a worker run under ``faketime`` two minutes ahead or behind must hold leases
that end ``lease`` seconds after the database's now(), stamp turns with the
database's time, lose no lease and pass the checks, next to a worker whose
clock is right.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from uuid import UUID

import psutil
import pytest

from stint.ops.checks import run_checks
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, fetch, turn_states

FAKETIME = shutil.which("faketime")
# Long enough that a renewal delayed by a loaded machine does not let a lease lapse: the
# test is about which clock the lease is computed on, not about renewal latency.
LEASE = 10.0
SESSIONS = 6
TURNS = 2
TURN_MS = 300

pytestmark = pytest.mark.skipif(
    FAKETIME is None,
    reason="faketime not found: install the Debian/Ubuntu package 'faketime' (apt-get install "
    "faketime) to run the clock-skew fault tests",
)


@cache
def monotonic_kept() -> tuple[list[str], dict[str, str]]:
    """How to leave the monotonic clock alone: a faketime flag, or the library's variable."""
    assert FAKETIME is not None
    usage = subprocess.run([FAKETIME, "--help"], capture_output=True, text=True, check=False)
    if "--exclude-monotonic" in usage.stdout + usage.stderr:
        return ["--exclude-monotonic"], {}
    return [], {"FAKETIME_DONT_FAKE_MONOTONIC": "1"}


@dataclass
class SkewedWorker:
    """``faketime -f OFFSET python -m stint.worker.main``; faketime forks the worker and
    passes its exit status on, so signals go to the worker, the wait to faketime."""

    wrapper: subprocess.Popen[bytes]
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    async def worker_pid(self) -> int:
        async def child() -> int:
            kids = psutil.Process(self.wrapper.pid).children()
            return kids[0].pid if kids else 0

        return await wait_until(child, what="faketime started the worker")

    async def drain(self) -> int:
        os.kill(await self.worker_pid(), signal.SIGTERM)
        return self.wrapper.wait(timeout=60)


@pytest.fixture
def skewed(cluster: Cluster) -> Iterator[Callable[[str], SkewedWorker]]:
    """Start workers under faketime; kill each one's process group afterwards."""
    started: list[subprocess.Popen[bytes]] = []

    def start(offset: str) -> SkewedWorker:
        assert FAKETIME is not None
        flags, extra_env = monotonic_kept()
        log = cluster.logs / f"skewed{len(started)}.log"
        env = {
            **os.environ,
            **cluster.env,
            **extra_env,
            "STINT_LEASE_SECONDS": str(LEASE),
        }
        command = [FAKETIME, *flags, "-f", offset, sys.executable, "-m", "stint.worker.main"]
        with log.open("ab") as out:
            wrapper = subprocess.Popen(
                [*command, "--slots", "2"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: faketime and the worker
            )
        started.append(wrapper)
        return SkewedWorker(wrapper, log)

    try:
        yield start
    finally:
        for wrapper in started:
            if wrapper.poll() is None:
                os.killpg(wrapper.pid, signal.SIGKILL)
                wrapper.wait()


def logged_skew(text: str) -> float:
    """Seconds the first log line's timestamp (the worker's wall clock) is ahead."""
    stamp = datetime.strptime(text[:23], "%Y-%m-%d %H:%M:%S,%f")
    return stamp.timestamp() - time.time()


async def db_now(pool: Pool) -> datetime:
    rows = await fetch(pool, "SELECT now()")
    value: datetime = rows[0][0]
    return value


async def enqueue(client: ClientStore) -> list[UUID]:
    sessions = []
    for i in range(SESSIONS):
        sid: UUID | None = None
        for t in range(TURNS):
            queued = await client.turns_enqueue(
                session_id=sid,
                idempotency_key=f"s{i}-{t}",
                turn_input={"min_wait_ms": TURN_MS},
            )
            sid = queued.session_id
        assert sid is not None
        sessions.append(sid)
    return sessions


@pytest.mark.parametrize("offset", ["+120s", "-120s"])
async def test_fault_skewed_worker_clock_leaves_leases_and_audit_times_on_the_db_clock(
    offset: str,
    skewed: Callable[[str], SkewedWorker],
    cluster: Cluster,
    pool: Pool,
) -> None:
    """A worker two minutes off (either way) holds leases ending within (0, lease]
    of the database's now(), its turns' start and finish times are the database's
    time when they happened, no lease is lost (every turn runs once, next to an
    unskewed worker) and the checks pass."""
    skew = float(offset.removesuffix("s"))
    first = await db_now(pool)
    worker = skewed(offset)
    await wait_until(
        lambda: _has_text(worker, "running"), what="the skewed worker running", within=60
    )
    # The worker's own wall clock really is off: its log lines are stamped with it.
    assert abs(logged_skew(worker.log_text()) - skew) < 30, worker.log_text()[:200]
    [(skewed_id,)] = await fetch(pool, "SELECT id FROM workers")

    began = await db_now(pool)
    await enqueue(ClientStore(cluster.db.config, pool))

    async def skewed_worker_holds_two() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM sessions WHERE lease_owner = %s", skewed_id)
        return bool(rows[0][0] == 2)

    await wait_until(skewed_worker_holds_two, what="the skewed worker holding two sessions")
    upright = cluster.start_worker(slots=2, lease_seconds=LEASE)

    lease_samples: dict[str, list[float]] = {"skewed": [], "upright": []}
    lags: list[float] = []
    seen_started: set[UUID] = set()
    seen_finished: set[UUID] = set()

    async def sampled_until_done() -> bool:
        rows = await fetch(
            pool,
            "SELECT lease_owner, extract(epoch FROM lease_expires_at - now())::float8 "
            "FROM sessions WHERE status = 'running' AND lease_owner IS NOT NULL",
        )
        for owner, left in rows:
            lease_samples["skewed" if owner == skewed_id else "upright"].append(left)
        turns = await fetch(
            pool,
            "SELECT id, extract(epoch FROM now() - started_at)::float8, "
            "extract(epoch FROM now() - finished_at)::float8 FROM turns",
        )
        for turn_id, since_start, since_finish in turns:
            if since_start is not None and turn_id not in seen_started:
                seen_started.add(turn_id)
                lags.append(since_start)
            if since_finish is not None and turn_id not in seen_finished:
                seen_finished.add(turn_id)
                lags.append(since_finish)
        return len(seen_finished) == SESSIONS * TURNS

    await wait_until(sampled_until_done, what="all turns finished", within=60)
    ended = await db_now(pool)

    held = lease_samples["skewed"]
    assert held, "never saw the skewed worker hold a lease"
    every = held + lease_samples["upright"]
    # Computed on the database's clock: never more than a lease ahead of its now() (a
    # clock 120 s ahead would show ~LEASE + 120), and not far behind it (a clock 120 s
    # behind would show ~LEASE - 120; a renewal late on a loaded machine shows a little
    # under 0, which is not what this test is about).
    margin = abs(skew) / 2
    assert all(-margin < left <= LEASE for left in every), (min(every), max(every))
    # Stamped with the database's time: each seen a poll or so after it happened, never
    # the skew away (how soon the test's poll sees it depends on the machine's load).
    assert all(0 <= lag < margin for lag in lags), (min(lags), max(lags))

    assert await turn_states(pool) == [("succeeded", 1)] * (SESSIONS * TURNS)
    by_worker = dict(await fetch(pool, "SELECT worker_id, count(*) FROM turns GROUP BY 1"))
    assert by_worker.get(skewed_id, 0) >= 2, by_worker
    stamps = await fetch(
        pool,
        "SELECT min(least(enqueued_at, first_claimed_at, started_at, finished_at)), "
        "max(greatest(enqueued_at, first_claimed_at, started_at, finished_at)) FROM turns",
    )
    assert began <= stamps[0][0] and stamps[0][1] <= ended, (began, stamps, ended)
    assert await fetch(
        pool,
        "SELECT count(*) FROM turns WHERE NOT "
        "(enqueued_at <= first_claimed_at AND first_claimed_at <= started_at "
        "AND started_at < finished_at)",
    ) == [(0,)]
    events = await fetch(pool, "SELECT min(created_at), max(created_at) FROM events")
    assert began <= events[0][0] and events[0][1] <= ended, (began, events, ended)
    for text in (worker.log_text(), upright.log_text()):
        assert "lease lost" not in text, text[-3000:]

    assert await worker.drain() == 0, worker.log_text()[-3000:]
    # The upright worker may have had nothing to do and still be starting (a SIGTERM
    # before its handlers are installed ends it as -15): signal it once it runs.
    await wait_until(
        lambda: _has_text(upright, "running"), what="the upright worker running", within=60
    )
    upright.signal(signal.SIGTERM)
    assert upright.wait() == 0, upright.log_text()[-3000:]
    workers = await fetch(pool, "SELECT id, started_at, heartbeat_at, now() FROM workers")
    for _, started_at, heartbeat_at, now in workers:
        assert first <= started_at <= heartbeat_at <= now, (first, workers)
    report = await run_checks(pool, journals=cluster.workspace / "journals", faults={})
    assert report.passed, report.as_json()
    print(
        f"clock {offset}: {len(held)} lease samples of the skewed worker in "
        f"[{min(held):.2f}, {max(held):.2f}]s left, stamp lags <= {max(lags):.3f}s"
    )


async def _has_text(worker: SkewedWorker | WorkerProc, text: str) -> bool:
    return text in worker.log_text()
