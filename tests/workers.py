"""Real ``worker`` processes against the test's own database, and database probes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from psycopg import sql as psql

from stint.lab.processes import spawn_worker
from stint.postgres.scratch import ScratchTarget
from stint.store.admission import AdmissionStore
from stint.store.config import StoreConfig
from stint.store.pool import Pool
from stint.store.vocabulary import AdmissionLimit
from stint.worker.scripted import open_gate

TEST_LEASE = 1.0


@dataclass
class WorkerProc:
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def signal(self, signum: int) -> None:
        os.kill(self.proc.pid, signum)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class Cluster:
    """Starts workers and runs ``stint`` commands for one test; cleans up after."""

    def __init__(self, db: ScratchTarget, workspace: Path, logs: Path) -> None:
        self.db = db
        self.workspace = workspace
        self.logs = logs
        self.workers: list[WorkerProc] = []
        self.env = {
            "STINT_DATABASE_URL": db.conninfo,
            "STINT_SCHEMA": db.config.schema,
            "STINT_WORKSPACE": str(workspace),
            "STINT_LEASE_SECONDS": str(TEST_LEASE),
            "STINT_POLL_INTERVAL": "0.05",
            "STINT_AUTO_MIGRATE": "false",
            "STINT_LOG_LEVEL": "info",
        }

    def start_worker(self, *, slots: int = 2, **env: Any) -> WorkerProc:
        return self.start_worker_under((), {}, slots=slots, **env)

    def start_worker_under(
        self, prefix: Sequence[str], raw_env: Mapping[str, str], *, slots: int = 2, **env: Any
    ) -> WorkerProc:
        """A worker with ``STINT_<KEY>`` for each keyword and ``raw_env`` as given, run
        under ``prefix`` (a command that execs it: ``ip netns exec``, another host)."""
        log = self.logs / f"worker{len(self.workers)}.log"
        extra = {f"STINT_{k.upper()}": str(v) for k, v in env.items()}
        proc = spawn_worker(
            env={**self.env, **extra, **raw_env},
            args=["--slots", str(slots)],
            log_path=log,
            prefix=prefix,
        )
        worker = WorkerProc(proc, log)
        self.workers.append(worker)
        return worker

    def stint(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "stint.ops.cli", *args],
            env={**os.environ, **self.env, **env},
            capture_output=True,
            text=True,
            timeout=60,
        )

    def open_gate(self, name: str) -> None:
        open_gate(self.workspace, name)

    def journal_keys(self, session_id: UUID) -> list[str]:
        path = self.workspace / "journals" / f"{session_id}.journal"
        if not path.exists():
            return []
        return [json.loads(line)["key"] for line in path.read_text().splitlines()]

    def journal_sessions(self) -> list[str]:
        """The sessions that have a journal in the workspace."""
        return sorted(p.stem for p in (self.workspace / "journals").glob("*.journal"))

    def stop_all(self) -> None:
        for worker in self.workers:
            if worker.proc.poll() is None:
                worker.signal(signal.SIGCONT)
                worker.proc.kill()
                worker.proc.wait()


async def fetch(pool: Pool, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Read rows for assertions (tests inspect the database directly)."""
    async with pool.connection() as conn:
        cur = await conn.execute(sql, params)
        return await cur.fetchall()


async def set_limits(
    pool: Pool, config: StoreConfig, limits: dict[AdmissionLimit, int | None], tenant: str = "*"
) -> None:
    """Set admission limits (the defaults' row unless ``tenant``) through the store."""
    await AdmissionStore(config, pool).admission_set(tenant=tenant, limits=limits)


async def count_rows(pool: Pool, table: str) -> int:
    """Rows in ``table`` (its name composed as an identifier, never spliced)."""
    statement = psql.SQL("SELECT count(*) FROM {}").format(psql.Identifier(table))
    async with pool.connection() as conn:
        cur = await conn.execute(statement)
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def event_kinds(pool: Pool, session_id: UUID) -> list[str]:
    rows = await fetch(
        pool, "SELECT kind FROM events WHERE session_id = %s ORDER BY seq", session_id
    )
    return [r[0] for r in rows]


async def turn_states(pool: Pool) -> list[tuple[str, int]]:
    return [
        (r[0], r[1])
        for r in await fetch(pool, "SELECT status, attempts FROM turns ORDER BY enqueued_at")
    ]
