"""HA tests: workers on separate hosts (network namespaces), PostgreSQL on another.

Each worker runs in a network namespace of its own (tests/ha/hosts.py) and reaches
PostgreSQL, which listens in the root namespace, over a veth link; the test
process reads the database over loopback. Faults are nftables rules in a worker's
namespace: its packets are dropped (both ways, or only those coming in: a one-way
link), so its open connections hang until their client deadlines, as on a real
network partition, while the other host's worker keeps its link. Then the clock:
a worker host whose wall clock is two minutes ahead (libfaketime, the monotonic
clock left alone). After each, the invariants are checked with ``stint check``'s
checkers (stranded leases included).
"""

from __future__ import annotations

import asyncio
import shutil
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from stint.postgres.throwaway import ThrowawayCluster, ThrowawayTemplate
from stint.store.client import ClientStore
from tests.faults.partition import (
    PARTITION_LEASE,
    Link,
    cut_heal_and_rejoin,
    enqueue,
    finished,
)
from tests.faults.private import StintOn, assert_checks_pass, stint_on, stop_and_assert_clean_exit
from tests.faults.test_fault_network import HARNESS, stop
from tests.ha.hosts import NETWORK, Host, hosts_unavailable, make_hosts, remove_hosts
from tests.polling import wait_until
from tests.workers import WorkerProc, fetch, turn_states

FAKETIME_LIB = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
SKEW = "+120s"
LOSS_PERCENT = 10

pytestmark = [
    pytest.mark.skipif(hosts_unavailable() is not None, reason=str(hosts_unavailable())),
    pytest.mark.timeout(120),
]


@dataclass
class Hosts(StintOn):
    """Two worker hosts, the server they reach, a Stint database on it, workers."""

    hosts: list[Host]
    server: ThrowawayCluster

    def url(self, host: Host) -> str:
        """The database's conninfo as ``host`` reaches it: the root end of its link."""
        params = {k: str(v) for k, v in conninfo_to_dict(self.target.conninfo).items() if v}
        params.pop("hostaddr", None)
        return make_conninfo(**{**params, "host": host.gateway})

    def start_on(
        self, host: Host, *, slots: int, env: dict[str, str] | None = None, **settings: Any
    ) -> WorkerProc:
        return self.workers.start_worker_under(
            host.exec_prefix(), env or {}, slots=slots, database_url=self.url(host), **settings
        )


@pytest.fixture
def hosts() -> Iterator[list[Host]]:
    made = make_hosts(2)
    try:
        yield made
    finally:
        remove_hosts(made)


@pytest_asyncio.fixture(loop_scope="session")
async def on_hosts(
    hosts: list[Host], pg_template: ThrowawayTemplate, tmp_path: Path
) -> AsyncIterator[Hosts]:
    server = await asyncio.to_thread(pg_template.new_cluster)
    try:
        await asyncio.to_thread(server.listen_also, [h.gateway for h in hosts], str(NETWORK))
        async with stint_on(server.conninfo(), tmp_path, drop=False) as base:
            base.workers.env["PYTHONFAULTHANDLER"] = "1"
            yield Hosts(hosts=hosts, server=server, **base.parts())
    finally:
        await asyncio.to_thread(server.destroy)


@pytest.mark.parametrize("inbound_only", [False, True], ids=["both-ways", "one-way"])
async def test_hosts_partition_fences_the_cut_off_worker_and_another_host_takes_over(
    on_hosts: Hosts, inbound_only: bool
) -> None:
    """A worker host loses its link while the worker holds a lease (both ways, or only
    what comes in): the worker fences itself and writes nothing after its lease, the
    other host's worker takes the session over after expiry; healed, the cut-off
    worker writes nothing stale and its next claim is a fresh one; checks pass."""
    h = on_hosts
    cut_host, other = h.hosts
    deadline = 1 + 1 + 1.0  # connect_timeout + statement_timeout + 1 (StoreConfig)
    link = Link(
        start_cut_off=lambda: h.start_on(
            cut_host,
            slots=1,
            harness=HARNESS,
            lease_seconds=PARTITION_LEASE,
            statement_timeout=1,
            connect_timeout=1,
        ),
        start_rescuer=lambda: h.start_on(
            other, slots=1, harness=HARNESS, lease_seconds=PARTITION_LEASE
        ),
        cut=lambda: cut_host.cut(inbound_only=inbound_only),
        heal=cut_host.heal,
    )
    sid, figures = await cut_heal_and_rejoin(
        h.workers, h.pool, link, stop, renewal_deadline=deadline
    )
    await assert_checks_pass(h.workers, h.pool, {sid: 1})
    way = "one-way" if inbound_only else "both ways"
    print(
        f"\nhosts-figure [partition {way}] takeover {figures.takeover_s:.2f} s after the cut "
        f"(lease {PARTITION_LEASE:g} s); the cut-off worker's renewal ended at its deadline "
        f"after {figures.timed_out_s:.2f} s"
    )


