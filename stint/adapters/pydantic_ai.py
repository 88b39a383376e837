"""Run a Pydantic AI ``Agent`` durably: ``STINT_HARNESS=your.module:harness``.

::

    from pydantic_ai import Agent
    from stint.adapters.pydantic_ai import durable

    agent = Agent(instructions="...", tools=[search, save_report])
    harness = durable(agent)        # a harness factory the worker loads

Pydantic AI's own loop runs unchanged; Stint comes in through its documented
extension points, for the length of each turn (``Agent.override``):

- **the model**: a ``FunctionModel`` whose function turns the request (its
  messages, instructions, function and output tools) into a chat-completions
  request and makes it one durable model step (``stint.agents.model_step``:
  quota gate, retries after the wait the provider asks for, usage, token deltas
  as ``message.delta``); the recorded message becomes the ``ModelResponse``, so
  a replay rebuilds the same answer;
- **toolsets**: every toolset of the agent (its function tools, MCP toolsets)
  is wrapped in a ``WrapperToolset`` whose ``call_tool`` is one durable tool
  step, its result journaled before it commits;
- **deferred tools**: a tool declared ``requires_approval`` ends the run with
  ``DeferredToolRequests``; the harness asks each question with ``ctx.ask``
  (the turn parks and frees its slot), and once answered runs the agent again
  with the message history and ``DeferredToolResults``, as Pydantic AI's
  human-in-the-loop guide does.

Messages are mapped for text, tool calls, tool returns and retries; a part the
chat-completions shape cannot carry (an image, a document) fails the turn with
a clear error rather than being dropped.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from stint.adapters.errors import AdapterConfigError, AdapterError
from stint.adapters.parts import AdapterParts, turn_message
from stint.adapters.turn import DurableTurn, bind, current, jsonable
from stint.agents.approval import approved
from stint.agents.model_step import ModelStep
from stint.agents.tools import JournaledTool, tool_result_text
from stint.config.settings import Settings
from stint.worker.context import TurnContext
from stint.worker.failpoints import failpoint
from stint.worker.journal import EffectJournal
from stint.worker.tools import ToolCall

if TYPE_CHECKING:
    from stint.agents.mcp.servers import McpServers, McpTool

try:
    from pydantic_ai import (
        Agent,
        DeferredToolRequests,
        DeferredToolResults,
        FunctionToolset,
        RunContext,
        Tool,
        ToolDenied,
    )
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        RetryPromptPart,
        SystemPromptPart,
        TextPart,
        ThinkingPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel
    from pydantic_ai.tools import ToolDefinition
    from pydantic_ai.toolsets import AbstractToolset, ToolsetTool, WrapperToolset
    from pydantic_ai.usage import RequestUsage
except ImportError as exc:  # the optional dependency
    raise AdapterConfigError(
        "stint.adapters.pydantic_ai needs Pydantic AI: pip install 'stint[pydantic-ai]'"
    ) from exc

__all__ = ["DurableToolset", "PydanticAIHarness", "durable", "stint_model"]


def stint_model(steps: ModelStep) -> FunctionModel:
    """A Pydantic AI model whose every request is Stint's durable model step."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        turn = current()
        result = await steps.call(turn.ctx, turn.model_key(), _request(steps.model, messages, info))
        turn.add_model(result)
        message = result["message"]
        calls = message.get("tool_calls") or []
        turn.asked(str(call["id"]) for call in calls)
        parts: list[Any] = [TextPart(message["content"])] if message.get("content") else []
        parts += [
            ToolCallPart(
                call["function"]["name"], call["function"]["arguments"], tool_call_id=call["id"]
            )
            for call in calls
        ]
        usage = result.get("usage") or {}
        return ModelResponse(
            parts=parts,
            usage=RequestUsage(
                input_tokens=int(usage.get("input_tokens") or 0),
                output_tokens=int(usage.get("output_tokens") or 0),
            ),
            model_name=result.get("model") or steps.model,
        )

    return FunctionModel(respond, model_name=steps.model)


