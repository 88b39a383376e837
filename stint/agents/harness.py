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
from typing import TYPE_CHECKING, Any

from stint.agents.approval import approved
from stint.agents.config import AgentConfig
from stint.agents.errors import AgentConfigError, AgentError, ToolArgumentsError, TooManyIterations
from stint.agents.mcp import open_mcp
from stint.agents.memory import History, trim_window
from stint.agents.model_step import ModelStep
from stint.agents.provider import ChatProvider
from stint.agents.tally import TurnTally
from stint.agents.tools import ToolRegistry, parse_object, tool_result_text
from stint.config.settings import Settings
from stint.worker.context import TurnContext
from stint.worker.failpoints import failpoint
from stint.worker.journal import EffectJournal
from stint.worker.tools import Tool

if TYPE_CHECKING:
    from stint.agents.mcp.servers import McpServers, McpTool

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
        mcp: McpServers | None = None,
    ) -> None:
        self._config = config
        self._tools = tools
        self._journal = journal
        self._provider = provider
        self._model = ModelStep(config, provider)
        self._mcp = mcp

    async def close(self) -> None:
        """Close the provider client's connections and stop the MCP servers (the worker
        calls it when it drains; tests and the demo too)."""
        await self._model.close()
        if self._mcp is not None:
            await self._mcp.close()

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
        remote = {t.name: t for t in await self._mcp.tools()} if self._mcp else {}
        for i in range(self._config.max_iterations):
            key = f"{ctx.turn_id}:model:{i}"
            request = self._request(history, turn, remote)
            result = await self._model.call(ctx, key, request)
            tally.add_model(result)
            message = result["message"]
            turn.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                await ctx.remember(turn)
                return tally.output(message.get("content") or "", history)
            for j, call in enumerate(calls):
                content = await self._run_tool(
                    ctx, f"{ctx.turn_id}:tool:{i}.{j}", call, tally, remote
                )
                turn.append({"role": "tool", "tool_call_id": call["id"], "content": content})
        raise TooManyIterations(
            f"no final answer after {self._config.max_iterations} model calls "
            "(STINT_AGENT_MAX_ITERATIONS)"
        )

    def _request(
        self, history: History, turn: list[dict[str, Any]], remote: dict[str, McpTool]
    ) -> dict[str, Any]:
        system = (
            [{"role": "system", "content": self._config.system_prompt}]
            if self._config.system_prompt
            else []
        )
        request: dict[str, Any] = {
            "model": self._provider.model,
            "messages": [*system, *history.messages, *turn],
        }
        schemas = [*self._tools.schemas(), *(t.schema() for t in remote.values())]
        if schemas:
            request["tools"] = schemas
        return request

    async def _run_tool(
        self,
        ctx: TurnContext,
        key: str,
        call: dict[str, Any],
        tally: TurnTally,
        remote: dict[str, McpTool],
    ) -> str:
        """The tool message content for one call; a bad call is the model's to fix."""
        name = str(call["function"]["name"])
        raw = str(call["function"]["arguments"])
        try:
            found = self._resolve(name, raw, remote)
        except ToolArgumentsError as exc:
            tally.add_tool(name, None, f"error: {exc}")
            return f"error: {exc}. Call the tool again with valid arguments."
        if found is None:
            known = ", ".join([*(t.name for t in self._tools), *remote]) or "none"
            tally.add_tool(name, None, f"error: no tool named {name!r}")
            return f"error: there is no tool named {name!r} (tools: {known})"
        args, needs_approval, tool = found
        if needs_approval:
            answer = await ctx.ask(f"{key}:approval", {"tool": name, "arguments": args})
            if not approved(answer):
                tally.add_tool(name, args, "not approved")
                return f"error: the user did not approve this call of {name} (answer: {answer!r})"
        result = await ctx.call_tool(key, tool, args)
        failpoint("after_tool_step")
        content = tool_result_text(result)
        tally.add_tool(name, args, content)
        return content

    def _resolve(
        self, name: str, raw: str, remote: dict[str, McpTool]
    ) -> tuple[dict[str, Any], bool, Tool] | None:
        """The call's checked arguments, whether it waits for approval, and the durable
        tool that runs it: a registered tool, else an MCP server's; None: no such tool."""
        tool = self._tools.get(name)
        if tool is not None:
            return tool.parse(raw), tool.needs_approval, tool.durable(self._journal)
        found = remote.get(name)
        if found is None or self._mcp is None:
            return None
        args = parse_object(name, raw)
        return args, found.needs_approval, self._mcp.durable(found, self._journal)


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
        mcp=open_mcp(settings),
    )
