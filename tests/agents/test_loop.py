"""The agent loop in-process, against a real PostgreSQL and the fake provider.

Each turn runs as a worker slot would run it (claim, begin, the harness on a
TurnContext, finish), so memory, steps and events are the real ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from pydantic import SecretStr

from stint.agents.config import AgentConfig, ModelConfig, StreamConfig
from stint.agents.demo_tools import TOOLS
from stint.agents.errors import TooManyIterations
from stint.agents.harness import ChatHarness
from stint.agents.provider import ChatProvider
from stint.lab.fake_provider import FakeProvider
from stint.lab.fake_script import FakeCall, FakeRule, FakeScript
from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.controls import ControlStore
from stint.store.models import Claim, TurnStart
from stint.store.pool import Pool
from stint.store.vocabulary import EventKind, TurnStatus
from stint.store.worker_store import SqlWorkerStore
from stint.worker.context import Parked, TurnContext
from stint.worker.journal import EffectJournal
from tests.agents.conftest import API_KEY
from tests.integration.claims import claim_one
from tests.workers import fetch


def _harness(
    fake: FakeProvider, journals: Path, *, history: int = 200, iterations: int = 8, **stream: Any
) -> ChatHarness:
    config = AgentConfig(
        model=ModelConfig(fake.url, "fake-model", SecretStr(API_KEY)),
        stream=StreamConfig(**stream),
        tools="stint.agents.demo_tools:TOOLS",
        system_prompt="Be brief.",
        max_iterations=iterations,
        history_messages=history,
    )
    return ChatHarness(
        config=config,
        tools=TOOLS,
        journal=EffectJournal(journals),
        provider=ChatProvider(config.model),
    )


class Driver:
    """Runs turns of one session the way a worker slot does."""

    def __init__(self, db: ScratchTarget, pool: Pool, harness: ChatHarness) -> None:
        self.client = ClientStore(db.config, pool)
        self.runtime = SqlWorkerStore(db.config, pool, concurrency=2)
        self.harness = harness
        self.session: UUID | None = None

    async def begin(self, message: str) -> tuple[Claim, TurnStart]:
        queued = await self.client.turns_enqueue(
            session_id=self.session,
            idempotency_key=message,
            turn_input={"message": message},
        )
        self.session = queued.session_id
        return await claim_one(self.runtime, "w")

    async def attempt(self, claim: Claim, turn: TurnStart, attempt: int = 1) -> Any:
        steps = await self.runtime.steps_for_turn(claim, turn.turn_id) if attempt > 1 else {}
        ctx = TurnContext(
            store=self.runtime,
            claim=claim,
            turn_id=turn.turn_id,
            turn_input=turn.input,
            attempt=attempt,
            steps=steps,
            may_write=lambda: True,
        )
        return await self.harness.run_turn(ctx)

    async def finish(self, claim: Claim, turn: TurnStart, output: Any) -> None:
        await self.runtime.turns_finish(
            claim,
            turn_id=turn.turn_id,
            status=TurnStatus.SUCCEEDED,
            output=output,
            error=None,
            events=[(EventKind.TURN_COMPLETED, {})],
            release=True,
        )

    async def turn(self, message: str) -> Any:
        claim, turn = await self.begin(message)
        output = await self.attempt(claim, turn)
        await self.finish(claim, turn, output)
        return output


async def _events(pool: Pool, kind: str) -> list[dict[str, Any]]:
    rows = await fetch(pool, "SELECT payload FROM events WHERE kind = %s ORDER BY seq", kind)
    return [r[0] for r in rows]


async def test_tools_run_and_the_conversation_is_remembered(
    db: ScratchTarget, pool: Pool, fake: FakeProvider, tmp_path: Path
) -> None:
    driver = Driver(db, pool, _harness(fake, tmp_path))
    first = await driver.turn("What is 19 + 23?")
    assert first["reply"] == "I asked the calculator: 19 + 23 = 42.0."
    assert first["tool_calls"] == [
        {"name": "add", "arguments": {"a": 19, "b": 23}, "result": "42.0"}
    ]
    assert first["model_calls"] == 2 and first["history"] == {
        "loaded": 0,
        "dropped": 0,
        "limit": 200,
    }
    second = await driver.turn("Please note that down.")
    assert second["reply"].startswith("Saved to your journal")
    third = await driver.turn("What did we do?")
    assert third["reply"].startswith("I remember 8 earlier messages")
    await driver.harness.close()
    # The third turn's request carried the whole conversation, in order.
    last = fake.requests()[-1].messages
    assert [m["role"] for m in last] == [
        "system", "user", "assistant", "tool", "assistant", "user", "assistant", "tool",
        "assistant", "user",
    ]  # fmt: skip
    rows = await fetch(
        pool, "SELECT role, message ->> 'role' FROM conversation_messages ORDER BY turn_seq, idx"
    )
    assert len(rows) == 10
    # The role column (the window's and the retention's) is each message's own role.
    assert [r[0] for r in rows] == [r[1] for r in rows] == [
        "user", "assistant", "tool", "assistant", "user", "assistant", "tool", "assistant",
        "user", "assistant",
    ]  # fmt: skip
    # Each tool's effect is one fsync'd journal line keyed by its step: add's result
    # (a function tool), then the note (the native journal tool).
    assert driver.session is not None
    added, noted = EffectJournal(tmp_path).entries(driver.session)
    assert (added["tool"], added["result"]) == ("add", 42.0)
    assert noted["args"] == {"text": "19 + 23 = 42"}
    assert added["key"].endswith(":tool:0.0") and noted["key"].endswith(":tool:0.0")


async def test_a_replay_calls_neither_the_model_nor_the_tools_again(
    db: ScratchTarget, pool: Pool, fake: FakeProvider, tmp_path: Path
) -> None:
    driver = Driver(db, pool, _harness(fake, tmp_path))
    claim, turn = await driver.begin("Please note that down.")
    first = await driver.attempt(claim, turn)
    requests, journal = len(fake.requests()), EffectJournal(tmp_path)
    again = await driver.attempt(claim, turn, attempt=2)
    await driver.harness.close()
    assert again == first
    assert len(fake.requests()) == requests == 2
    assert len(journal.entries(claim.session_id)) == 1
    assert await fetch(pool, "SELECT count(*) FROM conversation_messages") == [(4,)]


async def test_malformed_arguments_go_back_to_the_model(
    db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    script = FakeScript(
        (
            FakeRule(
                rounds=(
                    (FakeCall("add", '{"a": 1, "b":'),),
                    (FakeCall("add", {"a": "one", "b": 2}), FakeCall("nope", {})),
                    (FakeCall("add", {"a": 1, "b": 2}),),
                ),
                reply="Fixed it.",
            ),
        )
    )
    fake = FakeProvider(script)
    with fake.running():
        driver = Driver(db, pool, _harness(fake, tmp_path))
        output = await driver.turn("add one and two")
        await driver.harness.close()
    assert output["reply"] == "Fixed it."
    assert [t["result"].split(":")[0] for t in output["tool_calls"]] == [
        "error",
        "error",
        "error",
        "3.0",
    ]
    tool_messages = [m for m in fake.requests()[-1].messages if m["role"] == "tool"]
    assert "not JSON" in tool_messages[0]["content"]
    assert "a: Input should be a valid number" in tool_messages[1]["content"]
    assert "no tool named 'nope'" in tool_messages[2]["content"]
    assert tool_messages[3]["content"] == "3.0"
    assert [r.round for r in fake.requests()] == [0, 1, 2, 3]


async def test_max_iterations_bounds_a_model_that_never_gets_it_right(
    db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    script = FakeScript((FakeRule(rounds=((FakeCall("add", "{"),),) * 10),))
    fake = FakeProvider(script)
    with fake.running():
        driver = Driver(db, pool, _harness(fake, tmp_path, iterations=3))
        claim, turn = await driver.begin("loop")
        with pytest.raises(TooManyIterations, match="after 3 model calls"):
            await driver.attempt(claim, turn)
        await driver.harness.close()
    assert len(fake.requests()) == 3
    assert await fetch(pool, "SELECT count(*) FROM conversation_messages") == [(0,)]


async def test_history_is_cut_at_a_user_message_and_the_cut_recorded(
    db: ScratchTarget, pool: Pool, fake: FakeProvider, tmp_path: Path
) -> None:
    driver = Driver(db, pool, _harness(fake, tmp_path, history=5))
    await driver.turn("What is 19 + 23?")
    await driver.turn("Please note that down.")
    third = await driver.turn("What did we do?")
    await driver.harness.close()
    # The newest 5 of 8 messages start with turn 1's answer; the cut moves on to turn 2's
    # user message, so no tool result is left without its call.
    assert third["history"] == {"loaded": 4, "dropped": 4, "limit": 5}
    assert third["reply"].startswith("I remember 4 earlier messages")
    assert await _events(pool, "history.truncated") == [{"loaded": 4, "dropped": 4, "limit": 5}]
    roles = [m["role"] for m in fake.requests()[-1].messages]
    assert roles == ["system", "user", "assistant", "tool", "assistant", "user"]


async def test_deltas_are_coalesced_into_few_ordered_events(
    db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    words = " ".join(f"w{i}" for i in range(120))
    fake = FakeProvider(FakeScript((FakeRule(reply=words),)))
    with fake.running():
        driver = Driver(db, pool, _harness(fake, tmp_path, flush_seconds=60, flush_deltas=50))
        output = await driver.turn("talk")
        await driver.harness.close()
    deltas = await _events(pool, "message.delta")
    assert [d["count"] for d in deltas] == [50, 50, 20]
    assert [d["index"] for d in deltas] == [0, 50, 100]
    assert "".join(d["text"] for d in deltas) == output["reply"] == words
    kinds = [r[0] for r in await fetch(pool, "SELECT kind FROM events ORDER BY seq")]
    assert kinds == [
        "turn.started", "model.called", "message.delta", "message.delta", "message.delta",
        "model.returned", "turn.completed",
    ]  # fmt: skip
    step = await fetch(pool, "SELECT result FROM steps WHERE kind = 'model'")
    assert json.loads(json.dumps(step[0][0]))["delta_events"] == 3


async def test_a_refused_approval_tells_the_model_and_runs_nothing(
    db: ScratchTarget, pool: Pool, fake: FakeProvider, tmp_path: Path
) -> None:
    driver = Driver(db, pool, _harness(fake, tmp_path))
    claim, turn = await driver.begin("Please deploy the web service.")
    with pytest.raises(Parked) as parked:
        await driver.attempt(claim, turn)
    assert parked.value.question == {
        "tool": "deploy",
        "arguments": {"service": "web", "version": "1.2.3"},
    }
    await driver.runtime.turns_park(
        claim,
        turn_id=turn.turn_id,
        step_key=parked.value.step_key,
        digest=parked.value.digest,
        question=parked.value.question,
    )
    controls = ControlStore(db.config, pool)
    await controls.answer(session_id=claim.session_id, step_key=parked.value.step_key, answer="no")
    claim, again = await claim_one(driver.runtime, "w")
    assert again.turn_id == turn.turn_id
    output = await driver.attempt(claim, again, attempt=again.attempts)
    await driver.harness.close()
    assert output["tool_calls"] == [
        {
            "name": "deploy",
            "arguments": {"service": "web", "version": "1.2.3"},
            "result": "not approved",
        }
    ]
    assert "the user did not approve this call of deploy" in output["reply"]
    assert EffectJournal(tmp_path).entries(claim.session_id) == []
    assert [r.round for r in fake.requests()] == [0, 1]  # round 0 was not asked again


async def test_a_replys_last_deltas_are_written_by_the_model_steps_commit(
    db: ScratchTarget, pool: Pool, fake: FakeProvider, tmp_path: Path
) -> None:
    # With bounds the stream never reaches, every delta is still pending when the
    # call ends: they go in the statement that commits the step, not one of their own.
    driver = Driver(db, pool, _harness(fake, tmp_path, flush_seconds=60.0, flush_deltas=10_000))
    output = await driver.turn("What is 19 + 23?")
    await driver.harness.close()
    rows = await fetch(
        pool,
        "SELECT kind, xmin::text, payload ->> 'text' FROM events"
        " WHERE kind IN ('message.delta', 'model.returned') ORDER BY seq",
    )
    assert [r[0] for r in rows] == ["model.returned", "message.delta", "model.returned"]
    assert rows[1][1] == rows[2][1] and rows[1][2] == output["reply"]
