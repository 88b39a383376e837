"""Acceptance: the agents harness in real worker processes against the fake provider.

Which model calls happened is read from the fake provider's own request log;
which tools ran, from the effect journal and the steps; every run ends with
the shared invariant checker (contiguous cursors, no duplicate effect, ...).
"""

from __future__ import annotations

import json
import signal
from collections import Counter
from typing import Any
from uuid import UUID

import pytest

from stint.lab.fake_provider import FakeProvider
from stint.store.pool import Pool
from tests.agents.conftest import API_KEY
from tests.polling import wait_until
from tests.turns import (
    agent_worker,
    assert_checks,
    enqueue,
    payloads,
    turn_row,
    until_finished,
)
from tests.workers import Cluster, event_kinds, fetch

pytestmark = pytest.mark.acceptance


def _show(cluster: Cluster, *args: str) -> dict[str, Any]:
    result = cluster.stint("show", *args)
    assert result.returncode == 0, result.stderr
    shown: dict[str, Any] = json.loads(result.stdout)
    return shown


def _calls(fake: FakeProvider, user: str) -> list[int]:
    """The rounds the model was asked for, for turns whose user message is ``user``."""
    return [r.round for r in fake.requests() if r.user == user and r.outcome == "ok"]


async def test_a_three_turn_conversation_with_two_tools(cluster: Cluster, pool: Pool) -> None:
    fake = FakeProvider(token_delay_ms=5)
    cluster.env["STINT_TRACING"] = "console"
    with fake.running():
        worker = agent_worker(cluster, fake)
        first = enqueue(cluster, "What is 19 + 23?")
        sid = first["session_id"]
        second = enqueue(cluster, "Please note that down.", sid)
        third = enqueue(cluster, "Thanks. What do you remember?", sid)
        assert [await until_finished(pool, t["turn_id"]) for t in (first, second, third)] == [
            "succeeded"
        ] * 3
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    outputs = [(await turn_row(pool, t["turn_id"]))[2] for t in (first, second, third)]
    assert outputs[0]["reply"] == "I asked the calculator: 19 + 23 = 42.0."
    assert [c["name"] for c in outputs[0]["tool_calls"]] == ["add"]
    assert [c["name"] for c in outputs[1]["tool_calls"]] == ["note"]
    assert outputs[2]["reply"].startswith("I remember 8 earlier messages")
    # One model call per step, as the fake saw them; memory reached the third call.
    assert _calls(fake, "What is 19 + 23?") == [0, 1]
    assert _calls(fake, "Please note that down.") == [0, 1]
    assert _calls(fake, "Thanks. What do you remember?") == [0]
    assert len(fake.requests()[-1].messages) == 10  # system + 8 remembered + the question
    # Tokens reached followers as coalesced deltas, and the reply is their text.
    deltas = await payloads(pool, sid, "message.delta")
    third_step = [d for d in deltas if d["step_key"].startswith(third["turn_id"])]
    assert "".join(d["text"] for d in third_step) == outputs[2]["reply"]
    assert sum(d["count"] for d in deltas) > len(deltas)
    # Usage per turn and per session, equal to what the provider reported.
    shown = _show(cluster, sid)
    reported = [r.usage for r in fake.requests()]
    assert shown["usage"] == {
        "model_calls": 5,
        "input_tokens": sum(u["prompt_tokens"] for u in reported),
        "output_tokens": sum(u["completion_tokens"] for u in reported),
        "cached_tokens": sum(u["cached_tokens"] for u in reported),
        "retries": 0,
    }
    assert [t["usage"]["model_calls"] for t in shown["turns"]] == [2, 2, 1]
    one = _show(cluster, sid, "--turn", second["turn_id"])
    assert (one["turn"]["status"], one["turn"]["output"]["reply"]) == (
        "succeeded",
        outputs[1]["reply"],
    )
    assert one["session_usage"] == shown["usage"]
    # Traces carry the GenAI attributes; nothing anywhere carries the key.
    log = worker.log_text()
    assert '"gen_ai.request.model": "fake-model"' in log
    assert '"gen_ai.usage.input_tokens"' in log and '"gen_ai.usage.output_tokens"' in log
    assert API_KEY not in log
    assert fake.url not in log  # no HTTP client line per request, no URL in the log
    await assert_checks(pool, cluster)


async def test_a_crash_after_a_tool_resumes_with_only_the_remaining_model_call(
    cluster: Cluster, pool: Pool
) -> None:
    fake = FakeProvider()
    with fake.running():
        victim = agent_worker(cluster, fake, failpoints="after_tool_step:kill")
        turn = enqueue(cluster, "What is 19 + 23?")
        assert victim.wait() == -signal.SIGKILL
        assert _calls(fake, "What is 19 + 23?") == [0]  # the tool committed, then the crash
        rescuer = agent_worker(cluster, fake)
        assert await until_finished(pool, turn["turn_id"]) == "succeeded"
        rescuer.signal(signal.SIGTERM)
        assert rescuer.wait() == 0
    _, attempts, output, _ = await turn_row(pool, turn["turn_id"])
    assert (attempts, output["reply"]) == (2, "I asked the calculator: 19 + 23 = 42.0.")
    assert _calls(fake, "What is 19 + 23?") == [0, 1]  # the model: the remaining step only
    sid = turn["session_id"]
    assert Counter(p["name"] for p in await payloads(pool, sid, "tool.called")) == {"add": 1}
    journal = [json.loads(line) for path in (cluster.workspace / "journals").glob("*.journal")
               for line in path.read_text().splitlines()]  # fmt: skip
    assert [(e["tool"], e["result"]) for e in journal] == [("add", 42.0)]
    await assert_checks(pool, cluster, faults={UUID(sid): 1})


