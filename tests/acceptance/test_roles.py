"""Acceptance: least privilege with password (SCRAM) authentication.

An owner role migrates a schema a superuser created for it (it has no CREATE on
the database); an app role runs workers and the CLI with only the DML the
migration runner granted it. Real PostgreSQL, real processes, real passwords.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import psycopg
import pytest
from psycopg import sql

from stint.lab.processes import spawn_api, spawn_worker
from stint.store.migrate import migration_files
from tests.dashboard.conftest import sign_in
from tests.passwords import Login, PasswordDatabase
from tests.polling import wait_until
from tests.scrape import free_port

LATEST = migration_files()[-1]


def _env(db: PasswordDatabase, login: Login, tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        **os.environ,
        "STINT_DATABASE_URL": login.url,
        "STINT_SCHEMA": db.schema,
        "STINT_WORKSPACE": str(tmp_path / "workspace"),
        "STINT_LEASE_SECONDS": "1",
        "STINT_POLL_INTERVAL": "0.05",
        **extra,
    }


def _stint(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stint.ops.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _worker_once(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A worker that is expected to refuse to start."""
    return subprocess.run(
        [sys.executable, "-m", "stint.worker.main", "--slots", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _migrate_as_owner(db: PasswordDatabase, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return _stint(_env(db, db.owner, tmp_path, STINT_APP_ROLE=db.app.role), "migrate")


def _turn_status(db: PasswordDatabase, turn_id: str) -> str:
    with db.superuser() as conn:
        row = conn.execute(
            sql.SQL("SELECT status FROM {}.turns WHERE id = %s").format(sql.Identifier(db.schema)),
            (turn_id,),
        ).fetchone()
    assert row is not None
    return str(row[0])


def test_owner_migrates_without_create_on_the_database_and_again_as_a_noop(
    password_db: PasswordDatabase, tmp_path: Path
) -> None:
    first = _migrate_as_owner(password_db, tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"applied {LATEST.label}" in first.stdout
    again = _migrate_as_owner(password_db, tmp_path)
    assert again.returncode == 0, again.stderr
    assert "0 migration(s) applied" in again.stdout
    assert f"role {password_db.app.role}: granted" in again.stdout


@pytest.mark.parametrize("auto_migrate", ["true", "false"])
async def test_app_role_runs_workers_and_the_cli_with_dml_only(
    password_db: PasswordDatabase, tmp_path: Path, auto_migrate: str
) -> None:
    assert _migrate_as_owner(password_db, tmp_path).returncode == 0
    env = _env(
        password_db,
        password_db.app,
        tmp_path,
        STINT_AUTO_MIGRATE=auto_migrate,
        STINT_PRUNE_INTERVAL="0.2",
    )
    noop = _stint(env, "migrate")
    assert noop.returncode == 0, noop.stderr
    queued = _stint(env, "enqueue", '{"min_wait_ms": 0, "ask": "ok?"}')
    assert queued.returncode == 0, queued.stderr
    turn = json.loads(queued.stdout)
    worker = spawn_worker(env=env, args=["--slots", "1"], log_path=tmp_path / "worker.log")

    async def turn_is(status: str) -> bool:
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()
        return _turn_status(password_db, turn["turn_id"]) == status

    try:
        await wait_until(lambda: turn_is("parked"), what="the turn parked on its question")
        answered = _stint(env, "answer", turn["session_id"], f"ask-{turn['turn_id']}", '"yes"')
        assert answered.returncode == 0, answered.stderr
        await wait_until(lambda: turn_is("succeeded"), what="the answered turn succeeded")
        for args in (["status", "--json"], ["tail", turn["session_id"]], ["check"]):
            result = _stint(env, *args)
            assert result.returncode == 0, (args, result.stdout, result.stderr)

        async def retention_declined() -> bool:
            return "retention off in this worker" in (tmp_path / "worker.log").read_text()

        # The app role may not delete history: its worker says so and runs on.
        await wait_until(retention_declined, what="the worker declined to prune")
        pruned = _stint(
            _env(password_db, password_db.owner, tmp_path, STINT_RETAIN_TURNS_DAYS="0.0000001"),
            "prune",
        )
        assert pruned.returncode == 0 and json.loads(pruned.stdout)["turns"] == 1, pruned.stderr
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, (tmp_path / "worker.log").read_text()


@pytest.mark.parametrize(
    "statement",
    [
        "CREATE TABLE {schema}.extra (x int)",
        "DROP TABLE {schema}.turns",
        "DELETE FROM {schema}.events",
        "UPDATE {schema}.events SET kind = kind",
        "TRUNCATE {schema}.sessions CASCADE",
        "INSERT INTO {schema}.schema_migrations VALUES (99, 'x', 'y')",
        "DELETE FROM {schema}.schema_migrations",
        "CREATE SCHEMA other",
    ],
)
def test_app_role_cannot_change_the_schema_rewrite_events_or_record_migrations(
    password_db: PasswordDatabase, tmp_path: Path, statement: str
) -> None:
    assert _migrate_as_owner(password_db, tmp_path).returncode == 0
    with (
        psycopg.connect(password_db.app.url, autocommit=True) as conn,
        pytest.raises(psycopg.errors.InsufficientPrivilege),
    ):
        conn.execute(sql.SQL(statement).format(schema=sql.Identifier(password_db.schema)))


def test_worker_without_auto_migrate_names_the_missing_migration(
    password_db: PasswordDatabase, tmp_path: Path
) -> None:
    assert _migrate_as_owner(password_db, tmp_path).returncode == 0
    with psycopg.connect(password_db.owner.url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DELETE FROM {}.schema_migrations WHERE version = %s").format(
                sql.Identifier(password_db.schema)
            ),
            (LATEST.version,),
        )
    checked = _worker_once(_env(password_db, password_db.app, tmp_path, STINT_AUTO_MIGRATE="false"))
    assert checked.returncode == 1
    [line] = checked.stderr.strip().splitlines()
    assert f"missing migration {LATEST.label}" in line
    refused = _worker_once(_env(password_db, password_db.app, tmp_path, STINT_AUTO_MIGRATE="true"))
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert "cannot apply migrations" in line and "owner role" in line
    assert "Traceback" not in checked.stderr + refused.stderr


async def test_app_role_creates_keys_serves_the_api_and_samples_the_queue(
    password_db: PasswordDatabase, tmp_path: Path
) -> None:
    # What a deployment runs as the app role besides the CLI: `stint keys create`,
    # `stint api` (keys, sessions, turns, events, the dashboard's reads) and a worker
    # with a health port, whose elected sampler writes the queue's samples.
    assert _migrate_as_owner(password_db, tmp_path).returncode == 0
    env = _env(
        password_db,
        password_db.app,
        tmp_path,
        STINT_AUTO_MIGRATE="false",
        STINT_HEALTH_PORT=str(free_port()),
        STINT_SAMPLE_SECONDS="0.2",
    )
    created = _stint(env, "keys", "create", "--tenant", "acme")
    assert created.returncode == 0, created.stderr
    auth = {"Authorization": f"Bearer {json.loads(created.stdout)['token']}"}
    port = free_port()
    api = spawn_api(env=env, port=port, log_path=tmp_path / "api.log")
    worker = spawn_worker(env=env, args=["--slots", "1"], log_path=tmp_path / "worker.log")
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=10) as http:

            async def ready() -> bool:
                assert api.poll() is None, (tmp_path / "api.log").read_text()
                try:
                    return (await http.get("/readyz")).status_code == 200
                except httpx.TransportError:
                    return False

            await wait_until(ready, what="the API answered /readyz as the app role")
            session = await http.post("/v1/sessions", json={}, headers=auth)
            assert session.status_code == 201, session.text
            session_id = session.json()["id"]
            queued = await http.post(
                f"/v1/sessions/{session_id}/turns",
                json={"input": {"min_wait_ms": 0}},
                headers={**auth, "Idempotency-Key": "t1"},
            )
            assert queued.status_code == 201, queued.text
            turn_id = queued.json()["turn_id"]

            async def succeeded() -> bool:
                return _turn_status(password_db, turn_id) == "succeeded"

            await wait_until(succeeded, what="the API's turn succeeded")
            events = await http.get(f"/v1/sessions/{session_id}/events?format=json", headers=auth)
            assert events.status_code == 200, events.text
            for path in ("/v1/sessions", "/v1/status"):
                answered = await http.get(path, headers=auth)
                assert answered.status_code == 200, (path, answered.text)
            operator = _stint(env, "keys", "create", "--operator", "--tenant", "ops")
            assert operator.returncode == 0, operator.stderr
            token = json.loads(operator.stdout)["token"]
            signed_in = await sign_in(http, token)
            assert signed_in.status_code == 303, signed_in.text
            for page in ("overview", "workers", "sessions", f"sessions/{session_id}"):
                answered = await http.get(f"/dashboard/{page}")
                assert answered.status_code == 200, (page, answered.text)

        async def sampled() -> bool:
            with password_db.superuser() as conn:
                row = conn.execute(
                    sql.SQL("SELECT count(*) FROM {}.stats_samples").format(
                        sql.Identifier(password_db.schema)
                    )
                ).fetchone()
            return bool(row and row[0])

        await wait_until(sampled, what="the app role's sampler wrote a sample")
    finally:
        for process in (api, worker):
            process.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=60) == 0, (tmp_path / "worker.log").read_text()
        api.wait(timeout=60)
    for log in ("api.log", "worker.log"):
        text = (tmp_path / log).read_text()
        assert "permission denied" not in text.lower(), text
        assert password_db.app.password not in text
