"""What the fault tests that stop PostgreSQL share: a private server of their own,
probes of its database, a producer that retries through an outage, and the
closing assertions (checkers, clean exits)."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any
from uuid import UUID

import psycopg

from stint.ops.checks import run_checks
from stint.postgres.scratch import ScratchDatabases, ScratchTarget
from stint.postgres.throwaway import ThrowawayCluster, ThrowawayTemplate
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.errors import StoreError
from stint.store.pool import Pool, open_pool
from tests.workers import Cluster, WorkerProc, fetch

SHORT_TURN: dict[str, object] = {"min_wait_ms": 200}


@dataclass
class StintOn:
    """A migrated Stint database on some server, a probe pool and a worker launcher."""

    target: ScratchTarget
    pool: Pool
    workers: Cluster
    client: ClientStore
    tmp: Path

    def parts(self) -> dict[str, Any]:
        """The fields, to build a subclass that adds the server it runs on."""
        return {f.name: getattr(self, f.name) for f in fields(StintOn)}


@dataclass
class Private(StintOn):
    """A private PostgreSQL with a migrated Stint database, a probe pool and workers."""

    server: ThrowawayCluster


@asynccontextmanager
async def stint_on(conninfo: str, tmp: Path, *, drop: bool = True) -> AsyncIterator[StintOn]:
    """A fresh migrated database on the server ``conninfo`` reaches; stops every worker
    afterwards and, with ``drop``, drops the database (a server about to be destroyed
    need not: it may be down when the test ends)."""
    scratch = ScratchDatabases(StoreConfig(conninfo=conninfo))
    await scratch.prepare()
    target = await scratch.create()
    workspace, logs = tmp / "workspace", tmp / "logs"
    workspace.mkdir()
    logs.mkdir()
    workers = Cluster(target, workspace, logs)
    try:
        pool = await open_pool(target.config, ROLE_CLI, min_size=1, max_size=4)
        try:
            yield StintOn(target, pool, workers, ClientStore(target.config, pool), tmp)
        finally:
            await pool.close()
    finally:
        workers.stop_all()
        if drop:
            await scratch.drop(target)


@asynccontextmanager
async def private_stint(template: ThrowawayTemplate, tmp: Path) -> AsyncIterator[Private]:
    """Start a cluster of our own; stop every worker and the server afterwards."""
    server = template.new_cluster()
    try:
        async with stint_on(server.conninfo(), tmp, drop=False) as base:
            yield Private(server=server, **base.parts())
    finally:
        server.destroy()


async def scalar(pool: Pool, query: str, *params: Any) -> Any:
    rows = await fetch(pool, query, *params)
    return rows[0][0]


async def all_finished(pool: Pool) -> bool:
    """Every turn there is has finished (and there is at least one)."""
    rows = await fetch(
        pool, "SELECT count(*), count(finished_at) FROM turns WHERE status <> 'parked'"
    )
    total, done = rows[0]
    return bool(total) and total == done


async def attempts_by_session(pool: Pool) -> dict[UUID, int]:
    rows = await fetch(pool, "SELECT session_id, max(attempts) FROM turns GROUP BY session_id")
    return {r[0]: int(r[1]) for r in rows}


async def reachable(pool: Pool) -> bool:
    """After a restart: drop the pool's dead connections, then try a query."""
    try:
        await pool.check()
        await fetch(pool, "SELECT 1")
    except (psycopg.Error, StoreError):
        return False
    return True


async def log_has(worker: WorkerProc, *texts: str) -> bool:
    """Some line of the worker's log contains every one of ``texts``."""
    return any(all(t in line for t in texts) for line in worker.log_text().splitlines())


async def assert_checks_pass(p: Cluster, pool: Pool, faults: Mapping[UUID, int]) -> None:
    report = await run_checks(pool, journals=p.workspace / "journals", faults=faults)
    assert report.passed, report.as_json()


def stop_and_assert_clean_exit(workers: list[WorkerProc], pids: list[int]) -> None:
    """Same processes as at the start (no crash, no restart), still up, drain to exit 0."""
    assert [w.pid for w in workers] == pids
    for w in workers:
        assert w.proc.poll() is None, f"worker {w.pid} exited early:\n{w.log_text()[-3000:]}"
        assert "stopping the worker" not in w.log_text(), w.log_text()[-3000:]
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(timeout=30) == 0, w.log_text()[-3000:]


@dataclass
class Producer:
    """Enqueues turns, retrying each idempotency key until it is acknowledged."""

    client: ClientStore
    turn_input: Mapping[str, object] = field(default_factory=lambda: dict(SHORT_TURN))
    tenant: str | None = None
    acknowledged: dict[UUID, UUID] = field(default_factory=dict)  # turn -> session
    refused: int = 0

    async def enqueue(self, key: str, session_id: UUID | None = None) -> UUID:
        """Retries are idempotent only on an existing session (the key is per session),
        so only those are enqueued while the server is unavailable."""
        while True:
            try:
                result = await self.client.turns_enqueue(
                    session_id=session_id,
                    idempotency_key=key,
                    turn_input=dict(self.turn_input),
                    tenant=self.tenant,
                )
            except StoreError:
                if session_id is None:
                    raise  # a retry could make a second session: not idempotent
                self.refused += 1  # not acknowledged: retry the same key
                await asyncio.sleep(0.05)
                continue
            self.acknowledged[result.turn_id] = result.session_id
            return result.session_id

    async def sessions(self, count: int, prefix: str) -> list[UUID]:
        return [await self.enqueue(f"{prefix}-{i}") for i in range(count)]

    async def more_turns(self, sessions: list[UUID], key: str) -> None:
        for sid in sessions:
            await self.enqueue(key, sid)


async def assert_acknowledged_terminal(pool: Pool, producer: Producer) -> None:
    rows = await fetch(pool, "SELECT id, status FROM turns")
    status = {r[0]: r[1] for r in rows}
    missing = [t for t in producer.acknowledged if t not in status]
    assert not missing, f"acknowledged turns lost: {missing}"
    unfinished = {t: status[t] for t in producer.acknowledged if status[t] != "succeeded"}
    assert not unfinished, unfinished
