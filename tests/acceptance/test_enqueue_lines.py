"""Acceptance: ``stint enqueue --lines``, many turns from JSON lines on stdin in one
transaction, all or none."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from stint.store.pool import Pool
from tests.workers import Cluster, count_rows


def _lines(cluster: Cluster, text: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stint.ops.cli", "enqueue", "--lines", *args],
        env={**os.environ, **cluster.env, **env},
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def test_every_line_is_queued_in_order_and_a_retry_queues_none(
    cluster: Cluster, pool: Pool
) -> None:
    session = json.loads(cluster.stint("enqueue", "{}").stdout)["session_id"]
    before = await count_rows(pool, "turns")
    text = "\n".join(
        [
            json.dumps({"input": {"n": 1}, "idempotency_key": "new-session"}),
            "",
            json.dumps({"input": {"n": 2}, "session": session, "idempotency_key": "k2"}),
            json.dumps({"input": {"n": 3}, "session": session, "idempotency_key": "k3"}),
        ]
    )
    first = _lines(cluster, text)
    assert first.returncode == 0, first.stderr
    queued = [json.loads(line) for line in first.stdout.splitlines()]
    assert [(q["seq"], q["created"]) for q in queued] == [(1, True), (2, True), (3, True)]
    assert queued[0]["session_id"] != session
    assert {q["session_id"] for q in queued[1:]} == {session}
    again = _lines(cluster, text)
    assert again.returncode == 0, again.stderr
    retried = [json.loads(line) for line in again.stdout.splitlines()]
    assert [r["turn_id"] for r in retried] == [q["turn_id"] for q in queued]
    assert not any(r["created"] for r in retried)
    assert await count_rows(pool, "turns") == before + 3


async def test_a_bad_line_exits_2_naming_it_and_writes_nothing(
    cluster: Cluster, pool: Pool
) -> None:
    before = await count_rows(pool, "turns")
    for text, message in (
        ('{"input": {}}\n{"input": [1]}\n', 'line 2: "input" must be a JSON object'),
        ('{"input": {}, "tenant": "x"}\n', "line 1: unknown field(s) tenant"),
        ('{"input": {}, "idempotency_key": "a b"}\n', "line 1: the key must be"),
        ("\n\n", "a batch holds 1..1000 turns, not 0"),
    ):
        result = _lines(cluster, text)
        assert (result.returncode, result.stdout) == (2, ""), result.stderr
        assert message in result.stderr
    assert await count_rows(pool, "turns") == before


async def test_a_refusal_by_a_limit_exits_3_and_writes_no_line(
    cluster: Cluster, pool: Pool
) -> None:
    assert (
        cluster.stint("admission", "set", "--default", "--max-session-queue", "2").returncode == 0
    )
    session = json.loads(cluster.stint("enqueue", "{}").stdout)["session_id"]
    before = await count_rows(pool, "turns")
    text = "".join(json.dumps({"input": {"n": n}, "session": session}) + "\n" for n in (1, 2))
    refused = _lines(cluster, text)
    assert (refused.returncode, refused.stdout) == (3, ""), refused.stderr
    assert "item=1" in refused.stderr
    assert await count_rows(pool, "turns") == before
