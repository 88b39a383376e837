"""The scripted fixture harness: the load test's and the demo's workload.

Per turn: append and fsync one uniquely keyed native effect, then wait
``min_wait_ms`` or until the named gate opens, whichever is later. Gates are
files under ``<workspace>/gates/`` so a test in another process can open them.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from stint.worker.context import TurnContext
from stint.worker.journal import EffectJournal
from stint.worker.tools import JournalTool

__all__ = ["ScriptedHarness", "gate_path", "harness", "open_gate"]

_GATE_POLL_SECONDS = 0.02


def gate_path(workspace: Path, name: str) -> Path:
    if not name or "/" in name or name.startswith("."):
        raise ValueError(f"bad gate name {name!r}")
    return workspace / "gates" / name


def open_gate(workspace: Path, name: str) -> None:
    """Open a gate: every turn waiting on it may finish (after its min wait)."""
    path = gate_path(workspace, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


class ScriptedHarness:
    """Input: ``{"min_wait_ms": 250, "gate": "name"?, "ask": "question"?,
    "sleep_s": 2.5?, "wait_for": "name"?, "timeout_s": 10?}``.

    With ``ask`` the turn performs its effect, waits, then asks and parks until
    ``stint answer``; the answer ends up in the turn's output. With ``sleep_s``
    it then sleeps durably (``ctx.sleep``, its slot free); with ``wait_for`` it
    then waits for that signal (``ctx.wait_for``, at most ``timeout_s``) and
    the signal's payload (null after a timeout) ends up in the output. With
    ``spawn: {"count": n, "input": {...}, "wait": "all"|"any", "on_cancel": ...}``
    it then starts n child sessions with that input in one statement
    (``ctx.spawn_many``; with ``"one_by_one": true``, one ``ctx.spawn`` each)
    and joins them (``ctx.join``, at most ``timeout_s``); their ends are the
    output's ``children``. A child's input may spawn in turn: a tree.
    """

    def __init__(self, *, workspace: Path) -> None:
        self._workspace = workspace
        self._tool = JournalTool(EffectJournal(workspace / "journals"))

    async def run_turn(self, ctx: TurnContext) -> Any:
        wait_ms = int(ctx.input.get("min_wait_ms", 250))
        started = time.monotonic()
        effect = await ctx.call_tool(
            f"effect-{ctx.turn_id}", self._tool, {"turn_id": str(ctx.turn_id)}
        )
        deadline = started + wait_ms / 1000
        gate = ctx.input.get("gate")
        if gate is not None:
            path = gate_path(self._workspace, str(gate))
            # The gate is opened by another process, so there is no event to await.
            while not path.exists():  # noqa: ASYNC110
                await asyncio.sleep(_GATE_POLL_SECONDS)
        remaining = deadline - time.monotonic()
        if remaining > 0:
            await asyncio.sleep(remaining)
        output: dict[str, Any] = {"effect": effect["key"], "waited_ms": wait_ms}
        question = ctx.input.get("ask")
        if question is not None:
            output["answer"] = await ctx.ask(f"ask-{ctx.turn_id}", question)
        sleep_s = ctx.input.get("sleep_s")
        if sleep_s is not None:
            await ctx.sleep(float(sleep_s))
            output["slept_s"] = sleep_s
        signal_name = ctx.input.get("wait_for")
        if signal_name is not None:
            timeout = ctx.input.get("timeout_s")
            got = await ctx.wait_for(
                str(signal_name), timeout=None if timeout is None else float(timeout)
            )
            output["signal"] = None if got is None else {"id": got.id, "payload": got.payload}
        spawn = ctx.input.get("spawn")
        if spawn is not None:
            output["children"] = await _delegate(ctx, spawn)
        return output


async def _delegate(ctx: TurnContext, spawn: dict[str, Any]) -> list[dict[str, Any]]:
    """Start ``spawn["count"]`` children and join them; their ends as JSON."""
    child_input = dict(spawn.get("input", {}))
    on_cancel = str(spawn.get("on_cancel", "cascade"))
    count = int(spawn.get("count", 1))
    if spawn.get("one_by_one"):  # the statement per child that spawn_many replaced
        children = [await ctx.spawn(child_input, on_cancel=on_cancel) for _ in range(count)]
    else:
        children = await ctx.spawn_many([child_input] * count, on_cancel=on_cancel)
    timeout = ctx.input.get("timeout_s")
    ends = await ctx.join(
        children,
        wait=str(spawn.get("wait", "all")),
        timeout=None if timeout is None else float(timeout),
    )
    return [
        {"id": str(end.id), "status": end.status, "output": end.output, "error": end.error}
        for end in ends
    ]


def harness(*, workspace: Path) -> ScriptedHarness:
    """Factory named by the default ``--harness worker.scripted:harness``."""
    return ScriptedHarness(workspace=workspace)
