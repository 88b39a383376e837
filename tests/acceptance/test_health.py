"""Acceptance: a real worker's health endpoints (STINT_HEALTH_PORT) through its life:
ready once registered, not ready while draining or cut off from PostgreSQL, not
live once its leases went a whole lease unrenewed, healthy again when the link heals."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest_asyncio
from psycopg.conninfo import conninfo_to_dict

from stint.lab.proxy import FaultProxy
from stint.postgres.pgbin import make_conninfo
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, event_kinds


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def _get(port: int, path: str) -> tuple[int, dict[str, Any]] | None:
    """One GET; None when nothing answers on the port."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except ConnectionRefusedError:
        return None
    try:
        writer.write(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n".encode())
        await writer.drain()
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, body = raw.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), json.loads(body)


def _answers(port: int, path: str, status: int, **figures: object) -> Any:
    """A probe for wait_until: the answer, once it has ``status`` and ``figures``."""

    async def probe() -> tuple[int, dict[str, Any]] | None:
        got = await _get(port, path)
        if got is None or got[0] != status:
            return None
        if any(got[1].get(k) != v for k, v in figures.items()):
            return None
        return got

    return probe


@pytest_asyncio.fixture(loop_scope="session")
async def proxy(db: ScratchTarget) -> AsyncIterator[FaultProxy]:
    params = conninfo_to_dict(db.conninfo)
    fault = FaultProxy(str(params.get("host") or "127.0.0.1"), int(params.get("port") or 5432))
    await fault.start()
    try:
        yield fault
    finally:
        await fault.stop()


def _via(proxy: FaultProxy, db: ScratchTarget) -> str:
    params = {k: str(v) for k, v in conninfo_to_dict(db.conninfo).items() if v is not None}
    params.pop("hostaddr", None)
    return make_conninfo(**{**params, "host": "127.0.0.1", "port": str(proxy.port)})


def _port_in(path: Path) -> int | None:
    """The port a worker wrote, once it wrote it."""
    text = path.read_text() if path.exists() else ""
    return int(text) if text.strip() else None


async def _stopped(worker: WorkerProc) -> int:
    return await asyncio.to_thread(worker.wait)


async def test_ready_while_serving_not_ready_while_draining_then_gone(
    cluster: Cluster, db: ScratchTarget, pool: Pool
) -> None:
    port = _free_port()
    worker = cluster.start_worker(slots=1, health_port=port, drain_seconds=600)
    await wait_until(_answers(port, "/readyz", 200, draining=False, database_ok=True), what="ready")
    status, live = await _get(port, "/livez") or (0, {})
    assert status == 200 and live["renewal_age_s"] < live["lease_s"]
    assert live["max_loop_lag_s"] == live["lease_s"] / 3

    client = ClientStore(db.config, pool)
    turn = await client.turns_enqueue(
        session_id=None, idempotency_key="k", turn_input={"gate": "g"}
    )

    async def running() -> bool:
        return "tool.returned" in await event_kinds(pool, turn.session_id)

    await wait_until(running, what="the turn is running")
    worker.signal(signal.SIGTERM)
    await wait_until(_answers(port, "/readyz", 503, draining=True), what="not ready: draining")
    assert (await _get(port, "/livez") or (0,))[0] == 200  # draining is alive
    cluster.open_gate("g")
    assert await _stopped(worker) == 0
    assert await _get(port, "/livez") is None
    assert "health endpoints on port" in worker.log_text()


async def test_cut_off_from_postgres_not_ready_but_alive_then_healed(
    cluster: Cluster, db: ScratchTarget, pool: Pool, proxy: FaultProxy
) -> None:
    port = _free_port()
    lease = 2.0
    worker = cluster.start_worker(
        slots=1,
        health_port=port,
        database_url=_via(proxy, db),
        lease_seconds=lease,
        statement_timeout=1,
        connect_timeout=1,
    )
    await wait_until(_answers(port, "/readyz", 200, database_ok=True), what="ready")
    proxy.set_mode("blackhole")
    await wait_until(
        _answers(port, "/readyz", 503, database_ok=False), what="not ready: renewal failed"
    )

    async def unrenewed_for_a_lease() -> tuple[int, Any] | None:
        answer = await _get(port, "/livez")
        return answer if answer is not None and answer[1]["renewal_age_s"] >= lease else None

    # Fenced (its leases unrenewed for a whole lease) but alive: no restart wanted.
    status, _ = await wait_until(unrenewed_for_a_lease, what="a lease without renewal")
    assert status == 200
    proxy.set_mode("pass")
    await wait_until(_answers(port, "/readyz", 200, database_ok=True), what="ready again")
    worker.signal(signal.SIGTERM)
    assert await _stopped(worker) == 0
    # One line says the database came back, and after how long without it.
    assert worker.log_text().count("database connection back after") == 1


async def test_a_taken_health_port_stops_the_worker_with_a_clear_message(
    cluster: Cluster,
) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        worker = cluster.start_worker(slots=1, health_port=taken.getsockname()[1])
        assert await _stopped(worker) == 1
    assert "cannot serve health on port" in worker.log_text()
    assert cluster.db.conninfo not in worker.log_text()


async def test_workers_sharing_a_host_network_serve_health_on_ports_they_write_down(
    cluster: Cluster, tmp_path: Path
) -> None:
    """Compose's host networking: port 0 with a port file gives each worker a loopback
    port the OS picks, written to its own file; the probe finds it there."""
    files = [tmp_path / "a.port", tmp_path / "b.port"]
    workers = [
        cluster.start_worker(slots=1, health_port=0, health_port_file=str(path)) for path in files
    ]

    def written(path: Path) -> Callable[[], Awaitable[int | None]]:
        async def port() -> int | None:
            return _port_in(path)

        return port

    ports = [await wait_until(written(path), what=f"{path.name} written") for path in files]
    assert ports[0] != ports[1]
    for port in ports:
        await wait_until(_answers(port, "/readyz", 200, database_ok=True), what="ready")
    probe = [sys.executable, "-m", "stint.worker.health", "livez"]
    for path in files:
        env = {**os.environ, "STINT_HEALTH_PORT": "0", "STINT_HEALTH_PORT_FILE": str(path)}
        done = await asyncio.to_thread(
            subprocess.run, probe, env=env, capture_output=True, text=True, timeout=30
        )
        assert done.returncode == 0, done.stderr
    for worker in workers:
        worker.signal(signal.SIGTERM)
        assert await _stopped(worker) == 0
    assert not any(path.exists() for path in files)
    env = {**os.environ, "STINT_HEALTH_PORT": "0", "STINT_HEALTH_PORT_FILE": str(files[0])}
    gone = await asyncio.to_thread(
        subprocess.run, probe, env=env, capture_output=True, text=True, timeout=30
    )
    assert gone.returncode == 1 and "no health port" in gone.stderr
