"""Acceptance: admission limits set with ``stint admission``, refused by ``stint
enqueue`` (exit 3, one line, nothing written), shown by ``stint status``, and a
tenant's active-session limit holding while real workers run its turns."""

from __future__ import annotations

import json
import signal
from typing import Any

import pytest

from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, fetch


async def _counts(pool: Pool) -> tuple[int, int, int]:
    rows = await fetch(
        pool,
        "SELECT (SELECT count(*) FROM sessions), (SELECT count(*) FROM turns), "
        "(SELECT count(*) FROM admission_limits)",
    )
    return rows[0][0], rows[0][1], rows[0][2]


def _show(cluster: Cluster) -> dict[str, Any]:
    shown = cluster.stint("admission", "show")
    assert shown.returncode == 0, shown.stderr
    data: dict[str, Any] = json.loads(shown.stdout)
    return data


def _enqueue(cluster: Cluster, *args: str) -> dict[str, Any]:
    done = cluster.stint("enqueue", *args)
    assert done.returncode == 0, done.stderr
    line: dict[str, Any] = json.loads(done.stdout)
    return line


async def test_set_show_and_status(cluster: Cluster) -> None:
    set_tenant = cluster.stint(
        "admission", "set", "--tenant", "acme", "--max-queued", "5", "--max-running", "2"
    )
    assert set_tenant.returncode == 0, set_tenant.stderr
    assert cluster.stint("admission", "set", "--global-backlog", "100").returncode == 0
    _enqueue(cluster, "--tenant", "acme", "{}")
    shown = _show(cluster)
    assert shown["global_backlog"] == {"limit": 100, "unfinished_turns": 1}
    default, acme = shown["tenants"]
    assert default["tenant"] == "*"
    trees = {"max_depth": None, "max_fanout": None}  # limits on child sessions (ctx.spawn)
    assert default["limits"] == {
        "max_queued": None,
        "max_running": None,
        "max_session_queue": 16,
        "max_sessions": None,
        **trees,
    }
    assert acme == {
        "tenant": "acme",
        "limits": {
            "max_queued": 5,
            "max_running": 2,
            "max_session_queue": None,
            "max_sessions": None,
            **trees,
        },
        "usage": {"queued": 1, "running": 1, "sessions": 1},
    }
    status = json.loads(cluster.stint("status", "--json").stdout)
    assert status["admission"] == shown
    text = cluster.stint("status").stdout
    assert "global backlog limit 100" in text
    assert "tenant acme: queued 1/5  active sessions 1/2  per session -  sessions 1/-" in text
    # none clears a limit: the tenant follows the default again.
    assert (
        cluster.stint("admission", "set", "--tenant", "acme", "--max-queued", "none").returncode
        == 0
    )
    assert _show(cluster)["tenants"][1]["limits"]["max_queued"] is None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tenant", "acme", "--max-queued", "0"], "--max-queued must be 1..2147483647"),
        (["--tenant", "acme", "--max-queued", "lots"], "--max-queued must be a whole number"),
        (["--tenant", "acme", "--max-running", "-3"], "--max-running must be 1.."),
        (["--tenant", "acme"], "give at least one limit"),
        (["--max-queued", "4"], "--tenant T or --default"),
        (["--tenant", "acme", "--global-backlog", "9"], "not a tenant's"),
        (["--tenant", "no spaces", "--max-queued", "4"], "tenant must be"),
        (["--tenant", "a", "--default", "--max-queued", "4"], "not allowed with argument"),
    ],
)
async def test_bad_values_exit_2_and_write_nothing(
    cluster: Cluster, pool: Pool, args: list[str], message: str
) -> None:
    before = await _counts(pool)
    shown = _show(cluster)
    refused = cluster.stint("admission", "set", *args)
    assert refused.returncode == 2
    assert message in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert await _counts(pool) == before
    assert _show(cluster) == shown


async def test_enqueue_past_a_limit_exits_3_with_one_line_and_writes_nothing(
    cluster: Cluster, pool: Pool
) -> None:
    assert (
        cluster.stint("admission", "set", "--tenant", "acme", "--max-queued", "2").returncode == 0
    )
    first = _enqueue(cluster, "--tenant", "acme", "--idempotency-key", "order-1", "{}")
    _enqueue(cluster, "--tenant", "acme", "{}")
    before = await _counts(pool)
    refused = cluster.stint("enqueue", "--tenant", "acme", "{}")
    assert refused.returncode == 3
    assert refused.stdout == ""
    assert refused.stderr.strip() == (
        "stint enqueue: admission refused: max_queued limit of 2 unfinished turns reached for "
        "tenant acme; nothing was written"
    )
    assert await _counts(pool) == before
    # The retry of an admitted turn still succeeds at the limit; another tenant is not held.
    again = _enqueue(cluster, "--tenant", "acme", "--idempotency-key", "order-1", "{}")
    assert (again["turn_id"], again["created"]) == (first["turn_id"], False)
    assert _enqueue(cluster, "--tenant", "globex", "{}")["created"]


async def test_active_sessions_stay_within_max_running_with_real_workers(
    cluster: Cluster, pool: Pool
) -> None:
    """4 free slots, a tenant limited to 2 active sessions: a third session is
    refused while 2 run, never more than 2 are running, and a finished session
    makes room for the next."""
    assert (
        cluster.stint("admission", "set", "--tenant", "acme", "--max-running", "2").returncode == 0
    )
    worker = cluster.start_worker(slots=4)
    held = [_enqueue(cluster, "--tenant", "acme", json.dumps({"gate": f"g{i}"})) for i in range(2)]

    async def both_running() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM sessions WHERE status = 'running'")
        return int(rows[0][0]) == 2

    await wait_until(both_running, what="both sessions running")
    refused = cluster.stint("enqueue", "--tenant", "acme", "{}")
    assert refused.returncode == 3
    assert "max_running limit of 2 active sessions reached for tenant acme" in refused.stderr
    # Another turn on a session already active is not a new active session.
    more = _enqueue(cluster, "--session", held[0]["session_id"], '{"min_wait_ms": 0}')
    cluster.open_gate("g0")

    async def first_done() -> bool:
        rows = await fetch(pool, "SELECT status FROM turns WHERE id = %s", more["turn_id"])
        status: str = rows[0][0]
        return status == "succeeded"

    await wait_until(first_done, what="the first session's turns")
    third = _enqueue(cluster, "--tenant", "acme", '{"min_wait_ms": 0}')
    cluster.open_gate("g1")

    async def all_done() -> bool:
        rows = await fetch(pool, "SELECT count(*) FROM turns WHERE status <> 'succeeded'")
        return int(rows[0][0]) == 0

    await wait_until(all_done, what="every turn")
    assert third["created"]
    starts = await fetch(
        pool,
        "SELECT count(*) FROM turns a JOIN turns b ON a.session_id <> b.session_id "
        "JOIN turns c ON c.session_id NOT IN (a.session_id, b.session_id) "
        "WHERE a.started_at < least(b.finished_at, c.finished_at) "
        "AND b.started_at < least(a.finished_at, c.finished_at) "
        "AND c.started_at < least(a.finished_at, b.finished_at)",
    )
    assert starts[0][0] == 0, "three sessions ran at once"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
