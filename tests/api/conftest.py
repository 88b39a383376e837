"""A real ``stint api`` process per test, on a free loopback port, against the
test's own database (``keyed_api``: one that can seal webhook secrets); keys for
two tenants; an HTTP client; row counts."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest_asyncio

from stint.lab.free_port import free_port as free_port  # one choice of port for every test
from stint.lab.processes import spawn_api
from stint.postgres.scratch import ScratchTarget
from stint.store.config import ROLE_CLI
from stint.store.keys import KeyStore
from stint.store.pool import Pool, open_pool
from stint.store.vocabulary import AdmissionLimit
from tests.polling import wait_until
from tests.workers import count_rows, fetch, set_limits

KEEPALIVE_SECONDS = 0.3
QUEUE_LIMIT = 64
WEBHOOK_KEY = base64.b64encode(os.urandom(32)).decode()


@dataclass
class ApiServer:
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, timeout: float = 30) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def api_env(db: ScratchTarget, **extra: str) -> dict[str, str]:
    return {
        "STINT_DATABASE_URL": db.conninfo,
        "STINT_SCHEMA": db.config.schema,
        "STINT_AUTO_MIGRATE": "false",
        "STINT_LOG_LEVEL": "info",
        "STINT_API_KEEPALIVE_SECONDS": str(KEEPALIVE_SECONDS),
        **extra,
    }


async def start_api(
    db: ScratchTarget, log: Path, *, port: int | None = None, **extra: str
) -> ApiServer:
    """A running API whose sessions queue up to QUEUE_LIMIT turns each (the fuzz
    test queues many turns on few sessions); on ``port`` when given (a restart)."""
    pool = await open_pool(db.config, ROLE_CLI, min_size=1, max_size=1)
    try:
        await set_limits(pool, db.config, {AdmissionLimit.MAX_SESSION_QUEUE: QUEUE_LIMIT})
    finally:
        await pool.close()
    port = port or free_port()
    server = ApiServer(spawn_api(env=api_env(db, **extra), port=port, log_path=log), port, log)

    async def answers() -> bool:
        if server.proc.poll() is not None:
            raise AssertionError(f"stint api exited {server.proc.returncode}: {server.log_text()}")
        try:
            async with httpx.AsyncClient(base_url=server.base_url) as client:
                return (await client.get("/healthz")).status_code == 200
        except httpx.TransportError:
            return False

    await wait_until(answers, what="the API answers /healthz")
    return server


@pytest_asyncio.fixture(loop_scope="session")
async def api(db: ScratchTarget, tmp_path: Path) -> AsyncIterator[ApiServer]:
    server = await start_api(db, tmp_path / "api.log")
    try:
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


@pytest_asyncio.fixture(loop_scope="session")
async def keyed_api(db: ScratchTarget, tmp_path: Path) -> AsyncIterator[ApiServer]:
    """An API with ``STINT_WEBHOOK_KEY`` set, so webhook endpoints can be made."""
    server = await start_api(db, tmp_path / "api.log", STINT_WEBHOOK_KEY=WEBHOOK_KEY)
    try:
        yield server
    finally:
        server.stop()


@dataclass(frozen=True)
class Keys:
    """Tokens: tenant a (writer and read-only) and tenant b, plus a revoked one of a."""

    a: str
    a_read_only: str
    b: str
    revoked: str


@pytest_asyncio.fixture(loop_scope="session")
async def keys(db: ScratchTarget, pool: Pool) -> Keys:
    store = KeyStore(db.config, pool)
    revoked = await store.keys_create(tenant="a")
    await store.keys_revoke(key_id=revoked.key.id)
    return Keys(
        a=(await store.keys_create(tenant="a")).token,
        a_read_only=(await store.keys_create(tenant="a", read_only=True)).token,
        b=(await store.keys_create(tenant="b")).token,
        revoked=revoked.token,
    )


@pytest_asyncio.fixture(loop_scope="session")
async def http(api: ApiServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=api.base_url, timeout=30) as client:
        yield client


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


async def row_counts(pool: Pool) -> dict[str, int]:
    """Every table a request could write to."""
    tables = [
        "sessions",
        "turns",
        "events",
        "steps",
        "api_keys",
        "schedules",
        "webhook_endpoints",
        "signals",
    ]
    found = {}
    for table in tables:
        found[table] = await count_rows(pool, table)
    found["controls"] = int(
        (await fetch(pool, "SELECT count(*) FROM sessions WHERE control IS NOT NULL"))[0][0]
    )
    return found
