"""Fault tests: PostgreSQL itself misbehaves under running workers.

A fast restart and an immediate stop (a crash) of the server mid-run, a killed
LISTEN connection, lock and statement timeouts, a slot pool smaller than the
slots and a server out of connections. Each test runs real worker processes and
ends with the shared checkers; the restart tests use a private cluster of their
own so that they can stop it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import psutil
import psycopg
import pytest
from psycopg import AsyncConnection, sql
from psycopg.rows import TupleRow

from stint.ops.follow import follow_events
from stint.postgres.scratch import ScratchTarget
from stint.postgres.throwaway import ThrowawayTemplate
from stint.store.client import ClientStore
from stint.store.config import ROLE_LISTEN, StoreConfig
from stint.store.errors import ConnectionFailed
from stint.store.models import Event
from stint.store.pool import Pool
from tests.faults.private import (
    Private,
    Producer,
    all_finished,
    assert_acknowledged_terminal,
    assert_checks_pass,
    attempts_by_session,
    log_has,
    private_stint,
    reachable,
    scalar,
    stop_and_assert_clean_exit,
)
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, fetch

# Busy-looping burns a whole core (~1 CPU-second per second); a worker that waits
# with backoff uses a few hundredths. The bound sits far from both.
CPU_BOUND_PER_SECOND = 0.5 / 3
LOCK_TIMEOUT_TEXT = "waited past lock_timeout"  # LockTimeout's message
STATEMENT_TIMEOUT_TEXT = "ran past statement_timeout"  # QueryTimeout's message


# -- probes -----------------------------------------------------------------------


async def turns_finished(pool: Pool) -> int:
    return int(await scalar(pool, "SELECT count(*) FROM turns WHERE finished_at IS NOT NULL"))


async def turn_count(pool: Pool) -> int:
    return int(await scalar(pool, "SELECT count(*) FROM turns"))


async def listen_pids(pool: Pool) -> set[int]:
    """Backends of this database's worker listeners."""
    rows = await fetch(
        pool,
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s "
        "AND datname = current_database()",
        ROLE_LISTEN,
    )
    return {int(r[0]) for r in rows}


async def event_kinds(pool: Pool, session_id: UUID) -> list[str]:
    rows = await fetch(
        pool, "SELECT kind FROM events WHERE session_id = %s ORDER BY seq", session_id
    )
    return [r[0] for r in rows]


async def has_event(pool: Pool, session_id: UUID, kind: str) -> bool:
    return kind in await event_kinds(pool, session_id)


async def lease_expiry(pool: Pool, session_id: UUID) -> Any:
    return await scalar(pool, "SELECT lease_expires_at FROM sessions WHERE id = %s", session_id)


@asynccontextmanager
async def locked(config: StoreConfig, statement: str, *params: Any) -> AsyncIterator[None]:
    """Run ``statement`` in a transaction of another client and hold its locks."""
    conn = await AsyncConnection.connect(config.conninfo, application_name="fault-locker")
    try:
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(config.schema)))
        await conn.execute(statement, params)
        yield
    finally:
        await conn.rollback()
        await conn.close()


# -- processes --------------------------------------------------------------------


def cpu_seconds(worker: WorkerProc) -> float:
    times = psutil.Process(worker.pid).cpu_times()
    return float(times.user + times.system)


@contextmanager
def cpu_meter(workers: list[WorkerProc]) -> Iterator[dict[int, float]]:
    """CPU seconds each worker (by pid) used inside the block, and the block's length
    under key 0."""
    used: dict[int, float] = {}
    before = {w.pid: cpu_seconds(w) for w in workers}
    started = time.monotonic()
    yield used
    used[0] = time.monotonic() - started
    for w in workers:
        used[w.pid] = cpu_seconds(w) - before[w.pid]


def assert_no_busy_loop(used: Mapping[int, float]) -> None:
    window = used[0]
    for pid, seconds in used.items():
        if pid:
            assert seconds < CPU_BOUND_PER_SECOND * window, (
                f"worker {pid} used {seconds:.2f} CPU-s in {window:.1f} s"
            )


