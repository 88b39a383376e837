"""Fault tests: PostgreSQL stops for a while under load, then comes back.

Under load (2 workers x 4 slots running short scripted turns fed continuously
through the store, one ``stint api`` process answering ~20 authenticated GETs a
second, and one SSE stream through it on each of 40 sessions), PostgreSQL is
stopped (``pg_ctl stop -m fast``), kept down for N seconds and started again;
the load goes on until work flows again, every stream has caught up and 100
requests sent since have been answered. Then: no API request sent after
PostgreSQL was back failed, every stream survived (never ended) and delivered
its session's seqs 1..N exactly once in order, every worker's ``/livez`` said
200 from the stop to the end (not before: a starting worker blocks its loop on
imports, a lag its /livez shows), and the checkers pass (with
``no_stranded_lease``). The recovery times are printed, one ``outage-figure``
line each (``pytest -s``), never asserted: "back" is
``pg_postmaster_start_time()``, on the database's clock, a moment before the
server accepts connections, so every time measured from it is an upper bound.

N is 5 s by default. ``STINT_OUTAGE_SECONDS=5,70,300`` (read when the tests are
collected) runs those lengths instead, one after another; docs/reliability.md
quotes their figures. A second test starts workers while PostgreSQL is down:
they wait for it (alive, not ready, nothing written) and work once it is up;
SIGTERM during the wait exits 0.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg
import pytest

from stint.lab.sse import http_status
from stint.postgres.throwaway import ThrowawayTemplate
from tests.api.conftest import ApiServer, free_port, start_api
from tests.faults.outage_load import (
    ApiTraffic,
    EventFollower,
    create_key,
    under_load,
)
from tests.faults.private import (
    Private,
    Producer,
    all_finished,
    assert_acknowledged_terminal,
    assert_checks_pass,
    attempts_by_session,
    log_has,
    private_stint,
    scalar,
    stop_and_assert_clean_exit,
)
from tests.polling import wait_until
from tests.workers import WorkerProc, fetch

TENANT = "outage"
SESSIONS = 40  # one SSE stream on each
TURN = {"min_wait_ms": 50}
AFTER = 100  # API requests sent after PostgreSQL is back, all of which must succeed
DEFAULT_OUTAGES = "5"

# Seconds from the postmaster's (re)start to the first turn started after it
# (a turn.started event: each attempt writes one; database clock).
FIRST_START_SINCE_BACK = """
SELECT extract(epoch FROM min(created_at) - pg_postmaster_start_time())::float8
FROM events WHERE kind = 'turn.started' AND created_at >= pg_postmaster_start_time()
"""


def outage_lengths() -> list[Any]:
    """STINT_OUTAGE_SECONDS, each with a deadline that fits its length."""
    raw = os.environ.get("STINT_OUTAGE_SECONDS", DEFAULT_OUTAGES)
    lengths = [float(part) for part in raw.split(",") if part.strip()]
    return [
        pytest.param(s, id=f"{s:g}s", marks=pytest.mark.timeout(round(s) + 150)) for s in lengths
    ]


# -- probes ---------------------------------------------------------------------------


async def postmaster_start(p: Private) -> float:
    """When the running server started (epoch seconds, database clock), read over a
    connection of its own as soon as it answers."""

    async def read() -> float | None:
        try:
            async with await psycopg.AsyncConnection.connect(p.target.conninfo) as conn:
                cur = await conn.execute("SELECT extract(epoch FROM pg_postmaster_start_time())")
                row = await cur.fetchone()
        except psycopg.OperationalError:
            return None
        return None if row is None else float(row[0])

    started = await wait_until(read, what="the server answers")
    assert started is not None
    return started


async def first_start_since_back(p: Private) -> float | None:
    value = await scalar(p.pool, FIRST_START_SINCE_BACK)
    return None if value is None else float(value)


async def last_seqs(p: Private) -> dict[UUID, int]:
    rows = await fetch(p.pool, "SELECT id, last_event_seq FROM sessions")
    return {r[0]: int(r[1]) for r in rows}


async def caught_up(followers: Sequence[EventFollower], log: dict[UUID, int]) -> bool:
    """Every stream has delivered as many events as its session had in ``log``."""
    return all(len(f.seqs) >= log[f.session_id] for f in followers)


async def ready(port: int) -> bool:
    return await http_status("127.0.0.1", port, "/readyz") == 200


async def live_not_ready(port: int) -> bool:
    live = await http_status("127.0.0.1", port, "/livez")
    return live == 200 and await http_status("127.0.0.1", port, "/readyz") == 503


@asynccontextmanager
async def running_api(p: Private) -> AsyncIterator[ApiServer]:
    # Room for everything this test's clients hold open at once: requests at
    # ApiTraffic's 20/s that wait through a 5 s outage, plus 40 streams reopening. The
    # default bound (128) would shed some of them with 503 after PostgreSQL is back;
    # shedding is tested in tests/api, this test is about recovery.
    api = await start_api(p.target, p.tmp / "api.log", STINT_API_MAX_REQUESTS="1024")
    try:
        yield api
    finally:
        if api.proc.poll() is None:
            api.proc.kill()
        api.proc.wait()


# -- the figures ----------------------------------------------------------------------


@dataclass(frozen=True)
class Recovery:
    """What an outage of ``outage_s`` cost, as measured from outside."""

    outage_s: float
    first_turn_s: float
    ready_s: list[float]
    failed_during: int
    failed_after: int
    sent_after: int
    survived: int
    streams: int
    wrong_streams: int
    not_live: int
    failures: dict[str, int]

    def print(self) -> None:
        label = f"outage-figure [{self.outage_s:g}s]"
        lines = [
            f"first turn started {self.first_turn_s:.3f} s after PostgreSQL was back",
            "workers ready " + " / ".join(f"{s:.3f}" for s in self.ready_s) + " s after",
            f"API requests failed during the outage {self.failed_during} {self.failures}",
            f"API requests failed after PostgreSQL was back {self.failed_after} "
            f"(of {self.sent_after} sent after)",
            f"SSE streams survived {self.survived}/{self.streams}, "
            f"gaps or duplicates in {self.wrong_streams}",
            f"/livez samples not 200 {self.not_live}",
        ]
        print()
        for line in lines:
            print(f"{label} {line}")


def failure_kinds(traffic: ApiTraffic, until: float) -> dict[str, int]:
    kinds: dict[str, int] = {}
    for answer in traffic.failed(0.0, until):
        kind = str(answer.status) if answer.status is not None else answer.error.split(":")[0]
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def wrong_streams(followers: Sequence[EventFollower], log: dict[UUID, int]) -> list[str]:
    """Streams whose events are not exactly seqs 1..N of their session, in order."""
    return [
        f"{f.session_id}: {len(f.seqs)} events, last {log[f.session_id]}"
        for f in followers
        if f.seqs != list(range(1, log[f.session_id] + 1))
    ]


# -- 1: an outage under load ----------------------------------------------------------


@pytest.mark.parametrize("outage_s", outage_lengths())
async def test_fault_outage_recovery_under_load(
    pg_template: ThrowawayTemplate, tmp_path: Path, outage_s: float
) -> None:
    """PostgreSQL down for ``outage_s`` under load: no request after it is back fails,
    every stream survives without a gap, workers stay live, the checks pass."""
    async with private_stint(pg_template, tmp_path) as p, running_api(p) as api:
        producer = Producer(p.client, turn_input=TURN, tenant=TENANT)
        sessions = await producer.sessions(SESSIONS, "s")
        token = await create_key(p, TENANT)
        async with under_load(p, api, producer, sessions, token) as load:
            health, followers, traffic = load.health, load.followers, load.traffic
            down = time.time()
            await asyncio.to_thread(p.server.stop, "fast")
            await asyncio.sleep(outage_s)  # the outage itself, not a synchronisation
            await asyncio.to_thread(p.server.start)
            back = await postmaster_start(p)
            await wait_until(
                lambda: first_start_since_back(p), what="a turn started after the restart"
            )
            await wait_until(lambda: health.all_ready_since(back), what="both workers ready again")
            log = await last_seqs(p)
            await wait_until(
                lambda: caught_up(followers, log), what="every stream caught up, under load"
            )
            await wait_until(
                lambda: traffic.answered_since(back, AFTER), what=f"{AFTER} requests answered"
            )
            await load.stop_feeding()
            await wait_until(lambda: all_finished(p.pool), what="every turn finished", within=60)
            log = await last_seqs(p)
            await wait_until(lambda: caught_up(followers, log), what="every stream caught up")
            await load.stop_traffic()
        first_turn = await first_start_since_back(p)
        assert first_turn is not None
        recovery = Recovery(
            outage_s=outage_s,
            first_turn_s=first_turn,
            ready_s=[at - back for _, at in sorted(health.ready_since(back).items())],
            failed_during=len(traffic.failed(0.0, back)),
            failed_after=len(traffic.failed(back)),
            sent_after=sum(1 for a in traffic.answers if a.sent >= back),
            survived=sum(1 for f in followers if f.survived),
            streams=len(followers),
            wrong_streams=len(wrong_streams(followers, log)),
            not_live=len(health.not_live(down)),
            failures=failure_kinds(traffic, back),
        )
        recovery.print()
        assert not traffic.failed(back), traffic.failed(back)[:5]
        assert recovery.sent_after >= AFTER
        assert not traffic.failed_before(down), "requests failed before the outage"
        assert recovery.survived == len(followers), [f for f in followers if not f.survived][:5]
        assert not wrong_streams(followers, log), wrong_streams(followers, log)[:5]
        assert not health.not_live(down), health.not_live(down)[:5]
        await assert_acknowledged_terminal(p.pool, producer)
        stop_and_assert_clean_exit(load.workers, load.pids)
        # The outage touched every session at most once: one retry each at most.
        await assert_checks_pass(p.workers, p.pool, dict.fromkeys(sessions, 1))
    print(f"outage-figure [{outage_s:g}s] checks passed (no_stranded_lease included)")


# -- 2: workers started while PostgreSQL is down -----------------------------------------


async def _exit_code(worker: WorkerProc) -> int:
    return await asyncio.to_thread(worker.wait, 30)


async def test_fault_worker_started_while_postgres_is_down_waits(
    pg_template: ThrowawayTemplate, tmp_path: Path
) -> None:
    """Workers started with PostgreSQL stopped wait for it: alive (``/livez`` 200), not
    ready (``/readyz`` 503), nothing written; one stopped by SIGTERM meanwhile exits 0;
    the other runs the queued turns once PostgreSQL starts."""
    async with private_stint(pg_template, tmp_path) as p:
        producer = Producer(p.client, turn_input=TURN)
        await producer.sessions(4, "s")
        await asyncio.to_thread(p.server.stop, "fast")
        port, other = free_port(), free_port()
        waiting = p.workers.start_worker(slots=2, health_port=port)
        stopped = p.workers.start_worker(slots=2, health_port=other)
        for worker, health_port in ((waiting, port), (stopped, other)):
            says = partial(log_has, worker, "waiting for PostgreSQL")
            await wait_until(says, what="the worker says it waits")
            await wait_until(partial(live_not_ready, health_port), what="alive and not ready")
        stopped.signal(signal.SIGTERM)
        assert await _exit_code(stopped) == 0, stopped.log_text()[-2000:]
        assert await log_has(stopped, "stopped while waiting for the database")
        await asyncio.sleep(3.0)  # the outage goes on; the waiting worker must outlast it
        assert waiting.proc.poll() is None, waiting.log_text()[-2000:]
        assert await live_not_ready(port)
        await asyncio.to_thread(p.server.start)
        back = await postmaster_start(p)
        await wait_until(lambda: all_finished(p.pool), what="the queued turns ran")
        await wait_until(lambda: ready(port), what="the worker is ready")
        # Nothing was written before PostgreSQL came back, by either worker.
        rows = await fetch(p.pool, "SELECT pid, extract(epoch FROM started_at) FROM workers")
        assert [r[0] for r in rows] == [waiting.pid]
        assert all(float(r[1]) >= back for r in rows)
        early = "SELECT count(*) FROM events WHERE created_at < pg_postmaster_start_time()"
        assert await scalar(p.pool, early) == 0
        assert set((await attempts_by_session(p.pool)).values()) == {1}
        await assert_acknowledged_terminal(p.pool, producer)
        stop_and_assert_clean_exit([waiting], [waiting.pid])
        await assert_checks_pass(p.workers, p.pool, {})
