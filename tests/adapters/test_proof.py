"""The adapters' proof: real worker processes, the fake provider, kill -9.

For each adapter (the OpenAI Agents SDK's and Pydantic AI's), a worker is
killed after the first tool's effect and before the second model call; the
turn resumes on another worker, the effect exists once, the fake provider saw
one request per model step, and the event log is contiguous (the shared
invariant checker). The same with an approval in the middle: the turn parks,
its slot serves another session meanwhile, and the kill comes after the
approved tool's effect.
"""

from __future__ import annotations

import signal
from collections import Counter
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

from stint.lab.fake_provider import FakeProvider
from stint.store.pool import Pool
from tests.adapters.effects import EFFECTS_ENV, read_effects
from tests.polling import wait_until
from tests.turns import (
    agent_worker,
    assert_checks,
    enqueue,
    payloads,
    turn_row,
    until_finished,
)
from tests.workers import Cluster, WorkerProc, fetch

pytestmark = pytest.mark.acceptance

ADAPTERS = ["tests.adapters.sdk_app:harness", "tests.adapters.pydantic_app:harness"]


def _worker(
    cluster: Cluster, fake: FakeProvider, harness: str, *, slots: int = 2, **env: Any
) -> WorkerProc:
    return agent_worker(cluster, fake, harness=harness, slots=slots, **env)


def _effects_file(cluster: Cluster, tmp_path: Path) -> Path:
    path = tmp_path / "effects.jsonl"
    cluster.env[EFFECTS_ENV] = str(path)
    return path


def _rounds(fake: FakeProvider, user: str) -> list[int]:
    """The rounds the model was asked for, for turns whose user message is ``user``."""
    return [r.round for r in fake.requests() if r.user == user and r.outcome == "ok"]


@pytest.mark.parametrize("harness", ADAPTERS)
async def test_a_kill_after_the_first_tool_resumes_on_another_worker(
    cluster: Cluster, pool: Pool, fake: FakeProvider, tmp_path: Path, harness: str
) -> None:
    effects = _effects_file(cluster, tmp_path)
    message = "Please look up order A1."
    victim = _worker(cluster, fake, harness, failpoints="after_tool_step:kill")
    turn = enqueue(cluster, message)
    assert victim.wait() == -signal.SIGKILL, victim.log_text()
    assert read_effects(effects) == [{"order": "A1", "tool": "lookup_order"}]
    assert _rounds(fake, message) == [0]  # the tool committed, then the kill
    rescuer = _worker(cluster, fake, harness)
    assert await until_finished(pool, turn["turn_id"]) == "succeeded", rescuer.log_text()
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    _, attempts, output, _ = await turn_row(pool, turn["turn_id"])
    assert attempts == 2
    assert output["reply"] == "Here it is: order A1: 2 mugs, paid"
    assert output["model_calls"] == 2
    assert [c["name"] for c in output["tool_calls"]] == ["lookup_order"]
    assert read_effects(effects) == [{"order": "A1", "tool": "lookup_order"}]  # once
    assert _rounds(fake, message) == [0, 1]  # one provider request per model step
    sid = turn["session_id"]
    called = Counter(p["name"] for p in await payloads(pool, sid, "tool.called"))
    assert called == {"lookup_order": 1}
    assert Counter(p["name"] for p in await payloads(pool, sid, "model.called")) == {
        "fake-model": 2
    }
    await assert_checks(pool, cluster, faults={UUID(sid): 1})


