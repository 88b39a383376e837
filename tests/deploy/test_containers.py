"""Acceptance in containers: PostgreSQL and workers from Stint's images on one engine.

Two worker containers x 4 slots take a 24-turn burst; ``docker stop`` of one
mid-burst drains it (its turns handed back at once, exit 0 before Docker's kill),
``docker kill`` of the other leaves its leases to expire, and a third container
recovers those after the lease. Every effect happens once (the workers share one
host folder as their workspace, so the effect journals are checked together),
cursors stay contiguous, and Stint's checker passes. The image sizes and the
workers' peak memory are written to ``report/deploy/containers.json``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import pytest_asyncio

from stint.lab.container import CONTAINER_IMAGE, ContainerServer
from stint.lab.environment import environment
from stint.ops.checks import run_checks
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import Pool, open_pool
from stint.worker.scripted import open_gate
from tests.deploy import engine
from tests.polling import wait_until
from tests.workers import event_kinds, fetch

pytestmark = pytest.mark.docker

LEASE = 2.0
DRAIN = 2.0
STOP_GRACE = int(DRAIN) + 20  # docker stop -t: Docker kills only after this
SLOTS = 4
SESSIONS = 24
REPORT = Path(__file__).resolve().parents[2] / "report" / "deploy" / "containers.json"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Deployment:
    """One PostgreSQL container and the worker containers of one test."""

    server: ContainerServer
    password: str
    workspace: Path
    prefix: str
    containers: list[str]

    @property
    def url(self) -> str:
        return self.server.conninfo

    def env(self, worker_id: str, health_port: int) -> dict[str, str]:
        return {
            "STINT_DATABASE_URL": self.url,
            "STINT_WORKER_ID": worker_id,
            "STINT_LEASE_SECONDS": str(LEASE),
            "STINT_DRAIN_SECONDS": str(DRAIN),
            "STINT_POLL_INTERVAL": "0.05",
            "STINT_AUTO_MIGRATE": "false",
            "STINT_HEALTH_PORT": str(health_port),
        }

    def start_worker(self, worker_id: str) -> tuple[str, int]:
        name = f"{self.prefix}-{worker_id}"
        port = _free_port()
        self.containers.append(name)
        engine.run_worker(name, env=self.env(worker_id, port), workspace=self.workspace)
        return name, port


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    workspace.chmod(0o777)  # the image's non-root user writes the journals here
    server = ContainerServer.start(
        {"max_connections": "100"},
        "acceptance",
        cpus=1.0,
        memory_bytes=2**30,
        kept_prefix="stint-deploy-kept-",
    )
    password = str(server.container.env["POSTGRES_PASSWORD"])
    prefix = f"stint-test-{uuid.uuid4().hex[:8]}"
    deployed = Deployment(server, password, workspace, prefix, [])
    try:
        yield deployed
    finally:
        engine.remove(*deployed.containers)
        server.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def pool(deployment: Deployment) -> AsyncIterator[Pool]:
    opened = await open_pool(StoreConfig(conninfo=deployment.url), ROLE_CLI, min_size=1, max_size=2)
    try:
        yield opened
    finally:
        await opened.close()


async def _health(port: int, path: str) -> int | None:
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return None
    try:
        writer.write(f"GET {path} HTTP/1.1\r\n\r\n".encode())
        raw = await reader.read()
    finally:
        writer.close()
        await writer.wait_closed()
    return int(raw.split(b" ")[1]) if raw else None


async def _running_by_owner(pool: Pool) -> Counter[str]:
    rows = await fetch(
        pool,
        "SELECT lease_owner, count(*) FROM sessions WHERE status = 'running' GROUP BY 1",
    )
    return Counter({owner: n for owner, n in rows})


async def _effects_done(pool: Pool, sessions: list[UUID]) -> int:
    done = 0
    for sid in sessions:
        if "tool.returned" in await event_kinds(pool, sid):
            done += 1
    return done


async def _sessions_of(pool: Pool, owner: str) -> list[UUID]:
    rows = await fetch(pool, "SELECT id FROM sessions WHERE lease_owner = %s ORDER BY id", owner)
    return [r[0] for r in rows]


async def test_migrate_then_burst_stop_kill_and_recover_in_containers(
    deployment: Deployment, pool: Pool
) -> None:
    # The one-shot migration, as compose and the Kubernetes Job run it.
    migrated = engine.run_worker(
        f"{deployment.prefix}-migrate",
        env={"STINT_DATABASE_URL": deployment.url},
        workspace=deployment.workspace,
        entrypoint="stint",
        args=("migrate",),
        detach=False,
    )
    deployment.containers.append(f"{deployment.prefix}-migrate")
    assert "0001_init" in migrated.stdout + migrated.stderr

    a, a_port = deployment.start_worker("ctr-a")
    b, b_port = deployment.start_worker("ctr-b")
    for port in (a_port, b_port):
        await wait_until(partial(_health, port, "/readyz"), what="workers ready")
    # The image's HEALTHCHECK command, run where Docker runs it.
    assert engine.docker("exec", a, *_healthcheck_command(), check=False).returncode == 0

    client = ClientStore(StoreConfig(conninfo=deployment.url), pool)
    sessions = []
    for i in range(SESSIONS):
        turn = await client.turns_enqueue(
            session_id=None,
            idempotency_key=f"burst-{i}",
            turn_input={"min_wait_ms": 0, "gate": "burst"},
        )
        sessions.append(turn.session_id)

    async def both_full() -> bool:
        owners = await _running_by_owner(pool)
        effects = await _effects_done(pool, sessions)
        return owners == Counter({"ctr-a": SLOTS, "ctr-b": SLOTS}) and effects == 2 * SLOTS

    await wait_until(both_full, what="both workers running 4 turns, effects committed", within=60)
    drained = await _sessions_of(pool, "ctr-a")
    killed = await _sessions_of(pool, "ctr-b")
    memory = {"ctr-a": engine.peak_memory(a), "ctr-b": engine.peak_memory(b)}

    # docker stop: SIGTERM, the drain budget passes (the turns wait on a gate), the
    # turns are handed back, and the worker exits 0 before Docker would kill it.
    await asyncio.to_thread(engine.docker, "stop", "--time", str(STOP_GRACE), a)
    stopped = engine.state(a)
    assert (stopped["ExitCode"], stopped["OOMKilled"]) == (0, False), engine.logs(a)[-2000:]
    assert f"draining: waiting up to {DRAIN:.1f}s for {SLOTS} turns" in engine.logs(a)
    rows = await fetch(
        pool,
        "SELECT status, lease_owner FROM sessions WHERE id = ANY(%s)",
        drained,
    )
    assert rows == [("ready", None)] * SLOTS  # released now, not left to lease expiry
    for sid in drained:
        assert (await event_kinds(pool, sid))[-1] == "turn.released"
    assert await fetch(pool, "SELECT state FROM workers WHERE id = 'ctr-a'") == [("stopped",)]

    # docker kill: SIGKILL, nothing handed back; the leases must expire first.
    engine.docker("kill", b)
    assert engine.state(b)["ExitCode"] == 137
    expiries = dict(
        await fetch(pool, "SELECT id, lease_expires_at FROM sessions WHERE id = ANY(%s)", killed)
    )
    assert len(expiries) == SLOTS

    c, _ = deployment.start_worker("ctr-c")
    open_gate(deployment.workspace, "burst")

    async def all_succeeded() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status = 'succeeded'")
        return bool(rows[0][0] == SESSIONS)

    await wait_until(all_succeeded, what="all 24 turns succeeded", within=120)
    memory["ctr-c"] = engine.peak_memory(c)
    figures = _measure(memory)
    await asyncio.to_thread(engine.docker, "stop", "--time", str(STOP_GRACE), c)
    assert engine.state(c)["ExitCode"] == 0

    for sid in drained:
        assert await event_kinds(pool, sid) == [
            "turn.started",
            "tool.called",
            "tool.returned",
            "turn.released",
            "turn.started",
            "turn.completed",
        ]
    for sid in killed:
        assert await event_kinds(pool, sid) == [
            "turn.started",
            "tool.called",
            "tool.returned",
            "turn.started",
            "turn.completed",
        ]
        # Recovered by the third worker, and only after the killed worker's lease expired
        # (both times from the database clock).
        [(restarted_at, worker_id)] = await fetch(
            pool,
            "SELECT e.created_at, t.worker_id FROM events e JOIN turns t ON t.id = e.turn_id "
            "WHERE e.session_id = %s AND e.kind = 'turn.started' ORDER BY e.seq OFFSET 1",
            sid,
        )
        assert worker_id == "ctr-c"
        assert restarted_at >= expiries[sid]
    assert await fetch(
        pool, "SELECT count(*) FROM turns WHERE status = 'succeeded' AND attempts = 1"
    ) == [(SESSIONS - 2 * SLOTS,)]

    report = await run_checks(pool, journals=deployment.workspace / "journals")
    assert report.passed, report.as_json()
    checks = {c.name: c for c in report.checks}
    assert checks["no_duplicate_effects"].passed and checks["contiguous_event_cursors"].passed
    for name in (a, b, c):
        assert deployment.password not in engine.logs(name)
    _write_report(figures)


def _healthcheck_command() -> list[str]:
    test = engine.inspect(engine.WORKER_IMAGE)["Config"]["Healthcheck"]["Test"]
    assert test[0] == "CMD"
    return list(test[1:])


def _measure(memory: dict[str, dict[str, int | None]]) -> dict[str, Any]:
    """Image sizes, and each worker's peak memory: ctr-a and ctr-b with their four
    turns running, ctr-c after it ran the rest of the burst."""
    return {
        "images": {
            image: {"size_bytes": engine.image_size_bytes(image)}
            for image in (engine.WORKER_IMAGE, CONTAINER_IMAGE)
        },
        "worker_containers": memory,
        "worker": {"slots": SLOTS, "sessions": SESSIONS, "lease_s": LEASE, "drain_s": DRAIN},
    }


def _write_report(figures: dict[str, Any]) -> None:
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    engine_version = engine.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
    document = {
        "schema": 1,
        "command": "STINT_REQUIRE_DOCKER=1 pytest tests/deploy/test_containers.py",
        "environment": {**environment(), "docker_engine": engine_version},
        **figures,
    }
    REPORT.write_text(json.dumps(document, indent=2) + "\n")
    mib = 2**20
    lines = [f"{image}: {v['size_bytes'] / mib:.0f} MiB" for image, v in figures["images"].items()]
    for name, memory in figures["worker_containers"].items():
        rss = memory["process_peak_rss_bytes"]
        peak = memory["cgroup_peak_bytes"]
        lines.append(
            f"worker {name}: peak RSS {rss / mib if rss else float('nan'):.1f} MiB, "
            f"cgroup peak {peak / mib if peak else float('nan'):.1f} MiB"
        )
    print("\n" + "\n".join(lines))
