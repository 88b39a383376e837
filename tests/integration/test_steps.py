"""Durable steps: replay, reconcile after a crash, unknown effects, determinism."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from stint.postgres.scratch import ScratchTarget
from stint.store.client import ClientStore
from stint.store.models import Claim, TurnStart
from stint.store.pool import Pool
from stint.store.vocabulary import StepKind
from stint.store.worker_store import SqlWorkerStore
from stint.worker.context import (
    LeaseExpired,
    NondeterministicReplay,
    UnknownEffect,
    request_digest,
)
from stint.worker.journal import EffectJournal
from stint.worker.tools import JournalTool, Reconciled, ToolCall, Verdict
from tests.integration.claims import claim_one, replay_context


class CountingTool:
    """A tool that records how often it really ran (the harness seam may be faked)."""

    name = "counting"

    def __init__(self, verdict: Verdict = Verdict.NOT_DONE) -> None:
        self.runs = 0
        self.verdict = verdict

    async def run(self, call: ToolCall) -> Any:
        self.runs += 1
        return {"ran": self.runs}

    async def reconcile(self, call: ToolCall) -> Reconciled:
        return Reconciled(self.verdict, {"found": True} if self.verdict is Verdict.DONE else None)


async def _turn(db: ScratchTarget, pool: Pool) -> tuple[SqlWorkerStore, Claim, TurnStart]:
    client = ClientStore(db.config, pool)
    await client.turns_enqueue(session_id=None, idempotency_key="k", turn_input={})
    runtime = SqlWorkerStore(db.config, pool, concurrency=2)
    claim, turn = await claim_one(runtime, "w")
    return runtime, claim, turn


async def _kinds(pool: Pool) -> list[str]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT kind FROM events ORDER BY seq")
        return [r[0] for r in await cur.fetchall()]


async def _events_by_transaction(pool: Pool) -> list[tuple[str, str]]:
    """Each event's kind and the transaction that wrote it (events written by one
    statement share it; the test's statements each commit on their own)."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT kind, xmin::text FROM events ORDER BY seq")
        return [(r[0], r[1]) for r in await cur.fetchall()]


async def _step_status(pool: Pool) -> list[str]:
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT status FROM steps")
        return [r[0] for r in await cur.fetchall()]


async def test_committed_step_is_replayed_without_running(db: ScratchTarget, pool: Pool) -> None:
    runtime, claim, turn = await _turn(db, pool)
    tool = CountingTool()
    first = await (await replay_context(runtime, claim, turn)).call_tool("a", tool, {"x": 1})
    again = await (await replay_context(runtime, claim, turn)).call_tool("a", tool, {"x": 1})
    assert first == again == {"ran": 1}
    assert tool.runs == 1


