"""The agents harness: a chat-completions agent loop whose every call is a durable step.

Per turn: load the session's recent conversation, then loop — call the model
(``ctx.call_model``, streaming its tokens to followers), run the tools it asked
for (``ctx.call_tool``; an approval-gated tool first parks the turn on
``ctx.ask``), hand their results back — until the model answers without tool
calls or the turn reaches ``max_iterations`` model calls. The turn's messages
are then added to the conversation. Step keys are derived from the turn id and
the loop's position, so a replayed turn asks for exactly the same steps and
gets the recorded answers back without calling the model or a tool again.
"""

from __future__ import annotations

import importlib
from functools import partial
from pathlib import Path
from typing import Any

from stint.agents.config import AgentConfig
from stint.agents.errors import AgentConfigError, AgentError, ToolArgumentsError, TooManyIterations
from stint.agents.memory import History, trim_window
from stint.agents.provider import ChatProvider, Retry
from stint.agents.quota_gate import QuotaGate, estimate_tokens
from stint.agents.stream import DeltaCoalescer
from stint.agents.tools import ToolRegistry, tool_result_text
from stint.config.settings import Settings
from stint.worker.context import TurnContext
from stint.worker.failpoints import failpoint
from stint.worker.journal import EffectJournal

__all__ = ["ChatHarness", "chat", "load_tools"]

_APPROVALS = frozenset({"yes", "y", "approve", "approved", "ok", "true"})
_SHOWN_RESULT = 300  # characters of each tool result kept in the turn's output
_USAGE = ("input_tokens", "output_tokens", "cached_tokens")


class ChatHarness:
    """Input ``{"message": "..."}``; output the reply, tool calls, usage and history cut."""

    def __init__(
        self,
        *,
        config: AgentConfig,
        tools: ToolRegistry,
        journal: EffectJournal,
        provider: ChatProvider,
    ) -> None:
        self._config = config
        self._tools = tools
        self._journal = journal
        self._provider = provider

    async def close(self) -> None:
        """Close the provider client's connections (tests and the demo; a worker exits)."""
        await self._provider.close()

    async def run_turn(self, ctx: TurnContext) -> dict[str, Any]:
        text = ctx.input.get("message")
        if not isinstance(text, str) or not text:
            raise AgentError('the turn input must be {"message": "<text>"}')
        history = trim_window(
            await ctx.history(limit=self._config.history_messages),
            limit=self._config.history_messages,
        )
        if history.dropped:
            await ctx.emit(history.as_json(), kind="history.truncated")
        turn: list[dict[str, Any]] = [{"role": "user", "content": text}]
        tally = _Tally()
        for i in range(self._config.max_iterations):
            key = f"{ctx.turn_id}:model:{i}"
            request = self._request(history, turn)
            result = await ctx.call_model(
                key, partial(self._call_model, ctx, key), request, name=self._provider.model
            )
            tally.add_model(result)
            message = result["message"]
            turn.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                await ctx.remember(turn)
                return tally.output(message.get("content") or "", history)
            for j, call in enumerate(calls):
                content = await self._run_tool(ctx, f"{ctx.turn_id}:tool:{i}.{j}", call, tally)
                turn.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        raise TooManyIterations(
            f"no final answer after {self._config.max_iterations} model calls "
            "(STINT_AGENT_MAX_ITERATIONS)"
        )

    def _request(self, history: History, turn: list[dict[str, Any]]) -> dict[str, Any]:
        system = (
            [{"role": "system", "content": self._config.system_prompt}]
            if self._config.system_prompt
            else []
        )
        request: dict[str, Any] = {
            "model": self._provider.model,
            "messages": [*system, *history.messages, *turn],
        }
        if len(self._tools):
            request["tools"] = self._tools.schemas()
        return request

    async def _call_model(
        self, ctx: TurnContext, key: str, request: dict[str, Any]
    ) -> dict[str, Any]:
        """The body of one model step: stream, coalescing deltas into events."""

        async def write(payload: dict[str, Any]) -> None:
            await ctx.emit(payload, kind="message.delta")

        deltas = DeltaCoalescer(
            write,
            base={"step_key": key, "attempt": ctx.attempt},
            flush_seconds=self._config.stream.flush_seconds,
            flush_deltas=self._config.stream.flush_deltas,
        )

        async def on_retry(retry: Retry) -> None:
            await deltas.new_try(retry.attempt + 1)
            await ctx.emit(
                {
                    "step_key": key,
                    "attempt": ctx.attempt,
                    "try": retry.attempt,
                    "reason": retry.reason,
                    "status": retry.status,
                    "delay_s": round(retry.delay, 3),
                },
                kind="model.retried",
            )

        quota = self._config.quota
        gate = (
            None if quota is None else QuotaGate(ctx, quota, key, estimate_tokens(request, quota))
        )
        try:
            result = await self._provider.complete(
                request, on_delta=deltas.add, on_retry=on_retry, quota=gate
            )
        except BaseException:
            await deltas.abort()
            raise
        await deltas.close()
        result["delta_events"] = deltas.events
        return result

    async def _run_tool(
        self, ctx: TurnContext, key: str, call: dict[str, Any], tally: _Tally
    ) -> str:
        """The tool message content for one call; a bad call is the model's to fix."""
        name = str(call["function"]["name"])
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(t.name for t in self._tools) or "none"
            tally.add_tool(name, None, f"error: no tool named {name!r}")
            return f"error: there is no tool named {name!r} (tools: {known})"
        try:
            args = tool.parse(str(call["function"]["arguments"]))
        except ToolArgumentsError as exc:
            tally.add_tool(name, None, f"error: {exc}")
            return f"error: {exc}. Call the tool again with valid arguments."
        if tool.needs_approval:
            answer = await ctx.ask(f"{key}:approval", {"tool": name, "arguments": args})
            if not _approved(answer):
                tally.add_tool(name, args, "not approved")
                return f"error: the user did not approve this call of {name} (answer: {answer!r})"
        result = await ctx.call_tool(key, tool.durable(self._journal), args)
        failpoint("after_tool_step")
        content = tool_result_text(result)
        tally.add_tool(name, args, content)
        return content