@pytest.mark.parametrize("harness", ADAPTERS)
async def test_an_approval_parks_frees_the_slot_then_a_kill_after_the_effect(
    cluster: Cluster, pool: Pool, fake: FakeProvider, tmp_path: Path, harness: str
) -> None:
    effects = _effects_file(cluster, tmp_path)
    message = "I want a refund for order A1."
    first = _worker(cluster, fake, harness, slots=1)
    asked = enqueue(cluster, message)
    sid = asked["session_id"]

    async def parked() -> list[dict[str, Any]]:
        return await payloads(pool, sid, "approval.requested")

    [request] = await wait_until(parked, what="the refund waits for approval")
    assert request["question"] == {"tool": "refund", "arguments": {"amount": 5.0, "order": "A1"}}
    assert await fetch(pool, "SELECT status, lease_owner FROM sessions WHERE id = %s", sid) == [
        ("parked", None)
    ]
    other = enqueue(cluster, "Hi there.")  # the worker's one slot is free again
    assert await until_finished(pool, other["turn_id"]) == "succeeded"
    first.signal(signal.SIGTERM)
    assert first.wait() == 0
    assert read_effects(effects) == []  # nothing ran before the approval
    victim = _worker(cluster, fake, harness, failpoints="after_tool_step:kill")
    answered = cluster.stint("answer", sid, request["step_key"], '"yes"')
    assert answered.returncode == 0, answered.stderr
    assert victim.wait() == -signal.SIGKILL, victim.log_text()
    assert read_effects(effects) == [{"amount": 5.0, "order": "A1", "tool": "refund"}]
    assert _rounds(fake, message) == [0]
    rescuer = _worker(cluster, fake, harness)
    assert await until_finished(pool, asked["turn_id"]) == "succeeded", rescuer.log_text()
    rescuer.signal(signal.SIGTERM)
    assert rescuer.wait() == 0
    _, _, output, _ = await turn_row(pool, asked["turn_id"])
    assert output["reply"] == "Refund: refunded 5.0 on A1"
    assert read_effects(effects) == [{"amount": 5.0, "order": "A1", "tool": "refund"}]
    assert _rounds(fake, message) == [0, 1]
    await assert_checks(pool, cluster, faults={UUID(sid): 2})  # the park and the kill


async def test_the_sdk_adapter_hands_off_and_keeps_its_guardrails(
    cluster: Cluster, pool: Pool, fake: FakeProvider, tmp_path: Path
) -> None:
    effects = _effects_file(cluster, tmp_path)
    worker = _worker(cluster, fake, "tests.adapters.sdk_app:harness")
    handed = enqueue(cluster, "Please transfer me to the other desk.")
    refused = enqueue(cluster, "My password is hunter2.")
    assert await until_finished(pool, handed["turn_id"]) == "succeeded"
    assert await until_finished(pool, refused["turn_id"]) == "failed"
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    _, _, output, _ = await turn_row(pool, handed["turn_id"])
    assert (output["agent"], output["reply"]) == (
        "refunds",
        'Refunds desk: {"assistant": "refunds"}; order B2: 2 mugs, paid',
    )
    assert output["model_calls"] == 3
    assert read_effects(effects) == [{"order": "B2", "tool": "lookup_order"}]
    _, _, _, error = await turn_row(pool, refused["turn_id"])
    assert error is not None and "InputGuardrailTripwireTriggered" in error
    await assert_checks(pool, cluster)


@pytest.mark.parametrize("harness", ADAPTERS)
async def test_a_denied_approval_never_runs_the_tool(
    cluster: Cluster, pool: Pool, fake: FakeProvider, tmp_path: Path, harness: str
) -> None:
    effects = _effects_file(cluster, tmp_path)
    worker = _worker(cluster, fake, harness)
    asked = enqueue(cluster, "I want a refund for order A1.")
    sid = asked["session_id"]

    async def parked() -> list[dict[str, Any]]:
        return await payloads(pool, sid, "approval.requested")

    [request] = await wait_until(parked, what="the refund waits for approval")
    answered = cluster.stint("answer", sid, request["step_key"], '"no"')
    assert answered.returncode == 0, answered.stderr
    assert await until_finished(pool, asked["turn_id"]) == "succeeded", worker.log_text()
    worker.signal(signal.SIGTERM)
    assert worker.wait() == 0
    _, _, output, _ = await turn_row(pool, asked["turn_id"])
    assert output["reply"].startswith("Refund: ")  # the model was told of the denial
    assert "refunded" not in output["reply"]
    assert {
        "name": "refund",
        "arguments": {"amount": 5.0, "order": "A1"},
        "result": "not approved",
    } in output["tool_calls"]
    assert read_effects(effects) == []
    assert await payloads(pool, sid, "tool.called") == []
    await assert_checks(pool, cluster, faults={UUID(sid): 1})
