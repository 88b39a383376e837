"""deploy/compose.yaml on a real engine: PostgreSQL, the one-shot migration as the
owner, two workers and the API logged in as the least-privilege app role; turns
run; the owner prunes; ``stop`` drains every worker to exit 0.

Runs with whichever compose the machine has: ``docker compose`` (v2) or
Debian's ``docker-compose`` (v1, the only one its packages offer; .ci/run installs it).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest
import pytest_asyncio

from stint.ops.checks import run_checks
from stint.store.client import ClientStore
from stint.store.config import ROLE_CLI, StoreConfig
from stint.store.pool import Pool, open_pool
from tests.deploy import engine
from tests.deploy.conftest import REQUIRE_ENV
from tests.polling import wait_until
from tests.workers import fetch

pytestmark = pytest.mark.docker

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "deploy" / "compose.yaml"
TURNS = 8
OWNER = "stint"
APP_ROLE = "stint_app"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Project:
    command: list[str]
    name: str
    env: dict[str, str]
    url: str

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*self.command, "--project-name", self.name, "--file", str(COMPOSE_FILE), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        assert done.returncode == 0, f"compose {args[0]}: {done.stderr[-2000:]}"
        return done

    def containers(self, service: str) -> list[str]:
        return self.run("ps", "--quiet", service).stdout.split()


@pytest.fixture
def project() -> Iterator[Project]:
    command = engine.compose_command()
    if command is None:
        if os.environ.get(REQUIRE_ENV) == "1":
            pytest.fail(f"{REQUIRE_ENV}=1 but neither docker compose nor docker-compose runs")
        pytest.skip("no compose tool (docker compose, or Debian's docker-compose)")
    port = _free_port()
    password = secrets.token_urlsafe(12)
    env = {
        "STINT_PG_PORT": str(port),
        "STINT_PG_PASSWORD": password,
        "STINT_APP_PASSWORD": secrets.token_urlsafe(12),
    }
    url = f"postgresql://{OWNER}:{password}@127.0.0.1:{port}/stint"  # the owner's, for checks
    made = Project(command, f"stinttest{uuid.uuid4().hex[:8]}", env, url)
    try:
        yield made
    finally:
        made.run("down", "--volumes", "--timeout", "60")


@pytest_asyncio.fixture(loop_scope="session")
async def pool(project: Project) -> AsyncIterator[Pool]:
    project.run("up", "--detach")  # returns once postgres is healthy and migrate ran
    opened = await open_pool(StoreConfig(conninfo=project.url), ROLE_CLI, min_size=1, max_size=2)
    try:
        yield opened
    finally:
        await opened.close()


async def _logins(pool: Pool) -> dict[str, set[str]]:
    """Who each worker and API connection open now logged in as, by application_name."""
    rows = await fetch(
        pool,
        "SELECT application_name, usename FROM pg_stat_activity"
        " WHERE datname = current_database() AND starts_with(application_name, 'stint-')"
        " AND application_name <> 'stint-cli'",  # this test's own pool, as the owner
    )
    found: dict[str, set[str]] = {}
    for name, user in rows:
        found.setdefault(str(name), set()).add(str(user))
    return found


async def test_compose_up_runs_turns_and_stop_drains_the_workers(
    project: Project, pool: Pool
) -> None:
    [migrate] = project.containers("migrate")
    assert engine.state(migrate)["ExitCode"] == 0
    migrated = engine.logs(migrate)
    assert "up to date" in migrated
    assert f"role {APP_ROLE}: granted the worker/API privileges" in migrated
    workers = project.containers("worker")
    assert len(workers) == 2  # deploy.replicas
    [postgres] = project.containers("postgres")
    roles = await fetch(
        pool,
        "SELECT rolname, rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = %s",
        APP_ROLE,
    )
    assert roles == [(APP_ROLE, False, False, False)]
    assert project.env["STINT_APP_PASSWORD"] not in engine.logs(postgres)

    async def both_registered() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM workers WHERE state = 'running'")
        return bool(rows[0][0] == len(workers))

    await wait_until(both_registered, what="both workers registered", within=60)
    client = ClientStore(StoreConfig(conninfo=project.url), pool)
    for i in range(TURNS):
        await client.turns_enqueue(
            session_id=None,
            idempotency_key=f"compose-{i}",
            turn_input={"min_wait_ms": 50},
        )

    async def all_succeeded() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status = 'succeeded'")
        return bool(rows[0][0] == TURNS)

    await wait_until(all_succeeded, what=f"{TURNS} turns succeeded", within=60)

    async def api_ready() -> bool:
        async with httpx.AsyncClient() as http:
            try:
                answer = await http.get("http://127.0.0.1:8000/readyz", timeout=2)
            except httpx.HTTPError:
                return False
        return answer.status_code == 200

    await wait_until(api_ready, what="the API container ready", within=60)

    async def workers_healthy() -> bool:
        # Each worker's healthcheck probes the port its worker wrote in its container.
        health = [engine.state(container).get("Health", {}) for container in workers]
        return all(h.get("Status") == "healthy" for h in health)

    await wait_until(workers_healthy, what="each worker container healthy", within=90)

    # Workers (their pool and LISTEN connections) and the API log in as the app role.
    logins = await _logins(pool)
    for name in ("stint-worker-pool", "stint-worker-listen", "stint-api"):
        assert logins.get(name) == {APP_ROLE}, logins
    assert not any(OWNER in users for users in logins.values()), logins
    # ... which may not do the owner's work: DDL, deletes, rewriting the event log.
    app_url = project.url.replace(
        f"{OWNER}:{project.env['STINT_PG_PASSWORD']}@",
        f"{APP_ROLE}:{project.env['STINT_APP_PASSWORD']}@",
    )
    async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as app:
        for statement in (
            "DELETE FROM stint.turns",
            "UPDATE stint.events SET seq = seq",
            "CREATE TABLE stint.intruder (id int)",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await app.execute(statement)
    # Retention is the owner's: the migrate service's image and URL run `stint prune`.
    pruned = project.run("run", "--rm", "migrate", "prune", timeout=120)
    assert project.env["STINT_PG_PASSWORD"] not in pruned.stdout + pruned.stderr
    project.run("stop", "worker", timeout=120)
    for container in workers:
        assert engine.state(container)["ExitCode"] == 0, engine.logs(container)[-2000:]
    assert await fetch(pool, "SELECT DISTINCT state FROM workers") == [("stopped",)]

    volume = json.loads(engine.docker("volume", "inspect", f"{project.name}_workspace").stdout)
    journals = Path(volume[0]["Mountpoint"]) / "journals"
    report = await run_checks(pool, journals=journals)
    assert report.passed, report.as_json()
