"""HA test: with asynchronous replication only, a failover loses what the standbys had
not received (the RPO), and ``stint check`` finds what it can of it.

A Patroni cluster without ``synchronous_mode``. Under load, the primary's WAL
senders are stopped (SIGSTOP: a replication lag, induced; stopping the receivers
instead lags nothing, as the kernel's socket buffers keep what was sent), turns go
on being acknowledged and run on the primary alone, then its postmaster and the
stopped senders are killed; Patroni promotes a standby within ``maximum_lag_on_failover``,
and the old primary is rewound (``pg_rewind``) onto the new timeline. The turns
acknowledged after the receivers stopped are gone from the database; the ones a
worker ran meanwhile left their effects in the journals (the outside world), which
the checker finds as effects with no committed step. Printed, one ``ha-figure``
line each: acknowledged turns lost, and what the checker reported.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from stint.lab.patroni import Member, PatroniCluster, patroni_unavailable
from stint.ops.checks import run_checks
from tests.faults.private import Producer
from tests.ha.conftest import healthy
from tests.ha.ha_stint import HaStint, ha_stint, writable_since
from tests.polling import wait_until
from tests.workers import fetch

SESSIONS = 8
TURN = {"min_wait_ms": 50}
UNREPLICATED = 16  # turns acknowledged while the standbys receive nothing

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def async_patroni() -> Iterator[PatroniCluster]:
    why = patroni_unavailable()
    if why is not None:
        pytest.skip(why)
    cluster = PatroniCluster(synchronous=False).start()
    try:
        yield cluster
    finally:
        cluster.destroy()


def sender_pids(cluster: PatroniCluster, primary: Member) -> list[int]:
    """The primary's WAL senders (``pg_stat_replication``), one per standby."""
    with psycopg.connect(cluster.member_conninfo(primary)) as conn:
        rows = conn.execute("SELECT pid FROM pg_stat_replication").fetchall()
    assert len(rows) == len(cluster.members) - 1, rows
    return [int(r[0]) for r in rows]


async def finished_count(p: HaStint) -> int:
    rows = await fetch(p.pool, "SELECT count(*) FROM turns WHERE finished_at IS NOT NULL")
    return int(rows[0][0])


async def test_ha_async_failover_loses_the_unreplicated_and_check_finds_their_effects(
    async_patroni: PatroniCluster, tmp_path: Path
) -> None:
    cluster = await healthy(async_patroni)
    async with ha_stint(cluster, tmp_path) as p:
        producer = Producer(p.client, turn_input=TURN)
        sessions = await producer.sessions(SESSIONS, "s")
        workers = [p.workers.start_worker(slots=4) for _ in range(2)]
        await wait_until(
            lambda: _at_least(finished_count(p), SESSIONS), what="the first turns finished"
        )
        old = cluster.primary()
        assert old is not None
        senders = sender_pids(cluster, old)
        for pid in senders:
            os.kill(pid, signal.SIGSTOP)
        try:
            before = set(producer.acknowledged)
            done_before = await finished_count(p)
            for i in range(UNREPLICATED // SESSIONS):
                await producer.more_turns(sessions, f"unreplicated-{i}")
            await wait_until(
                lambda: _at_least(finished_count(p), done_before + UNREPLICATED),
                what="the unreplicated turns ran (their effects made)",
            )
            struck = time.time()
            cluster.kill_postmaster(old)
        finally:
            for pid in senders:  # a stopped sender would not see its postmaster die
                os.kill(pid, signal.SIGKILL)
        await asyncio.to_thread(cluster.wait_for_new_primary, old)
        promoted_s = time.time() - struck
        await writable_since(p, struck)
        await p.pool.check()
        rows = await fetch(p.pool, "SELECT id FROM turns")
        present = {r[0] for r in rows}
        lost = [t for t in producer.acknowledged if t not in present]
        lost_after_stop = [t for t in lost if t not in before]
        for worker in workers:
            worker.proc.kill()
            worker.proc.wait()
        report = await run_checks(p.pool, journals=p.workers.workspace / "journals")
        failed = {c.name: c.evidence for c in report.checks if not c.passed}
        print(
            f"\nha-figure [async RPO] {len(lost)} of {len(producer.acknowledged)} acknowledged "
            f"turns lost ({UNREPLICATED} acknowledged while the standbys received nothing); "
            f"new primary {promoted_s:.2f} s after the kill"
        )
        print(f"ha-figure [async RPO] stint check failed: {sorted(failed)}")
        # Only what was acknowledged while the standbys received nothing can be lost.
        assert lost and lost == lost_after_stop, (len(lost), len(lost_after_stop))
        assert "effects_match_steps" in failed, report.as_json()


async def _at_least(probe: object, n: int) -> bool:
    assert asyncio.iscoroutine(probe)
    value = await probe
    return bool(value >= n)