async def test_an_approval_gated_tool_parks_frees_the_slot_and_resumes(
    cluster: Cluster, pool: Pool
) -> None:
    fake = FakeProvider()
    with fake.running():
        worker = agent_worker(cluster, fake, slots=1)
        asked = enqueue(cluster, "Please deploy the web service.")
        sid = asked["session_id"]

        async def parked() -> list[dict[str, Any]]:
            return await payloads(pool, sid, "approval.requested")

        [request] = await wait_until(parked, what="the deploy waits for approval")
        assert request["question"] == {
            "tool": "deploy",
            "arguments": {"service": "web", "version": "1.2.3"},
        }
        assert await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", sid) == [
            ("parked", None)
        ]
        other = enqueue(cluster, "What is 19 + 23?")  # the one slot is free again
        assert await until_finished(pool, other["turn_id"]) == "succeeded"
        answered = cluster.stint("answer", sid, request["step_key"], '"yes"')
        assert answered.returncode == 0, answered.stderr
        assert await until_finished(pool, asked["turn_id"]) == "succeeded"
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    output = (await turn_row(pool, asked["turn_id"]))[2]
    assert output["reply"] == "Deployment: web 1.2.3 is rolling out."
    assert _calls(fake, "Please deploy the web service.") == [0, 1]
    assert Counter(p["name"] for p in await payloads(pool, sid, "tool.called")) == {"deploy": 1}
    await assert_checks(pool, cluster, faults={UUID(sid): 1})  # the park is the one re-run


async def test_a_429_storm_finishes_with_the_retries_counted(cluster: Cluster, pool: Pool) -> None:
    fake = FakeProvider()
    fake.rate_limit(4, retry_after_ms=50)
    fake.rate_limit(1, retry_after=0.1)
    with fake.running():
        worker = agent_worker(cluster, fake)
        turn = enqueue(cluster, "What is 19 + 23?")
        assert await until_finished(pool, turn["turn_id"]) == "succeeded"
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    assert [r.outcome for r in fake.requests()] == ["status:429"] * 5 + ["ok", "ok"]
    retried = await payloads(pool, turn["session_id"], "model.retried")
    assert [(r["try"], r["status"], r["delay_s"]) for r in retried] == [
        (1, 429, 0.05),
        (2, 429, 0.05),
        (3, 429, 0.05),
        (4, 429, 0.05),
        (5, 429, 0.1),
    ]
    shown = _show(cluster, turn["session_id"])
    assert shown["usage"]["retries"] == 5 and shown["usage"]["model_calls"] == 2
    assert (await turn_row(pool, turn["turn_id"]))[2]["retries"] == 5
    await assert_checks(pool, cluster)


async def test_a_refusal_fails_the_turn_with_the_message_and_never_the_key(
    cluster: Cluster, pool: Pool
) -> None:
    fake = FakeProvider()
    fake.refuse(status=401, message="Incorrect API key provided: {authorization}")
    with fake.running():
        worker = agent_worker(cluster, fake)
        turn = enqueue(cluster, "What is 19 + 23?")
        assert await until_finished(pool, turn["turn_id"]) == "failed"
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    error = (await turn_row(pool, turn["turn_id"]))[3]
    assert error is not None
    assert error.startswith("ProviderError: the provider refused the request (HTTP 401)")
    assert "Incorrect API key provided: Bearer [redacted]" in error
    events = await fetch(pool, "SELECT payload::text FROM events")
    for text in [error, worker.log_text(), *(r[0] for r in events)]:
        assert API_KEY not in text
    assert len(fake.requests()) == 1  # a 401 is not retried
    await assert_checks(pool, cluster)


async def test_a_first_token_slower_than_the_lease_keeps_the_turn(
    cluster: Cluster, pool: Pool
) -> None:
    fake = FakeProvider()
    fake.slow_first_token(2.5)  # the lease is 1 s: it is renewed while the model thinks
    with fake.running():
        worker = agent_worker(cluster, fake)
        turn = enqueue(cluster, "Hello there")
        assert await until_finished(pool, turn["turn_id"]) == "succeeded"
        worker.signal(signal.SIGTERM)
        assert worker.wait() == 0
    assert (await turn_row(pool, turn["turn_id"]))[1] == 1
    kinds = await event_kinds(pool, UUID(turn["session_id"]))
    assert kinds[:2] == ["turn.started", "model.called"] and "message.delta" in kinds
    await assert_checks(pool, cluster)
