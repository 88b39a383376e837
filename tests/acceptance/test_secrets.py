"""Acceptance: a database password never reaches an output stream, a log line, an
error, an event or ``stint status`` -- whatever shape the URL has, however it is
given (variable, flag, file), whichever command reads it.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest
from psycopg import sql

from stint.lab.processes import spawn_worker
from stint.postgres.throwaway import ThrowawayCluster
from tests.passwords import PasswordDatabase
from tests.polling import wait_until

PW = f"Zq7-secret-{secrets.token_hex(4)}"

# Malformed or refused connection strings, each carrying PW somewhere.
SHAPES = {
    "sqlalchemy-scheme": f"postgresql+psycopg://app:{PW}@127.0.0.1/db",
    "unclosed-ipv6": f"postgresql://app:{PW}@[::1/db",
    "bad-percent": f"postgresql://app:{PW}%zz{PW}@127.0.0.1/db",
    "space": f"postgresql://app:{PW} {PW}@127.0.0.1/db",
    "unterminated-quote": f"host=127.0.0.1 password='{PW} {PW}",
    "query-password": f"postgresql://app@127.0.0.1/db?password={PW}&nosuch=1",
    "other-scheme": f"mysql://app:{PW}@127.0.0.1/db",
    "bad-option": f"host=127.0.0.1 password={PW} port=abc",
}
COMMANDS = {
    "status": [sys.executable, "-m", "stint.ops.cli", "status"],
    "enqueue": [sys.executable, "-m", "stint.ops.cli", "enqueue", "{}"],
    "worker": [sys.executable, "-m", "stint.worker.main", "--slots", "1"],
}


def _run(argv: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("STINT_")}
    return subprocess.run(argv, env={**clean, **env}, capture_output=True, text=True, timeout=120)


def _assert_one_clean_line(result: subprocess.CompletedProcess[str], *secrets_: str) -> str:
    everything = result.stdout + result.stderr
    for secret in secrets_:
        assert secret not in everything, everything
    assert "Traceback" not in everything
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("command", sorted(COMMANDS))
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_malformed_url_is_refused_with_the_password_masked(shape: str, command: str) -> None:
    result = _run(COMMANDS[command], STINT_DATABASE_URL=SHAPES[shape], STINT_CONNECT_TIMEOUT="300")
    line = _assert_one_clean_line(result, PW)
    if shape == "bad-option":  # parses; libpq refuses the port value before connecting
        assert result.returncode == 1
        assert 'invalid integer value "abc"' in line
    else:
        assert result.returncode == 2
        assert "STINT_DATABASE_URL" in line


@pytest.mark.parametrize("how", ["flag", "file"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_url_from_a_flag_or_a_file_is_masked_too(shape: str, how: str, tmp_path: Path) -> None:
    if how == "flag":
        result = _run([*COMMANDS["status"][:3], "--database-url", SHAPES[shape], "status"])
    else:
        secret_file = tmp_path / "url"
        secret_file.write_text(SHAPES[shape] + "\n")
        result = _run(COMMANDS["status"], STINT_DATABASE_URL_FILE=str(secret_file))
    _assert_one_clean_line(result, PW)
    assert result.returncode in (1, 2)


def test_url_file_is_read_and_conflicts_are_refused(
    password_db: PasswordDatabase, tmp_path: Path
) -> None:
    secret_file = tmp_path / "url"
    secret_file.write_text(password_db.owner.url + "\n")
    ok = _run(
        [*COMMANDS["status"][:3], "migrate"],
        STINT_DATABASE_URL_FILE=str(secret_file),
        STINT_SCHEMA=password_db.schema,
    )
    assert ok.returncode == 0, ok.stderr
    both = _run(
        COMMANDS["status"],
        STINT_DATABASE_URL_FILE=str(secret_file),
        STINT_DATABASE_URL=password_db.owner.url,
    )
    assert both.returncode == 2
    assert "not both" in _assert_one_clean_line(both, password_db.owner.password)
    missing = _run(COMMANDS["status"], STINT_DATABASE_URL_FILE=str(tmp_path / "absent"))
    assert missing.returncode == 2
    assert "cannot read it" in _assert_one_clean_line(missing)


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_refused_connections_fail_at_once_with_the_real_cause(
    scram_cluster: ThrowawayCluster, command: str
) -> None:
    """A wrong password or a missing database can never succeed: one line, the server's
    reason, no pool warnings, and no waiting out a 300 s connect timeout."""
    base = f"{scram_cluster.host}:{scram_cluster.port}"
    for url, cause in [
        (f"postgresql://postgres_nobody:{quote(PW)}@{base}/postgres", "password authentication"),
        (f"postgresql://postgres@{base}/no_such_db_{secrets.token_hex(2)}", "does not exist"),
    ]:
        result = _run(COMMANDS[command], STINT_DATABASE_URL=url, STINT_CONNECT_TIMEOUT="300")
        assert result.returncode == 1, result.stderr
        line = _assert_one_clean_line(result, PW, quote(PW))
        assert cause in line
        assert "psycopg.pool" not in result.stderr


def test_help_warns_that_a_url_flag_is_visible_in_ps() -> None:
    for argv in (COMMANDS["status"][:3], COMMANDS["worker"][:3]):
        text = " ".join(_run([*argv, "--help"]).stdout.split())
        assert "visible to every user of the machine (ps" in text
        assert "STINT_DATABASE_URL_FILE" in text


async def test_a_full_run_never_shows_the_password(
    password_db: PasswordDatabase, tmp_path: Path
) -> None:
    """Migrate, a worker, enqueue, a parked question and its answer, tail, status,
    check: no output stream, log line or stored row contains the password."""
    db = password_db
    secrets_ = [db.owner.password, db.app.password, quote(db.app.password, safe="")]
    outputs: list[subprocess.CompletedProcess[str]] = []
    env = {
        "STINT_SCHEMA": db.schema,
        "STINT_WORKSPACE": str(tmp_path / "ws"),
        "STINT_LEASE_SECONDS": "1",
        "STINT_LOG_LEVEL": "debug",
    }
    outputs.append(
        _run(
            [*COMMANDS["status"][:3], "migrate"],
            STINT_DATABASE_URL=db.owner.url,
            STINT_APP_ROLE=db.app.role,
            **env,
        )
    )
    app = {**env, "STINT_DATABASE_URL": db.app.url}
    log = tmp_path / "worker.log"
    worker = spawn_worker(env=app, args=["--slots", "1"], log_path=log)
    try:
        queued = _run([*COMMANDS["status"][:3], "enqueue", '{"min_wait_ms": 0, "ask": "?"}'], **app)
        outputs.append(queued)
        turn = json.loads(queued.stdout)

        async def events() -> bool:
            tail = _run([*COMMANDS["status"][:3], "tail", turn["session_id"]], **app)
            return "approval.requested" in tail.stdout

        await wait_until(events, what="the turn parked")
        step = f"ask-{turn['turn_id']}"
        for args in (
            ["answer", turn["session_id"], step, '"yes"'],
            ["status"],
            ["status", "--json"],
            ["tail", turn["session_id"]],
            ["check", "--live"],
        ):
            outputs.append(_run([*COMMANDS["status"][:3], *args], **app))
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
    for result in outputs:
        assert result.returncode == 0, result.stderr
        for secret in secrets_:
            assert secret not in result.stdout + result.stderr
    for secret in secrets_:
        assert secret not in log.read_text()
    with psycopg.connect(db.cluster.conninfo(db.database), autocommit=True) as conn:
        stored = conn.execute(
            sql.SQL(
                "SELECT string_agg(t, ' ') FROM ("
                " SELECT row_to_json(e)::text AS t FROM {s}.events e UNION ALL"
                " SELECT row_to_json(w)::text FROM {s}.workers w UNION ALL"
                " SELECT row_to_json(st)::text FROM {s}.steps st UNION ALL"
                " SELECT row_to_json(u)::text FROM {s}.turns u) AS rows"
            ).format(s=sql.Identifier(db.schema))
        ).fetchone()
    assert stored is not None and stored[0]
    for secret in secrets_:
        assert secret not in stored[0]