@pytest.mark.skipif(
    shutil.which("faketime") is None or not FAKETIME_LIB.exists(),
    reason="libfaketime not found: apt-get install faketime",
)
async def test_hosts_clock_skew_on_one_worker_host_changes_nothing(on_hosts: Hosts) -> None:
    """One worker host's wall clock runs two minutes ahead (libfaketime; monotonic
    clock untouched), the other's is right: every turn succeeds on its first attempt,
    leases held are never longer than a lease from the database's now, no lease is
    lost, and the checks pass."""
    h = on_hosts
    skewed_host, right_host = h.hosts
    skewed_env = {
        "LD_PRELOAD": str(FAKETIME_LIB),
        "FAKETIME": SKEW,
        "FAKETIME_DONT_FAKE_MONOTONIC": "1",
    }
    lease = 5.0  # a loaded machine can delay a 2 s lease's renewal: skew must not be blamed
    skewed = h.start_on(skewed_host, env=skewed_env, slots=2, lease_seconds=lease)
    right = h.start_on(right_host, slots=2, lease_seconds=lease)
    await enqueue(ClientStore(h.target.config, h.pool), 6, {"min_wait_ms": 300}, turns=2)
    longest = 0.0

    async def done_with_leases_sampled() -> bool:
        nonlocal longest
        rows = await fetch(
            h.pool,
            "SELECT max(extract(epoch FROM lease_expires_at - now()))::float8 "
            "FROM sessions WHERE status = 'running'",
        )
        if rows[0][0] is not None:
            longest = max(longest, float(rows[0][0]))
        return await finished(h.pool, 12)

    await wait_until(done_with_leases_sampled, what="12 turns finished", within=60)
    logs = f"skewed:\n{skewed.log_text()[-3000:]}\nright:\n{right.log_text()[-3000:]}"
    assert await turn_states(h.pool) == [("succeeded", 1)] * 12, logs
    assert longest <= lease, f"a lease ran {longest:.2f}s past the database's now"
    workers = await fetch(h.pool, "SELECT DISTINCT worker_id FROM turns")
    assert len(workers) == 2, "both hosts' workers ran turns"
    future = await fetch(h.pool, "SELECT count(*) FROM events WHERE created_at > now()")
    assert future == [(0,)], "an event was stamped with the skewed clock"
    for worker in (skewed, right):
        assert "lease lost" not in worker.log_text(), worker.log_text()[-3000:]
    stop_and_assert_clean_exit([skewed, right], [skewed.pid, right.pid])
    await assert_checks_pass(h.workers, h.pool, {})


async def test_hosts_a_lossy_link_slows_work_down_but_loses_nothing(on_hosts: Hosts) -> None:
    """A worker host whose link drops 10 % of its packets each way (TCP retransmits):
    every turn still succeeds, each effect once, and the checks pass."""
    h = on_hosts
    lossy_host = h.hosts[0]
    worker = h.start_on(lossy_host, slots=2, lease_seconds=5)
    sessions = await enqueue(ClientStore(h.target.config, h.pool), 4, {"min_wait_ms": 100}, turns=2)
    lossy_host.lossy(LOSS_PERCENT)
    began = time.monotonic()
    try:
        await wait_until(lambda: finished(h.pool, 8), what="8 turns over the lossy link", within=90)
    finally:
        lossy_host.heal()
    took = time.monotonic() - began
    states = await turn_states(h.pool)
    assert {s for s, _ in states} == {"succeeded"}, states
    for sid in sessions:
        keys = h.workers.journal_keys(sid)
        assert len(keys) == len(set(keys)) == 2, keys
    stop_and_assert_clean_exit([worker], [worker.pid])
    await assert_checks_pass(h.workers, h.pool, dict.fromkeys(sessions, 1))
    attempts = max(a for _, a in states)
    print(
        f"\nhosts-figure [lossy {LOSS_PERCENT}%] 8 turns of 100 ms in {took:.2f} s, "
        f"at most {attempts} attempts a turn"
    )
