"""Acceptance: the CLI says what is true, and exits as docs/reference/cli.md says.

status (turns by status, dead workers, who to blame), tail of an unknown
session and into a closed pipe, cancel --turn, check with parked turns and a
missing workspace, show, --version, idempotent session creation, and one
live worker per worker id.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from uuid import UUID

import pytest

from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, event_kinds, fetch

CLI = [sys.executable, "-m", "stint.ops.cli"]


def _ok(result: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert result.returncode == 0, result.stderr
    value: dict[str, object] = json.loads(result.stdout)
    return value


async def _turn_status(pool: Pool, turn_id: object) -> str:
    rows = await fetch(pool, "SELECT status FROM turns WHERE id = %s", str(turn_id))
    return str(rows[0][0])


async def _counts(pool: Pool) -> tuple[int, ...]:
    rows = await fetch(
        pool,
        "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM turns), "
        "(SELECT count(*) FROM events)",
    )
    return tuple(rows[0])


async def test_status_counts_turns_by_status_and_shows_a_killed_worker_dead(
    cluster: Cluster, pool: Pool
) -> None:
    worker = cluster.start_worker(slots=2)
    running = _ok(cluster.stint("enqueue", '{"min_wait_ms": 0, "gate": "never"}'))
    parked = _ok(cluster.stint("enqueue", '{"min_wait_ms": 0, "ask": "ok?"}'))
    queued = _ok(cluster.stint("enqueue", "--session", str(running["session_id"]), "{}"))
    for turn, state in ((running, "running"), (parked, "parked")):
        await wait_until(partial(_is, pool, turn["turn_id"], state), what=f"a {state} turn")
    status = _ok(cluster.stint("status", "--json"))
    assert (status["queued_turns"], status["running_turns"], status["parked_turns"]) == (1, 1, 1)
    text = cluster.stint("status").stdout
    assert "turns: 1 queued, 1 running, 1 parked" in text
    assert await _turn_status(pool, queued["turn_id"]) == "queued"

    worker.signal(signal.SIGKILL)
    worker.wait()
    waiting = _ok(cluster.stint("enqueue", "{}"))  # a ready session nobody will run

    async def shown_dead() -> dict[str, object] | None:
        now = _ok(cluster.stint("status", "--json"))
        workers = now["workers"]
        assert isinstance(workers, list)
        return now if [w["state"] for w in workers] == ["dead"] else None

    status = await wait_until(shown_dead, what="the killed worker shown dead")
    assert status["live_workers"] == 0
    assert status["ready_without_worker"] == 1
    assert status["ready_unaccepted"] == 0  # pins are not to blame
    text = cluster.stint("status").stdout
    assert "dead" in text
    assert "ready sessions waiting because no worker is alive: 1" in text
    assert "(pins)" not in text
    assert await _turn_status(pool, waiting["turn_id"]) == "queued"


async def _is(pool: Pool, turn_id: object, status: str) -> bool:
    return await _turn_status(pool, turn_id) == status


@pytest.mark.parametrize("follow", [False, True])
async def test_tail_of_an_unknown_session_exits_2(cluster: Cluster, follow: bool) -> None:
    args = ["tail", "00000000-0000-0000-0000-000000000000", *(["--follow"] if follow else [])]
    result = cluster.stint(*args)
    assert result.returncode == 2
    assert "No session with this id exists" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


async def test_tail_follow_into_a_closed_pipe_ends_quietly(cluster: Cluster, pool: Pool) -> None:
    first = _ok(cluster.stint("enqueue", "{}"))
    sid = str(first["session_id"])
    second = _ok(cluster.stint("enqueue", "--session", sid, "{}"))
    third = _ok(cluster.stint("enqueue", "--session", sid, "{}"))
    _ok(cluster.stint("cancel", sid, "--turn", str(first["turn_id"])))  # event 1
    tail = subprocess.Popen(
        [*CLI, "tail", sid, "--follow"],
        env={**os.environ, **cluster.env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert tail.stdout is not None and tail.stderr is not None
        assert json.loads(tail.stdout.readline())["seq"] == 1
        tail.stdout.close()  # what `| head -1` does after its line
        tail.stdout = None
        _ok(cluster.stint("cancel", sid, "--turn", str(second["turn_id"])))
        _ok(cluster.stint("cancel", sid, "--turn", str(third["turn_id"])))
        _, stderr = tail.communicate(timeout=60)
        assert tail.returncode == 141
        assert stderr == b""
    finally:
        if tail.poll() is None:
            tail.kill()
            tail.wait()


async def test_cancel_turn_of_another_session_is_refused_and_outcomes_are_honest(
    cluster: Cluster, pool: Pool
) -> None:
    a = _ok(cluster.stint("enqueue", "{}"))
    b = _ok(cluster.stint("enqueue", "{}"))
    before = await _counts(pool)
    wrong = cluster.stint("cancel", str(a["session_id"]), "--turn", str(b["turn_id"]))
    assert wrong.returncode == 2
    assert "No turn with this id belongs to this session" in wrong.stderr
    assert await _counts(pool) == before
    assert await _turn_status(pool, b["turn_id"]) == "queued"
    done = _ok(cluster.stint("cancel", str(a["session_id"]), "--turn", str(a["turn_id"])))
    assert done["cancelled_queued"] == [a["turn_id"]]
    assert done["outcome"] == "cancelled 1 queued turn(s); no turn was running"
    again = _ok(cluster.stint("cancel", str(a["session_id"]), "--turn", str(a["turn_id"])))
    assert again["outcome"] == "turn already cancelled; nothing to do"
    assert again["cancelled_queued"] == []


async def test_check_accepts_parked_turns_and_complains_about_a_missing_workspace(
    cluster: Cluster, pool: Pool, tmp_path: Path
) -> None:
    worker = cluster.start_worker(slots=1)
    asked = _ok(cluster.stint("enqueue", '{"min_wait_ms": 0, "ask": "ok?"}'))
    await wait_until(lambda: _is(pool, asked["turn_id"], "parked"), what="parked")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    check = cluster.stint("check", "--json")
    assert check.returncode == 0, check.stdout
    report = json.loads(check.stdout)
    assert report["passed"] is True
    missing = cluster.stint("check", "--workspace", str(tmp_path / "elsewhere"))
    assert missing.returncode == 1
    assert "FAIL  journals_found" in missing.stdout


async def test_show_prints_a_turns_status_output_and_error(cluster: Cluster, pool: Pool) -> None:
    worker = cluster.start_worker(slots=2)
    good = _ok(cluster.stint("enqueue", '{"min_wait_ms": 0}'))
    sid = str(good["session_id"])
    bad = _ok(cluster.stint("enqueue", "--session", sid, '{"min_wait_ms": "soon"}'))
    await wait_until(lambda: _is(pool, bad["turn_id"], "failed"), what="the bad turn failed")
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    whole = _ok(cluster.stint("show", sid))
    assert whole["session_id"] == sid
    turns = whole["turns"]
    assert isinstance(turns, list)
    assert [t["turn_id"] for t in turns] == [good["turn_id"], bad["turn_id"]]
    turn = turns[-1]
    assert isinstance(turn, dict)
    assert (turn["turn_id"], turn["status"], turn["seq"]) == (bad["turn_id"], "failed", 2)
    assert "soon" in str(turn["error"])
    first = _ok(cluster.stint("show", sid, "--turn", str(good["turn_id"])))
    shown = first["turn"]
    assert isinstance(shown, dict)
    assert shown["status"] == "succeeded" and shown["error"] is None
    assert shown["output"] == {"effect": f"effect-{good['turn_id']}", "waited_ms": 0}
    other = _ok(cluster.stint("enqueue", "{}"))
    for args in (
        ["show", "00000000-0000-0000-0000-000000000000"],
        ["show", sid, "--turn", str(other["turn_id"])],
    ):
        refused = cluster.stint(*args)
        assert refused.returncode == 2, refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("program", ["stint.ops.cli", "stint.worker.main"])
def test_version(program: str) -> None:
    from importlib.metadata import version

    result = subprocess.run(
        [sys.executable, "-m", program, "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    assert result.stdout.strip().endswith(version("stint"))


async def test_enqueue_with_a_key_and_no_session_creates_one_session_per_tenant(
    cluster: Cluster, pool: Pool
) -> None:
    first = _ok(cluster.stint("enqueue", "--idempotency-key", "order-1", '{"a": 1}'))
    retry = _ok(cluster.stint("enqueue", "--idempotency-key", "order-1", '{"a": 1}'))
    assert (retry["session_id"], retry["turn_id"], retry["created"]) == (
        first["session_id"],
        first["turn_id"],
        False,
    )
    before = await _counts(pool)
    clash = cluster.stint("enqueue", "--idempotency-key", "order-1", '{"a": 2}')
    assert clash.returncode == 2 and "different input" in clash.stderr
    pinned = cluster.stint("enqueue", "--idempotency-key", "order-1", "--pin", "v2", '{"a": 1}')
    assert pinned.returncode == 2 and "another pin" in pinned.stderr
    assert await _counts(pool) == before
    other_tenant = _ok(
        cluster.stint("enqueue", "--tenant", "t2", "--idempotency-key", "order-1", '{"a": 1}')
    )
    assert other_tenant["session_id"] != first["session_id"]


async def test_a_second_live_worker_with_the_same_id_is_refused(
    cluster: Cluster, pool: Pool
) -> None:
    first = cluster.start_worker(slots=1, worker_id="same-id")

    async def registered() -> bool:
        rows = await fetch(pool, "SELECT pid FROM workers WHERE id = 'same-id'")
        return rows == [(first.pid,)]

    await wait_until(registered, what="the first worker registered")
    second = cluster.start_worker(slots=1, worker_id="same-id")
    assert second.wait() == 2
    log = second.log_text()
    assert "worker id same-id is in use by a live worker" in log
    assert "Traceback" not in log
    assert first.proc.poll() is None
    assert await fetch(pool, "SELECT pid FROM workers WHERE id = 'same-id'") == [(first.pid,)]

    first.signal(signal.SIGKILL)  # a restart under the same id: the dead one is replaced
    first.wait()
    third = cluster.start_worker(slots=1, worker_id="same-id")
    turn = _ok(cluster.stint("enqueue", '{"min_wait_ms": 0}'))
    await wait_until(
        lambda: _is(pool, turn["turn_id"], "succeeded"), what="the restarted worker ran"
    )
    assert await fetch(pool, "SELECT pid FROM workers WHERE id = 'same-id'") == [(third.pid,)]
    assert await event_kinds(pool, UUID(str(turn["session_id"]))) == [
        "turn.started",
        "tool.called",
        "tool.returned",
        "turn.completed",
    ]
    third.signal(signal.SIGTERM)
    assert third.wait() == 0
