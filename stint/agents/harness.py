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
from pathlib import Path
from typing import Any

from stint.agents.approval import approved
from stint.agents.config import AgentConfig
from stint.agents.errors import AgentConfigError, AgentError, ToolArgumentsError, TooManyIterations
from stint.agents.memory import History, trim_window
from stint.agents.model_step import ModelStep
from stint.agents.provider import ChatProvider
from stint.agents.tally import TurnTally
from stint.agents.tools import ToolRegistry, tool_result_text
from stint.config.settings import Settings
from stint.worker.context import TurnContext
from stint.worker.failpoints import failpoint
from stint.worker.journal import EffectJournal

__all__ = ["ChatHarness", "chat", "load_tools"]


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
        self._model = ModelStep(config, provider)

    async def close(self) -> None:
        """Close the provider client's connections (tests and the demo; a worker exits)."""
        await self._model.close()

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
        tally = TurnTally()
        for i in range(self._config.max_iterations):
            key = f"{ctx.turn_id}:model:{i}"
            request = self._request(history, turn)
            result = await self._model.call(ctx, key, request)
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

    async def _run_tool(
        self, ctx: TurnContext, key: str, call: dict[str, Any], tally: TurnTally
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
            if not approved(answer):
                tally.add_tool(name, args, "not approved")
                return f"error: the user did not approve this call of {name} (answer: {answer!r})"
        result = await ctx.call_tool(key, tool.durable(self._journal), args)
        failpoint("after_tool_step")
        content = tool_result_text(result)
        tally.add_tool(name, args, content)
        return content


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
