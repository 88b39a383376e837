"""Agent turns in real workers: queue one, wait for its end, read its events, check all.

Shared by the agents harness's and the adapters' acceptance tests, which all
drive a turn with ``{"message": ...}`` through ``stint enqueue`` and judge it
from the database and the shared invariant checker.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from stint.lab.fake_provider import FakeProvider
from stint.ops.checks import run_checks
from stint.store.pool import Pool
from tests.polling import wait_until
from tests.workers import Cluster, WorkerProc, fetch

__all__ = [
    "TEST_API_KEY",
    "agent_worker",
    "assert_checks",
    "enqueue",
    "payloads",
    "turn_row",
    "until_finished",
]

_ENDED = ("succeeded", "failed", "cancelled", "interrupted")
TEST_API_KEY = "sk-test-4c1d2e3f4a5b6c7d8e9f"


def agent_worker(
    cluster: Cluster,
    fake: FakeProvider,
    *,
    harness: str = "stint.agents:chat",
    slots: int = 2,
    **env: Any,
) -> WorkerProc:
    """A worker running an agent loop against ``fake`` (more settings in ``env``)."""
    return cluster.start_worker(
        slots=slots,
        harness=harness,
        model_base_url=fake.url,
        model="fake-model",
        model_api_key=TEST_API_KEY,
        **env,
    )


def enqueue(cluster: Cluster, message: str, session: str | None = None) -> dict[str, str]:
    """Queue ``{"message": message}`` (on ``session``, or a new one); the CLI's answer."""
    args = ["--session", session] if session else []
    result = cluster.stint("enqueue", *args, json.dumps({"message": message}))
    assert result.returncode == 0, result.stderr
    line: dict[str, str] = json.loads(result.stdout)
    return line


async def turn_row(pool: Pool, turn_id: str) -> tuple[str, int, Any, str | None]:
    """The turn's status, attempts, output and error."""
    rows = await fetch(
        pool, "SELECT status, attempts, output, error FROM turns WHERE id = %s", turn_id
    )
    return rows[0]


async def until_finished(pool: Pool, turn_id: str, *, within: float = 90) -> str:
    """The status the turn ended with, once it ended."""

    async def done() -> str | None:
        status = (await turn_row(pool, turn_id))[0]
        return status if status in _ENDED else None

    return await wait_until(done, what=f"turn {turn_id} finished", within=within)


async def payloads(pool: Pool, session: str, kind: str) -> list[dict[str, Any]]:
    """The payloads of the session's events of ``kind``, in log order."""
    rows = await fetch(
        pool,
        "SELECT payload FROM events WHERE session_id = %s AND kind = %s ORDER BY seq",
        session,
        kind,
    )
    return [r[0] for r in rows]


async def assert_checks(
    pool: Pool, cluster: Cluster, faults: dict[UUID, int] | None = None
) -> None:
    """Every invariant holds (contiguous cursors, no duplicate effect, ...)."""
    report = await run_checks(pool, journals=cluster.workspace / "journals", faults=faults or {})
    assert report.passed, [c for c in report.as_json()["checks"] if not c["passed"]]