class DurableToolset(WrapperToolset[Any]):
    """Every call of the wrapped toolset's tools is one durable tool step."""

    def __init__(
        self, wrapped: AbstractToolset[Any], journal: EffectJournal, idempotent: frozenset[str]
    ) -> None:
        super().__init__(wrapped)
        self._journal = journal
        self._idempotent = idempotent

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: RunContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        turn = current()
        call_id = ctx.tool_call_id
        if call_id is None:
            raise AdapterError(f"tool {name!r} was called without a tool call id")

        async def effect(_: ToolCall) -> Any:
            return await self.wrapped.call_tool(name, tool_args, ctx, tool)

        step = JournaledTool(name, effect, self._journal, idempotent=name in self._idempotent)
        args = json.loads(json.dumps(tool_args, default=str))
        result = await turn.ctx.call_tool(turn.tool_key(call_id), step, args)
        failpoint("after_tool_step")
        turn.tally.add_tool(name, args, tool_result_text(result))
        return result


class PydanticAIHarness:
    """Input ``{"message": "..."}``; output the agent's output, model calls, usage and tools."""

    def __init__(self, agent: Agent[Any, Any], parts: AdapterParts) -> None:
        self._agent = agent
        self._parts = parts
        self._journal = parts.journal
        self._idempotent = parts.idempotent
        self._mcp = parts.mcp
        self._model = stint_model(parts.steps)
        self._toolsets: list[AbstractToolset[Any]] | None = None
        self._lock = asyncio.Lock()
        given = agent.output_type
        kinds = list(given) if isinstance(given, (list, tuple)) else [given]
        self._output: Any = [*kinds, DeferredToolRequests]

    async def close(self) -> None:
        await self._parts.close()

    async def _ready(self) -> list[AbstractToolset[Any]]:
        """The agent's toolsets, durable; with MCP servers, a toolset of their tools
        joins them once (the servers start on the first turn)."""
        async with self._lock:
            if self._toolsets is None:
                toolsets = list(self._agent.toolsets)
                idempotent = self._idempotent
                if self._mcp is not None:
                    remote = await self._mcp.tools()
                    idempotent |= {t.name for t in remote if t.idempotent}
                    toolsets.append(_mcp_toolset(self._mcp, remote))
                self._toolsets = [DurableToolset(ts, self._journal, idempotent) for ts in toolsets]
            return self._toolsets

    async def run_turn(self, ctx: TurnContext) -> dict[str, Any]:
        text = turn_message(ctx)
        toolsets = await self._ready()
        with (
            bind(DurableTurn(ctx)) as turn,
            self._agent.override(model=self._model, tools=[], toolsets=toolsets),
        ):
            result = await self._agent.run(text, output_type=self._output)
            while isinstance(result.output, DeferredToolRequests):
                if result.output.calls:
                    raise AdapterError("tools deferred for external execution are not supported")
                answers = DeferredToolResults()
                for call in result.output.approvals:
                    answers.approvals[call.tool_call_id] = await _decide(turn, call)
                result = await self._agent.run(
                    message_history=result.all_messages(),
                    deferred_tool_results=answers,
                    output_type=self._output,
                )
        return turn.tally.output(jsonable(result.output))


async def _decide(turn: DurableTurn, call: ToolCallPart) -> bool | ToolDenied:
    """Ask a human about one call waiting for approval (parks the turn until answered)."""
    arguments = call.args_as_dict()
    answer = await turn.ctx.ask(
        turn.approval_key(call.tool_call_id), {"tool": call.tool_name, "arguments": arguments}
    )
    if approved(answer):
        return True
    turn.tally.add_tool(call.tool_name, arguments, "not approved")
    return ToolDenied(f"the user did not approve this call of {call.tool_name}")


