"""HA tests: the primary of a Patroni cluster fails (``kill -9`` of its postmaster) or is
switched over (``patronictl switchover``) under load.

The load is the outage tests' (tests/faults/outage_load.py): 2 workers x 4 slots
running scripted turns, each with one native effect, fed continuously through the
store; one ``stint api`` answering ~20 GETs a second; an SSE stream through it on
each session. Workers, API and probes all connect with the cluster's multi-host
conninfo (``target_session_attrs=read-write``), so each new connection finds the
primary of the moment. Patroni runs synchronous replication (``synchronous_mode``):
it promotes only the synchronous standby, which has every acknowledged commit.

Asserted: every LISTEN connection (both workers' and the API's) is re-made on the new
primary, and each worker logged losing the old one; no acknowledged turn is lost and every
one succeeds, the checkers pass
(duplicate effects, contiguous cursors, stranded leases), every stream delivers
each session's seqs 1..N exactly once in order, no API request sent once the new
primary accepted writes failed, and the workers neither crashed nor restarted.
Printed, one ``ha-figure`` line each (``pytest -s``), never asserted: Patroni's
failover time, the time from the fault to the first turn started, the longest
pause in writes, API requests failed, retries and unknown effects.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

import pytest

from stint.lab.patroni import PatroniCluster
from stint.store.config import ROLE_API_LISTEN, ROLE_LISTEN
from tests.api.conftest import start_api
from tests.faults.outage_load import create_key, under_load
from tests.faults.private import (
    Producer,
    all_finished,
    assert_acknowledged_terminal,
    assert_checks_pass,
    stop_and_assert_clean_exit,
)
from tests.faults.test_fault_outage import TENANT, caught_up, failure_kinds, wrong_streams
from tests.ha.conftest import healthy, rounds
from tests.ha.ha_stint import (
    HaStint,
    first_start_after,
    ha_stint,
    longest_write_pause,
    retried_turns,
    unknown_steps,
    writable_since,
)
from tests.polling import wait_until
from tests.workers import fetch

SESSIONS = 16
TURN = {"min_wait_ms": 100}
AFTER = 40  # API requests sent after the new primary took writes, all of which must succeed

pytestmark = pytest.mark.timeout(240)


@dataclass(frozen=True)
class Failover:
    """What one change of primary cost, as measured from outside."""

    fault: str
    promoted_s: float  # fault -> Patroni's REST API names another running leader
    writable_s: float  # fault -> a new connection's write succeeds
    first_turn_s: float  # fault -> the first turn started once writes resumed
    write_pause_s: float  # longest gap between two consecutive events
    acknowledged: int
    lost: int
    retried: int
    unknown_effects: int
    failed_during: int
    failed_after: int
    sent_after: int
    survived: int
    streams: int
    failures: dict[str, int]

    def print(self) -> None:
        label = f"ha-figure [{self.fault}]"
        lines = [
            f"Patroni named a new primary {self.promoted_s:.2f} s after the fault; "
            f"writes accepted after {self.writable_s:.2f} s",
            f"first turn started on the new primary {self.first_turn_s:.2f} s after the fault; "
            f"longest pause between two events {self.write_pause_s:.2f} s",
            f"acknowledged turns {self.acknowledged}, lost {self.lost}, retried {self.retried}, "
            f"unknown effects {self.unknown_effects}",
            f"API requests failed during the change {self.failed_during} {self.failures}, "
            f"after it {self.failed_after} (of {self.sent_after})",
            f"SSE streams survived {self.survived}/{self.streams}",
        ]
        print()
        for line in lines:
            print(f"{label} {line}")


async def run_failover(p: HaStint, fault: str) -> Failover:
    """The load, the fault mid-run, the recovery; asserts and returns the figures."""
    cluster = p.patroni
    old = cluster.primary()
    assert old is not None
    api = await start_api(p.target, p.tmp / "api.log")
    try:
        producer = Producer(p.client, turn_input=TURN, tenant=TENANT)
        sessions = await producer.sessions(SESSIONS, "s")
        token = await create_key(p, TENANT)
        async with under_load(p, api, producer, sessions, token) as load:
            followers, traffic = load.followers, load.traffic
            struck = time.time()
            if fault == "kill":
                cluster.kill_postmaster(old)
            else:
                await asyncio.to_thread(cluster.switchover)
            new = await asyncio.to_thread(cluster.wait_for_new_primary, old)
            promoted = time.time()
            assert new != old
            writable = await writable_since(p, struck)
            await wait_until(
                lambda: first_start_after(p, struck), what="a turn started after the fault"
            )
            # Every LISTEN moved: both workers' and the API's are on the new primary.
            await wait_until(
                lambda: _listening(p, {ROLE_LISTEN: 2, ROLE_API_LISTEN: 1}),
                what="the workers and the API LISTEN on the new primary",
            )
            log = await _last_seqs(p)
            await wait_until(lambda: caught_up(followers, log), what="every stream caught up")
            await wait_until(
                lambda: traffic.answered_since(writable, AFTER), what=f"{AFTER} requests answered"
            )
            await load.stop_feeding()
            await wait_until(lambda: all_finished(p.pool), what="every turn finished", within=60)
            log = await _last_seqs(p)
            await wait_until(lambda: caught_up(followers, log), what="every stream caught up")
            await load.stop_traffic()
        pause, resumed = await longest_write_pause(p, struck - 2)
        first_turn = await first_start_after(p, resumed)
        assert first_turn is not None
        rows = await fetch(p.pool, "SELECT id FROM turns")
        present = {r[0] for r in rows}
        figures = Failover(
            fault=fault,
            promoted_s=promoted - struck,
            writable_s=writable - struck,
            first_turn_s=first_turn - struck,
            write_pause_s=pause,
            acknowledged=len(producer.acknowledged),
            lost=sum(1 for t in producer.acknowledged if t not in present),
            retried=await retried_turns(p),
            unknown_effects=await unknown_steps(p),
            failed_during=len(traffic.failed(struck, writable)),
            failed_after=len(traffic.failed(writable)),
            sent_after=sum(1 for a in traffic.answers if a.sent >= writable),
            survived=sum(1 for f in followers if f.survived),
            streams=len(followers),
            failures=failure_kinds(traffic, writable),
        )
        figures.print()
        assert figures.lost == 0
        await assert_acknowledged_terminal(p.pool, producer)
        assert not wrong_streams(followers, log), wrong_streams(followers, log)[:5]
        assert not traffic.failed(writable), traffic.failed(writable)[:5]
        assert not traffic.failed_before(struck), "requests failed before the fault"
        for worker in load.workers:
            assert "listener lost its connection" in worker.log_text(), worker.log_text()[-2000:]
        stop_and_assert_clean_exit(load.workers, load.pids)
        # One fault touched every session at most once: one retry each at most.
        await assert_checks_pass(p.workers, p.pool, dict.fromkeys(sessions, 1))
    finally:
        if api.proc.poll() is None:
            api.proc.kill()
        api.proc.wait()
    return figures


async def _listening(p: HaStint, expected: dict[str, int]) -> bool:
    """The LISTEN connections to this database on the server the pool reaches (the
    primary), by role, are exactly ``expected``."""
    rows = await fetch(
        p.pool,
        "SELECT application_name, count(*) FROM pg_stat_activity "
        "WHERE datname = current_database() AND application_name = ANY(%s) "
        "GROUP BY application_name",
        list(expected),
    )
    return {r[0]: int(r[1]) for r in rows} == expected


async def _last_seqs(p: HaStint) -> dict[UUID, int]:
    rows = await fetch(p.pool, "SELECT id, last_event_seq FROM sessions")
    return {r[0]: int(r[1]) for r in rows}


@pytest.mark.parametrize("round_", rounds())
async def test_ha_kill_primary_under_load(
    patroni: PatroniCluster, tmp_path: Path, round_: int
) -> None:
    """``kill -9`` of the primary's postmaster: Patroni promotes the synchronous
    standby; workers, API and streams follow it; nothing acknowledged is lost,
    nothing is done twice, every stream is whole."""
    async with ha_stint(await healthy(patroni), tmp_path) as p:
        await run_failover(p, "kill")


@pytest.mark.parametrize("round_", rounds())
async def test_ha_switchover_under_load(
    patroni: PatroniCluster, tmp_path: Path, round_: int
) -> None:
    """``patronictl switchover``: the planned change of primary, with the same promises."""
    async with ha_stint(await healthy(patroni), tmp_path) as p:
        await run_failover(p, "switchover")