class _Tally:
    """What the turn did, for its output: model calls, usage sums, tool calls."""

    def __init__(self) -> None:
        self.model_calls = 0
        self.retries = 0
        self.usage: dict[str, int | None] = dict.fromkeys(_USAGE)
        self.tools: list[dict[str, Any]] = []

    def add_model(self, result: dict[str, Any]) -> None:
        self.model_calls += 1
        self.retries += int(result.get("retries") or 0)
        for key in _USAGE:
            value = (result.get("usage") or {}).get(key)
            if value is not None:
                self.usage[key] = (self.usage[key] or 0) + int(value)

    def add_tool(self, name: str, args: dict[str, Any] | None, result: str) -> None:
        self.tools.append({"name": name, "arguments": args, "result": result[:_SHOWN_RESULT]})

    def output(self, reply: str, history: History) -> dict[str, Any]:
        return {
            "reply": reply,
            "model_calls": self.model_calls,
            "retries": self.retries,
            "usage": self.usage,
            "tool_calls": self.tools,
            "history": history.as_json(),
        }


def _approved(answer: Any) -> bool:
    if isinstance(answer, bool):
        return answer
    if isinstance(answer, dict):
        return answer.get("approved") is True
    return isinstance(answer, str) and answer.strip().lower() in _APPROVALS


def load_tools(spec: str) -> ToolRegistry:
    """The ``module:object`` tool registry named by STINT_AGENT_TOOLS."""
    module_name, _, attr = spec.partition(":")
    try:
        registry = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError, ValueError) as exc:
        raise AgentConfigError(f"STINT_AGENT_TOOLS={spec!r} names no tool registry: {exc}") from exc
    if not isinstance(registry, ToolRegistry):
        raise AgentConfigError(f"STINT_AGENT_TOOLS={spec!r} is not a ToolRegistry")
    return registry


def chat(*, workspace: Path, settings: Settings) -> ChatHarness:
    """The factory ``STINT_HARNESS=stint.agents:chat`` names."""
    config = AgentConfig.from_settings(settings)
    return ChatHarness(
        config=config,
        tools=load_tools(config.tools),
        journal=EffectJournal(workspace / "journals"),
        provider=ChatProvider(config.model),
    )