@dataclass
class Follower:
    """``stint tail SESSION --follow`` in a process of its own, stdout to a file."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def seqs(self) -> list[int]:
        lines = self.out.read_text().splitlines() if self.out.exists() else []
        return [int(json.loads(line)["seq"]) for line in lines if line.strip()]


@contextmanager
def follow(workers: Cluster, session_id: UUID, where: Path) -> Iterator[Follower]:
    out, err = where / "follow.out", where / "follow.err"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "stint.ops.cli", "tail", str(session_id), "--follow"],
            env={**os.environ, **workers.env},
            stdout=stdout,
            stderr=stderr,
        )
    try:
        yield Follower(proc, out, err)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


# -- load -------------------------------------------------------------------------


# Seconds from the postmaster's (re)start to the first and the last turn finished
# after it (database clock).
FIRST_FINISH_SINCE_START = """
SELECT extract(epoch FROM min(finished_at) - pg_postmaster_start_time())::float8
FROM turns WHERE finished_at > pg_postmaster_start_time()
"""
LAST_FINISH_SINCE_START = """
SELECT extract(epoch FROM max(finished_at) - pg_postmaster_start_time())::float8 FROM turns
"""


async def since_start(pool: Pool, query: str) -> float | None:
    value = await scalar(pool, query)
    return None if value is None else float(value)


# -- 1, 2: the server restarts or crashes under load --------------------------------


@dataclass
class Outage:
    """What a server fault looked like from outside."""

    cpu: dict[int, float]
    listeners_back_s: float
    first_finish_s: float | None
    all_done_s: float | None


async def run_through_outage(p: Private, fault: str) -> Outage:
    """2 workers x 2 slots, 20 sessions (one of them followed, with 6 turns), more turns
    enqueued during the fault; the server fault strikes mid-run. Asserts everything
    the fault must not break and returns the figures."""
    producer = Producer(p.client)
    followed = await producer.enqueue("followed-0")
    for i in range(1, 6):
        await producer.enqueue(f"followed-{i}", followed)
    others = await producer.sessions(19, "s")
    workers = [p.workers.start_worker(slots=2) for _ in range(2)]
    pids = [w.pid for w in workers]
    with follow(p.workers, followed, p.tmp) as follower:
        await wait_until(lambda: listen_pids(p.pool), what="listeners up")
        await wait_until(lambda: _at_least(turns_finished(p.pool), 5), what="the run is under way")
        # The follower past its start-up (it found the session and printed from its
        # LISTEN loop): the fault must hit a follower that is following, not one
        # still looking the session up (that lookup fails fast, by design).
        await wait_until(
            lambda: _ready(len(follower.seqs()) >= 1 or follower.proc.poll() is not None),
            what="the follower is following",
        )
        assert follower.proc.poll() is None, follower.err.read_text()
        assert not await all_finished(p.pool), "the fault must strike mid-run"
        late = asyncio.create_task(producer.more_turns(others[:8], "late"))
        cpu: dict[int, float] = {}
        if fault == "restart":
            await asyncio.to_thread(p.server.restart, "fast")
        else:
            await asyncio.to_thread(p.server.stop, "immediate")
            with cpu_meter(workers) as cpu:
                await asyncio.sleep(3.0)  # the outage itself, not a synchronisation
            await asyncio.to_thread(p.server.start)
        back = time.monotonic()
        await wait_until(lambda: reachable(p.pool), what="server reachable again")
        await wait_until(lambda: _count_is(listen_pids(p.pool), 2), what="LISTEN is back")
        listeners_back_s = time.monotonic() - back
        await asyncio.wait_for(late, timeout=60)
        # LISTEN works again: a fresh session enqueued now is picked up and run.
        fresh = await producer.enqueue("after")
        await wait_until(lambda: all_finished(p.pool), what="every turn finished", within=60)
        await assert_acknowledged_terminal(p.pool, producer)
        assert await turn_count(p.pool) == len(producer.acknowledged)
        assert await has_event(p.pool, fresh, "turn.completed")
        last = int(
            await scalar(p.pool, "SELECT last_event_seq FROM sessions WHERE id = %s", followed)
        )
        await wait_until(
            lambda: _ready(len(follower.seqs()) >= last or follower.proc.poll() is not None),
            what="the follower caught up (or ended)",
        )
        assert follower.proc.poll() is None, follower.err.read_text()
        assert follower.seqs() == list(range(1, last + 1)), follower.err.read_text()
    stop_and_assert_clean_exit(workers, pids)
    sessions = set((await attempts_by_session(p.pool)).keys())
    # One fault touched every session: at most one retry each.
    await assert_checks_pass(p.workers, p.pool, dict.fromkeys(sessions, 1))
    return Outage(
        cpu=cpu,
        listeners_back_s=listeners_back_s,
        first_finish_s=await since_start(p.pool, FIRST_FINISH_SINCE_START),
        all_done_s=await since_start(p.pool, LAST_FINISH_SINCE_START),
    )


async def _at_least(probe: Awaitable[int], n: int) -> bool:
    return await probe >= n


async def _count_is(probe: Awaitable[set[int]], n: int) -> bool:
    return len(await probe) == n


async def _ready(value: bool) -> bool:
    return value


async def test_fault_postgres_fast_restart_under_load(
    pg_template: ThrowawayTemplate, tmp_path: Path
) -> None:
    """``pg_ctl restart -m fast`` mid-run: workers reconnect without crashing, every
    acknowledged turn ends, the follower prints 1..N exactly, checks pass with at
    most one retry per session."""
    async with private_stint(pg_template, tmp_path) as p:
        outage = await run_through_outage(p, "restart")
    print(f"\nfast restart: {outage}")


async def test_fault_postgres_crash_stop_immediate_then_start(
    pg_template: ThrowawayTemplate, tmp_path: Path
) -> None:
    """``pg_ctl stop -m immediate``, 3 s down, ``start``: as for the restart, and the
    workers wait with backoff while the server is down (no busy loop), and LISTEN
    comes back (both listen backends reappear; a new enqueue is picked up)."""
    async with private_stint(pg_template, tmp_path) as p:
        outage = await run_through_outage(p, "crash")
    print(f"\ncrash: {outage}")
    assert_no_busy_loop(outage.cpu)


# -- 3: the LISTEN connection is killed -----------------------------------------------


async def test_fault_listen_backend_terminated(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """``pg_terminate_backend`` on every ``stint-worker-listen`` backend, again and again
    for 2 s while turns arrive: every turn is still picked up and run once, the
    listeners reconnect (new backends), and reconnecting is no busy loop."""
    producer = Producer(ClientStore(db.config, pool))
    workers = [cluster.start_worker(slots=2) for _ in range(2)]
    pids = [w.pid for w in workers]
    first = await wait_until(lambda: _listeners(pool, 2), what="both listeners up")
    terminated = 0
    with cpu_meter(workers) as cpu:
        deadline = time.monotonic() + 2.0
        i = 0
        while time.monotonic() < deadline:
            rows = await fetch(
                pool,
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database()",
                ROLE_LISTEN,
            )
            terminated += int(rows[0][0])
            await producer.enqueue(f"flap-{i}")
            i += 1
            await asyncio.sleep(0.05)  # paces the fault injection; nothing waits on it
    assert terminated >= 4, "the fault was not injected"
    for w in workers:
        assert await log_has(w, "listener lost its connection"), w.log_text()[-2000:]
    again = await wait_until(lambda: _listeners(pool, 2), what="both listeners back")
    assert not again & first, "the listeners must be new connections"
    fresh = await producer.enqueue("after")
    await wait_until(lambda: all_finished(pool), what="every turn finished")
    assert await has_event(pool, fresh, "turn.completed")
    await assert_acknowledged_terminal(pool, producer)
    assert set((await attempts_by_session(pool)).values()) == {1}, "a lease was lost"
    stop_and_assert_clean_exit(workers, pids)
    await assert_checks_pass(cluster, pool, {})
    print(f"\nlisten flapping: {terminated} backends terminated, CPU {cpu}")
    assert_no_busy_loop(cpu)


async def _listeners(pool: Pool, n: int) -> set[int]:
    """The listen backends when there are exactly ``n`` (else empty)."""
    found = await listen_pids(pool)
    return found if len(found) == n else set()


# -- 4a: a lock held past lock_timeout -------------------------------------------------


async def _two_gated_sessions(producer: Producer, pool: Pool) -> tuple[UUID, UUID]:
    """Sessions A and B, each running a turn whose effect is committed and which now
    waits for its gate ("a", "b") without writing."""
    a = await _gated(producer, "a")
    b = await _gated(producer, "b")
    for sid in (a, b):
        await wait_until(partial(has_event, pool, sid, "tool.returned"), what="effect committed")
    return a, b


async def _gated(producer: Producer, gate: str) -> UUID:
    result = await producer.client.turns_enqueue(
        session_id=None,
        idempotency_key=gate,
        turn_input={"min_wait_ms": 0, "gate": gate},
    )
    producer.acknowledged[result.turn_id] = result.session_id
    return result.session_id


async def test_fault_lock_timeout_on_session_row_loses_no_lease(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """Another client holds session A's row (``FOR UPDATE``) past STINT_LOCK_TIMEOUT=0.5
    while A's turn runs: the lease renewal waits on that row and fails as a
    LockTimeout (logged as such); once the lock goes, renewals land again, no
    session is lost or taken over (attempts 1) and the turns complete."""
    worker = cluster.start_worker(slots=2, lock_timeout=0.5, lease_seconds=2)
    producer = Producer(ClientStore(db.config, pool))
    a, b = await _two_gated_sessions(producer, pool)
    async with locked(db.config, "SELECT 1 FROM sessions WHERE id = %s FOR UPDATE", a):
        await wait_until(
            lambda: log_has(worker, "lease renewal failed", LOCK_TIMEOUT_TEXT, "leases_renew"),
            what="the renewal's lock timeout is logged",
            within=5,
        )
        stuck_at = await lease_expiry(pool, a)
    await wait_until(
        lambda: _later(lease_expiry(pool, a), stuck_at), what="renewals land again", within=5
    )
    cluster.open_gate("a")
    cluster.open_gate("b")
    await wait_until(lambda: all_finished(pool), what="both turns finished")
    await assert_acknowledged_terminal(pool, producer)
    assert await attempts_by_session(pool) == {a: 1, b: 1}
    assert not await log_has(worker, "lease lost"), worker.log_text()[-2000:]
    stop_and_assert_clean_exit([worker], [worker.pid])
    await assert_checks_pass(cluster, pool, {})


async def _later(probe: Awaitable[Any], than: Any) -> bool:
    value = await probe
    return value is not None and value > than


# -- 4a, 4b: a slot write blocked by a table lock -------------------------------------


@pytest.mark.parametrize(
    ("lock_mode", "env", "expected"),
    [
        # CREATE INDEX takes SHARE: writers wait, and give up at lock_timeout.
        ("SHARE", {"lock_timeout": 0.5}, LOCK_TIMEOUT_TEXT),
        # ALTER TABLE takes ACCESS EXCLUSIVE; with a long lock_timeout the wait ends
        # at statement_timeout instead (lock waits count towards it).
        (
            "ACCESS EXCLUSIVE",
            {"lock_timeout": 30, "statement_timeout": 0.5},
            STATEMENT_TIMEOUT_TEXT,
        ),
    ],
    ids=["lock_timeout", "statement_timeout"],
)
async def test_fault_blocked_write_times_out_and_is_replayed(
    cluster: Cluster,
    db: ScratchTarget,
    pool: Pool,
    lock_mode: str,
    env: dict[str, float],
    expected: str,
) -> None:
    """A table lock on ``events`` blocks session A's turn-finish write: it fails with the
    right classification in the log, writes nothing (the turn stays running, no
    terminal event), and A is handed back and replayed once the lock goes, its
    effect not run twice. Session B, not writing, keeps its lease: renewals land
    during the lock (the lease keeper never touches ``events``) and B never retries."""
    worker = cluster.start_worker(slots=2, lease_seconds=2, **env)
    producer = Producer(ClientStore(db.config, pool))
    a, b = await _two_gated_sessions(producer, pool)
    turn_a = next(t for t, s in producer.acknowledged.items() if s == a)
    async with locked(db.config, f"LOCK TABLE events IN {lock_mode} MODE"):
        b_expiry = await lease_expiry(pool, b)
        cluster.open_gate("a")
        await wait_until(
            lambda: log_has(worker, expected, "turns_finish"),
            what=f"the blocked finish is logged as {expected!r}",
            within=10,
        )
        await wait_until(
            lambda: _later(lease_expiry(pool, b), b_expiry), what="B's lease renewed", within=5
        )
        status = await scalar(pool, "SELECT status FROM turns WHERE id = %s", turn_a)
        assert status == "running", "a timed-out finish must write nothing"
    cluster.open_gate("b")
    await wait_until(lambda: all_finished(pool), what="both turns finished", within=30)
    await assert_acknowledged_terminal(pool, producer)
    attempts = await attempts_by_session(pool)
    assert attempts[b] == 1
    assert attempts[a] >= 2, "A's turn was replayed after the failed write"
    kinds = await event_kinds(pool, a)
    assert kinds[:3] == ["turn.started", "tool.called", "tool.returned"]
    assert kinds.count("turn.completed") == 1 and kinds[-1] == "turn.completed"
    assert "tool.called" not in kinds[3:], "the committed effect is replayed, not re-run"
    assert cluster.journal_keys(a) == [f"effect-{turn_a}"]
    stop_and_assert_clean_exit([worker], [worker.pid])
    await assert_checks_pass(cluster, pool, {a: attempts[a] - 1})


# -- 4c: one connection for many slots ----------------------------------------------


async def test_fault_one_connection_for_four_slots(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    """STINT_POOL_SIZE=1 with --slots 4: slots, claims and renewals share one
    connection (never more open), all turns complete, and no lease is lost (the
    renewal waits at most for one batch): every turn runs once."""
    worker = cluster.start_worker(slots=4, pool_size=1, lease_seconds=1)
    producer = Producer(ClientStore(db.config, pool))
    sessions = await producer.sessions(12, "s")
    await producer.more_turns(sessions, "second")
    peak_running = peak_conns = 0

    async def sampled_until_done() -> bool:
        nonlocal peak_running, peak_conns
        rows = await fetch(
            pool,
            "SELECT (SELECT count(*) FROM sessions WHERE status = 'running'), "
            "(SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
            " AND datname = current_database())",
            "stint-worker-pool",
        )
        peak_running = max(peak_running, int(rows[0][0]))
        peak_conns = max(peak_conns, int(rows[0][1]))
        return await all_finished(pool)

    await wait_until(sampled_until_done, what="all 24 turns finished", within=60)
    assert peak_running == 4, "all four slots ran at once"
    assert peak_conns == 1
    await assert_acknowledged_terminal(pool, producer)
    assert set((await attempts_by_session(pool)).values()) == {1}
    for trouble in ("lease lost", "lease renewal failed"):
        assert not await log_has(worker, trouble), worker.log_text()[-2000:]
    stop_and_assert_clean_exit([worker], [worker.pid])
    await assert_checks_pass(cluster, pool, {})


# -- 4d: the server is out of connections ----------------------------------------------


@asynccontextmanager
async def small_server(tmp: Path, max_connections: int) -> AsyncIterator[Private]:
    template = ThrowawayTemplate(settings={"max_connections": str(max_connections)})
    try:
        async with private_stint(template, tmp) as p:
            yield p
    finally:
        template.cleanup()


async def hog_all_connections(conninfo: str) -> list[AsyncConnection[TupleRow]]:
    """Open connections until the server refuses one: ``too many clients``."""
    hogs: list[AsyncConnection[TupleRow]] = []
    while True:
        try:
            hogs.append(await AsyncConnection.connect(conninfo, application_name="fault-hog"))
        except psycopg.OperationalError as exc:
            assert "too many clients" in str(exc), exc
            return hogs
        assert len(hogs) < 50, "max_connections was not applied"


async def _refusals_at_least(worker: WorkerProc, n: int) -> bool:
    return worker.log_text().count("listener lost its connection") >= n


async def free(hogs: list[AsyncConnection[TupleRow]], n: int) -> None:
    for _ in range(n):
        await hogs.pop().close()


async def test_fault_max_connections_reached(tmp_path: Path) -> None:
    """A server with max_connections=8 whose connections are all taken: a worker
    starting then waits for room (its log names the cause, it writes nothing, it
    does not exit: under an orchestrator an exit would crash-loop); with just
    enough connections for its pools it runs by itself and its turns complete by
    polling while its listener cannot connect (retrying with backoff, no busy
    loop); once one more frees, LISTEN comes back. Nothing is lost."""
    async with small_server(tmp_path, 8) as p:
        producer = Producer(p.client)
        sessions = await producer.sessions(4, "s")
        hogs = await hog_all_connections(p.target.conninfo)
        try:
            # Full: the worker waits for room and says why.
            # Schedules and webhooks off: this budget is the pool's two and the listener's
            # one (the background pool's connection is the operating guide's fourth).
            worker = p.workers.start_worker(
                slots=1, connect_timeout=1, schedule_poll_seconds=0, webhook_poll_seconds=0
            )
            await wait_until(
                lambda: log_has(worker, "waiting for PostgreSQL", "too many clients"),
                what="the worker says it waits",
            )
            assert worker.proc.poll() is None, "a refused connection must not end the worker"
            rows = await fetch(p.pool, "SELECT status, attempts FROM turns")
            assert rows == [("queued", 0)] * 4, "nothing written"

            # Room for the pool (two connections) but not for the listener: it goes on.
            await free(hogs, 2)
            await wait_until(
                lambda: log_has(worker, "listener lost its connection", "too many clients"),
                what="the listener is refused",
            )
            with cpu_meter([worker]) as cpu:
                await wait_until(lambda: all_finished(p.pool), what="turns done by polling")
                await wait_until(
                    lambda: _refusals_at_least(worker, 5), what="the listener keeps retrying"
                )
            assert not await listen_pids(p.pool), "the listener had no room"
            assert worker.proc.poll() is None

            # One more connection frees: the listener gets it.
            await free(hogs, 1)
            await wait_until(lambda: _listeners(p.pool, 1), what="LISTEN is back", within=15)
            await producer.enqueue("after", sessions[0])
            await wait_until(lambda: all_finished(p.pool), what="the last turn finished")
        finally:
            await free(hogs, len(hogs))
        await assert_acknowledged_terminal(p.pool, producer)
        assert set((await attempts_by_session(p.pool)).values()) == {1}
        stop_and_assert_clean_exit([worker], [worker.pid])
        await assert_checks_pass(p.workers, p.pool, {})
    print(f"\nmax_connections: CPU while the listener was refused {cpu}")
    assert_no_busy_loop(cpu)


# -- the follower's cursor across a failed catch-up ---------------------------------------


class ScriptedEvents(ClientStore):
    """Reads the real event log, except that call n does ``script[n]``: "empty" (the
    log looks empty), "fail" (the connection drops, between two catch-up batches)."""

    def __init__(self, config: StoreConfig, pool: Pool, script: list[str]) -> None:
        super().__init__(config, pool)
        self.script = script
        self.calls = 0

    async def events_after(
        self, *, session_id: UUID, after: int, limit: int = 500, tenant: str | None = None
    ) -> list[Event]:
        action = self.script[self.calls] if self.calls < len(self.script) else "real"
        self.calls += 1
        if action == "empty":
            return []
        if action == "fail":
            raise ConnectionFailed("injected: connection lost between two batches")
        return await super().events_after(
            session_id=session_id, after=after, limit=limit, tenant=tenant
        )


@pytest.mark.parametrize(
    "script",
    [["real", "fail"], ["empty", "real", "fail"]],
    ids=["during_the_first_catch_up", "during_a_later_catch_up"],
)
async def test_fault_follower_resumes_after_the_last_emitted_seq(
    db: ScratchTarget, pool: Pool, script: list[str]
) -> None:
    """``tail --follow`` whose catch-up emits a batch and then loses the connection
    before its next read keeps following and resumes after the last *emitted* seq:
    1..3 once each. (Through a real restart this window is hit only now and then;
    here it is hit every time, in the first catch-up and in a later one.)"""
    client = ScriptedEvents(db.config, pool, script)
    sid = await client.sessions_create()
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO events (session_id, seq, kind) "
            "SELECT %s, g, 'message' FROM generate_series(1, 3) AS g",
            (sid,),
        )
    emitted: list[int] = []
    task = asyncio.create_task(
        follow_events(
            client,
            db.config,
            session_id=sid,
            after=0,
            follow=True,
            emit=lambda event: emitted.append(int(event["seq"])),
        )
    )
    try:
        await wait_until(
            lambda: _ready(task.done() or client.calls >= len(script) + 2),
            what="the follower resumed and read again",
        )
        assert not task.done(), task.exception()
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
    assert emitted == [1, 2, 3]