async def test_started_step_found_in_journal_is_committed_not_rerun(
    db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    runtime, claim, turn = await _turn(db, pool)
    journal = EffectJournal(tmp_path)
    # The crash window: step recorded started, effect fsync'd, commit never happened.
    await runtime.steps_start(
        claim,
        turn_id=turn.turn_id,
        step_key="e",
        kind=StepKind.TOOL,
        digest=_digest("journal", {"n": 1}),
    )
    journal.append(claim.session_id, "e", {"turn_id": str(turn.turn_id), "args": {"n": 1}})
    result = await (await replay_context(runtime, claim, turn)).call_tool(
        "e", JournalTool(journal), {"n": 1}
    )
    assert result["key"] == "e"
    assert len(journal.entries(claim.session_id)) == 1
    assert await _step_status(pool) == ["committed"]
    assert (await _kinds(pool))[-1] == "tool.returned"


async def test_started_step_missing_from_journal_runs_once(
    db: ScratchTarget, pool: Pool, tmp_path: Path
) -> None:
    runtime, claim, turn = await _turn(db, pool)
    journal = EffectJournal(tmp_path)
    await runtime.steps_start(
        claim,
        turn_id=turn.turn_id,
        step_key="e",
        kind=StepKind.TOOL,
        digest=_digest("journal", {"n": 1}),
    )
    await (await replay_context(runtime, claim, turn)).call_tool(
        "e", JournalTool(journal), {"n": 1}
    )
    assert [e["key"] for e in journal.entries(claim.session_id)] == ["e"]
    assert await _step_status(pool) == ["committed"]


async def test_started_step_a_tool_cannot_reconcile_is_marked_unknown(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime, claim, turn = await _turn(db, pool)
    tool = CountingTool(Verdict.UNKNOWN)
    await runtime.steps_start(
        claim,
        turn_id=turn.turn_id,
        step_key="u",
        kind=StepKind.TOOL,
        digest=_digest("counting", {}),
    )
    with pytest.raises(UnknownEffect):
        await (await replay_context(runtime, claim, turn)).call_tool("u", tool, {})
    assert tool.runs == 0
    assert await _step_status(pool) == ["unknown"]
    assert (await _kinds(pool))[-1] == "effect.unknown"
    with pytest.raises(UnknownEffect):  # and it stays unknown on every later replay
        await (await replay_context(runtime, claim, turn)).call_tool("u", tool, {})
    assert tool.runs == 0


async def test_replay_with_a_different_request_is_refused(db: ScratchTarget, pool: Pool) -> None:
    runtime, claim, turn = await _turn(db, pool)
    tool = CountingTool()
    await (await replay_context(runtime, claim, turn)).call_tool("a", tool, {"x": 1})
    with pytest.raises(NondeterministicReplay):
        await (await replay_context(runtime, claim, turn)).call_tool("a", tool, {"x": 2})
    assert tool.runs == 1


class CountingModel:
    """A model that answers with how often it was really called."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    async def __call__(self, request: Mapping[str, Any]) -> Any:
        self.calls.append(dict(request))
        return {"reply": f"answer {len(self.calls)}"}


async def test_a_committed_model_call_is_replayed_without_calling_again(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime, claim, turn = await _turn(db, pool)
    model = CountingModel()
    request = {"messages": [{"role": "user", "content": "hi"}]}
    first = await (await replay_context(runtime, claim, turn)).call_model("m1", model, request)
    again = await (await replay_context(runtime, claim, turn)).call_model("m1", model, request)
    assert first == again == {"reply": "answer 1"}
    assert len(model.calls) == 1
    assert await _kinds(pool) == ["turn.started", "model.called", "model.returned"]
    with pytest.raises(NondeterministicReplay):
        await (await replay_context(runtime, claim, turn)).call_model("m1", model, {"other": 1})


async def test_a_model_call_cut_off_before_its_commit_is_called_again(
    db: ScratchTarget, pool: Pool
) -> None:
    """A model call has no effect to repeat: a step left started is simply rerun."""
    runtime, claim, turn = await _turn(db, pool)
    request = {"prompt": "p"}
    await runtime.steps_start(
        claim,
        turn_id=turn.turn_id,
        step_key="m1",
        kind=StepKind.MODEL,
        digest=request_digest(StepKind.MODEL, "model", request),
    )
    model = CountingModel()
    result = await (await replay_context(runtime, claim, turn)).call_model("m1", model, request)
    assert result == {"reply": "answer 1"} and len(model.calls) == 1
    assert await _step_status(pool) == ["committed"]


def _digest(name: str, args: dict[str, Any]) -> str:
    return request_digest(StepKind.TOOL, name, args)


async def test_an_event_at_the_step_end_is_written_by_the_steps_commit(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime, claim, turn = await _turn(db, pool)
    ctx = await replay_context(runtime, claim, turn)

    async def model(request: Mapping[str, Any]) -> dict[str, Any]:
        await ctx.emit_at_step_end("m", {"text": "hel"}, kind="message.delta")
        await ctx.emit_at_step_end("m", {"text": "lo"}, kind="message.delta")
        return {"reply": "hello"}

    await ctx.emit_at_step_end("m", {"text": "before"}, kind="message")  # no open step: at once
    assert await ctx.call_model("m", model, {"q": 1}) == {"reply": "hello"}
    events = (await _events_by_transaction(pool))[-5:]
    assert [kind for kind, _ in events] == [
        "message",
        "model.called",
        "message.delta",
        "message.delta",
        "model.returned",
    ]
    transactions = [xid for _, xid in events]
    assert len({*transactions[2:]}) == 1 and len(set(transactions)) == 3


async def test_an_event_at_the_step_end_goes_with_an_unknown_mark_and_not_with_a_lost_lease(
    db: ScratchTarget, pool: Pool
) -> None:
    runtime, claim, turn = await _turn(db, pool)
    ctx = await replay_context(runtime, claim, turn)

    async def failing(request: Mapping[str, Any]) -> Any:
        await ctx.emit_at_step_end("f", {"text": "partial"}, kind="message.delta")
        raise RuntimeError("the provider hung up")

    with pytest.raises(RuntimeError):
        await ctx.call_model("f", failing, {"q": 1})
    assert [kind for kind, _ in await _events_by_transaction(pool)][-2:] == [
        "message.delta",
        "effect.unknown",
    ]
    written = len(await _events_by_transaction(pool))
    # A worker that lost its lease writes nothing: not the step's end, not its carried event.
    lease = {"live": True}
    fenced = await replay_context(runtime, claim, turn, attempt=3, may_write=lambda: lease["live"])

    async def losing(request: Mapping[str, Any]) -> Any:
        await fenced.emit_at_step_end("g", {"text": "late"}, kind="message.delta")
        lease["live"] = False
        return {"reply": "never recorded"}

    with pytest.raises(LeaseExpired):
        await fenced.call_model("g", losing, {"q": 2})
    assert len(await _events_by_transaction(pool)) == written + 1  # model.called only
