"""Acceptance: the ``stint`` CLI as an operator uses it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import IO

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, fetch


async def _counts(pool: Pool) -> tuple[int, int]:
    rows = await fetch(pool, "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM turns)")
    return rows[0][0], rows[0][1]


async def test_enqueue_prints_one_json_line_and_is_idempotent(cluster: Cluster) -> None:
    first = cluster.stint("enqueue", '{"min_wait_ms": 1}')
    assert first.returncode == 0, first.stderr
    line = json.loads(first.stdout)
    assert set(line) == {"session_id", "turn_id", "seq", "created"}
    again = [
        cluster.stint("enqueue", "--session", line["session_id"], "--idempotency-key", "k", "{}")
        for _ in range(2)
    ]
    a, b = (json.loads(r.stdout) for r in again)
    assert (a["turn_id"], a["created"], b["created"]) == (b["turn_id"], True, False)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["not json"], "not valid JSON"),
        (["[1, 2]"], "must be a JSON object"),
        (["--session", "nope", "{}"], "not a session id"),
        (["--session", "00000000-0000-0000-0000-000000000000", "{}"], "No session"),
        (['{"x": "' + "a" * 300 + '"}'], "larger than the limit"),
    ],
)
async def test_bad_enqueue_input_exits_2_and_writes_nothing(
    cluster: Cluster, pool: Pool, args: list[str], message: str
) -> None:
    before = await _counts(pool)
    result = cluster.stint("enqueue", *args, STINT_MAX_INPUT_BYTES="256")
    assert result.returncode == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stdout == ""
    assert await _counts(pool) == before


async def test_idempotency_conflict_exits_2(cluster: Cluster, pool: Pool) -> None:
    sid = json.loads(cluster.stint("enqueue", "{}").stdout)["session_id"]
    ok = cluster.stint("enqueue", "--session", sid, "--idempotency-key", "k", '{"a": 1}')
    assert ok.returncode == 0
    before = await _counts(pool)
    clash = cluster.stint("enqueue", "--session", sid, "--idempotency-key", "k", '{"a": 2}')
    assert clash.returncode == 2
    assert "different input" in clash.stderr
    assert await _counts(pool) == before


async def test_full_queue_exits_3_and_writes_nothing(cluster: Cluster, pool: Pool) -> None:
    assert (
        cluster.stint("admission", "set", "--default", "--max-session-queue", "2").returncode == 0
    )
    sid = json.loads(cluster.stint("enqueue", "{}").stdout)["session_id"]
    assert cluster.stint("enqueue", "--session", sid, "{}").returncode == 0
    before = await _counts(pool)
    full = cluster.stint("enqueue", "--session", sid, "{}")
    assert full.returncode == 3
    assert full.stderr.strip() == (
        "stint enqueue: queue full: max_session_queue limit of 2 unfinished turns reached for "
        f"session {sid} (no tenant); nothing was written"
    )
    assert len(full.stderr.strip().splitlines()) == 1
    assert await _counts(pool) == before


async def test_bad_setting_exits_2_naming_the_variable(cluster: Cluster) -> None:
    result = cluster.stint("status", STINT_STATEMENT_TIMEOUT="0")
    assert result.returncode == 2
    assert "STINT_STATEMENT_TIMEOUT" in result.stderr
    assert "allowed range 0.1..3600" in result.stderr


async def test_status_and_check_report_a_finished_run(cluster: Cluster, pool: Pool) -> None:
    worker = cluster.start_worker(slots=2)
    for _ in range(3):
        cluster.stint("enqueue", '{"min_wait_ms": 10}')

    async def done() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status = 'succeeded'")
        succeeded: int = rows[0][0]
        return succeeded == 3

    await wait_until(done, what="3 turns succeeded")
    status = json.loads(cluster.stint("status", "--json").stdout)
    assert status["sessions"] == {"idle": 3}
    assert status["queued_turns"] == 0
    assert [w["slots"] for w in status["workers"]] == [2]
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    check = cluster.stint("check", "--json")
    assert check.returncode == 0, check.stdout
    assert json.loads(check.stdout)["passed"] is True


async def test_tail_follow_streams_and_resumes_after_losing_its_connection(
    cluster: Cluster, db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    sid = json.loads(cluster.stint("enqueue", '{"min_wait_ms": 0, "gate": "one"}').stdout)[
        "session_id"
    ]
    out = (tmp_path / "tail.out").open("w")
    follower = _follower(cluster, sid, out)
    try:
        worker = cluster.start_worker(slots=1)

        def printed() -> list[int]:
            text = (tmp_path / "tail.out").read_text()
            return [json.loads(line)["seq"] for line in text.splitlines()]

        async def seen(n: int) -> bool:
            return len(printed()) >= n

        await wait_until(lambda: seen(3), what="follower printed the first events")
        terminated = await fetch(
            pool,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = 'stint-cli' AND pid <> pg_backend_pid() "
            "AND query ILIKE 'LISTEN%%'",
        )
        assert terminated == [(True,)]
        cluster.open_gate("one")
        cluster.stint("enqueue", "--session", sid, '{"min_wait_ms": 0}')
        await wait_until(lambda: seen(8), what="follower resumed after the lost connection")
        assert printed() == list(range(1, 9))
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
        follower.send_signal(signal.SIGINT)
        assert follower.wait(timeout=30) == 130  # its usual end, though it inherited SIGINT ignored
    finally:
        follower.kill()
        follower.wait()
        out.close()


def _follower(cluster: Cluster, sid: str, out: IO[str]) -> subprocess.Popen[bytes]:
    """``stint tail SID --follow`` started as a script's background job is: with SIGINT
    ignored (a non-interactive shell's ``cmd &``, and so a test run sent to the
    background, passes that on). It used to ignore SIGINT then, and never ended."""
    tail = [sys.executable, "-m", "stint.ops.cli", "tail", sid, "--follow"]
    return subprocess.Popen(
        ["sh", "-c", 'trap "" INT; exec "$0" "$@"', *tail],
        env={**os.environ, **cluster.env},
        stdout=out,
        stderr=subprocess.DEVNULL,
    )


async def test_tail_follow_ends_on_sigterm_too(cluster: Cluster, tmp_path: Path) -> None:
    sid = json.loads(cluster.stint("enqueue", '{"min_wait_ms": 0}').stdout)["session_id"]
    cluster.stint("cancel", sid)  # one event to print: turn.cancelled
    with (tmp_path / "tail.out").open("w") as out:
        follower = _follower(cluster, sid, out)
        try:

            async def printed() -> bool:
                return bool((tmp_path / "tail.out").read_text().strip())

            await wait_until(printed, what="the follower printed the log so far")
            follower.send_signal(signal.SIGTERM)
            assert follower.wait(timeout=30) == 130
        finally:
            follower.kill()
            follower.wait()


async def test_enqueue_reads_input_from_stdin(cluster: Cluster) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stint.ops.cli", "enqueue", "-"],
        env={**os.environ, **cluster.env},
        input='{"min_wait_ms": 5}',
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["created"] is True


def test_worker_help_names_every_option_and_variable() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "stint.worker.main", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    text = " ".join(result.stdout.split())
    for flag, variable in [
        ("--slots", "STINT_SLOTS"),
        ("--database-url", "STINT_DATABASE_URL"),
        ("--schema", "STINT_SCHEMA"),
        ("--harness", "STINT_HARNESS"),
        ("--lease-seconds", "STINT_LEASE_SECONDS"),
        ("--poll-interval", "STINT_POLL_INTERVAL"),
        ("--drain-seconds", "STINT_DRAIN_SECONDS"),
        ("--pin", "STINT_PINS"),
        ("--workspace", "STINT_WORKSPACE"),
    ]:
        assert flag in text and variable in text


async def test_a_removed_setting_is_named_not_silently_ignored(cluster: Cluster) -> None:
    """A deployment still setting STINT_SESSION_QUEUE_LIMIT=1 used to get the
    database's limit of 16 with no word said: the command now says so (and runs)."""
    done = cluster.stint("status", STINT_SESSION_QUEUE_LIMIT="1", STINT_SLOTZ="4")
    assert done.returncode == 0, done.stderr
    assert "STINT_SESSION_QUEUE_LIMIT was removed and is ignored" in done.stderr
    assert "stint admission set --default --max-session-queue N" in done.stderr
    assert "STINT_SLOTZ is not a Stint setting and is ignored; did you mean STINT_SLOTS?" in (
        done.stderr
    )
    assert "embedded PostgreSQL" not in done.stderr