def durable(
    agent: Agent[Any, Any], *, idempotent: frozenset[str] = frozenset()
) -> Callable[..., PydanticAIHarness]:
    """A harness factory for ``agent`` (name it in ``STINT_HARNESS``). The model and
    the provider come from Stint's settings (``STINT_MODEL``, ``STINT_MODEL_BASE_URL``,
    ...), and so do MCP servers (``STINT_MCP_SERVERS``: their tools join the agent's);
    ``idempotent`` names tools that may simply run again after a crash."""

    def factory(*, workspace: Path, settings: Settings) -> PydanticAIHarness:
        parts = AdapterParts.from_settings(
            workspace=workspace, settings=settings, idempotent=idempotent
        )
        return PydanticAIHarness(agent, parts)

    return factory


def _mcp_toolset(servers: McpServers, remote: list[McpTool]) -> FunctionToolset[Any]:
    """The MCP servers' tools as one toolset (made durable like the agent's own)."""
    tools = []
    for found in remote:

        async def call(_tool: McpTool = found, **arguments: Any) -> Any:
            return await servers.call(_tool, arguments)

        tool: Tool[Any] = Tool.from_schema(call, found.name, found.description, found.input_schema)
        tool.requires_approval = found.needs_approval
        tools.append(tool)
    return FunctionToolset(tools)


def _request(model: str, messages: list[ModelMessage], info: AgentInfo) -> dict[str, Any]:
    """The request as a chat-completions request (JSON, for the step's digest)."""
    chat: list[dict[str, Any]] = []
    if info.instructions:
        chat.append({"role": "system", "content": info.instructions})
    for message in messages:
        if isinstance(message, ModelRequest):
            chat += [_request_part(part) for part in message.parts]
        else:
            chat.append(_response(message))
    request: dict[str, Any] = {"model": model, "messages": [m for m in chat if m]}
    tools = [*info.function_tools, *info.output_tools]
    if tools:
        request["tools"] = [_tool(definition) for definition in tools]
        if not info.allow_text_output:
            request["tool_choice"] = "required"
    settings: dict[str, Any] = dict(info.model_settings or {})
    for name in ("temperature", "top_p", "max_tokens"):
        if settings.get(name) is not None:
            request[name] = settings[name]
    return request


def _request_part(part: Any) -> dict[str, Any]:
    if isinstance(part, SystemPromptPart):
        return {"role": "system", "content": part.content}
    if isinstance(part, UserPromptPart):
        return {"role": "user", "content": _text(part.content)}
    if isinstance(part, ToolReturnPart):
        return {
            "role": "tool",
            "tool_call_id": part.tool_call_id,
            "content": part.model_response_str(),
        }
    if isinstance(part, RetryPromptPart):
        if part.tool_name is None:
            return {"role": "user", "content": part.model_response()}
        return {"role": "tool", "tool_call_id": part.tool_call_id, "content": part.model_response()}
    raise AdapterError(f"a {type(part).__name__} cannot be sent as a chat-completions message")


def _response(message: ModelResponse) -> dict[str, Any]:
    text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
    calls = [
        {
            "id": p.tool_call_id,
            "type": "function",
            "function": {"name": p.tool_name, "arguments": p.args_as_json_str()},
        }
        for p in message.parts
        if isinstance(p, ToolCallPart)
    ]
    unknown = [
        p for p in message.parts if not isinstance(p, (TextPart, ToolCallPart, ThinkingPart))
    ]
    if unknown:
        raise AdapterError(f"a {type(unknown[0]).__name__} cannot be sent back to the model")
    out: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        out["tool_calls"] = calls
    return out


def _text(content: str | Sequence[Any]) -> str:
    if isinstance(content, str):
        return content
    if all(isinstance(item, str) for item in content):
        return "".join(content)
    raise AdapterError("only text user prompts can be sent as chat-completions messages")


def _tool(definition: ToolDefinition) -> dict[str, Any]:
    function: dict[str, Any] = {
        "name": definition.name,
        "parameters": definition.parameters_json_schema,
    }
    if definition.description:
        function["description"] = definition.description
    return {"type": "function", "function": function}
