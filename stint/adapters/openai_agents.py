"""Run an OpenAI Agents SDK ``Agent`` durably: ``STINT_HARNESS=your.module:harness``.

::

    from agents import Agent, function_tool
    from stint.adapters.openai_agents import durable

    agent = Agent(name="support", instructions="...", tools=[lookup, refund])
    harness = durable(agent)        # a harness factory the worker loads

The SDK's own loop (``Runner.run``: tools, handoffs, guardrails, approvals)
runs unchanged; Stint comes in through three of its extension points:

- **the model** (``RunConfig.model_provider``): a ``ModelProvider`` whose
  ``Model`` makes every model call one durable step (``stint.agents.model_step``:
  quota gate, retries after the wait the provider asks for, usage, token deltas
  as ``message.delta``). The SDK's request is turned into a chat-completions
  request and the recorded message back into output items with the SDK's own
  chat-completions converter, so a replay rebuilds the same answer;
- **function tools**: each ``FunctionTool``'s ``on_invoke_tool`` is wrapped so a
  call is one durable tool step, its result journaled before it commits;
- **approvals**: a tool declared ``needs_approval`` interrupts the run as the
  SDK does; the harness asks the question with ``ctx.ask`` (the turn parks and
  frees its slot), and once answered approves or rejects it on the run's
  ``RunState`` and resumes the run, as the SDK's human-in-the-loop guide does.

Handoff targets are wrapped the same way. Guardrails are functions the SDK
runs each attempt; one that calls another agent should run it through
``durable`` too, or its model calls are not steps.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import AsyncIterator, Callable
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
from stint.worker.tools import ToolCall

if TYPE_CHECKING:
    from stint.agents.mcp.servers import McpServers, McpTool

try:
    from agents import (
        Agent,
        FunctionTool,
        Handoff,
        Model,
        ModelProvider,
        ModelResponse,
        ModelSettings,
        ModelTracing,
        RunConfig,
        Runner,
        RunResult,
        Tool,
        Usage,
    )
    from agents.models.chatcmpl_converter import Converter
    from agents.tool_context import ToolContext
    from openai import omit
    from openai.types.chat import ChatCompletionMessage
except ImportError as exc:  # the optional dependency
    raise AdapterConfigError(
        "stint.adapters.openai_agents needs the OpenAI Agents SDK: "
        "pip install 'stint[openai-agents]'"
    ) from exc

__all__ = ["OpenAIAgentsHarness", "StintModel", "StintModelProvider", "durable"]

_MAX_TURNS = 10


class StintModel(Model):
    """An SDK ``Model`` whose every call is Stint's durable model step."""

    def __init__(self, steps: ModelStep, name: str | None) -> None:
        self._steps = steps
        self._name = name or steps.model

    async def get_response(
        self,
        system_instructions: str | None,
        input: Any,
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Handoff[Any, Any]],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None = None,
        conversation_id: str | None = None,
        prompt: Any = None,
    ) -> ModelResponse:
        turn = current()
        request = self._request(
            system_instructions, input, model_settings, tools, output_schema, handoffs
        )
        result = await self._steps.call(turn.ctx, turn.model_key(), request)
        turn.add_model(result)
        message = ChatCompletionMessage.model_validate(result["message"])
        turn.asked(call.id for call in message.tool_calls or ())
        usage = result.get("usage") or {}
        prompt_tokens = int(usage.get("input_tokens") or 0)
        completion_tokens = int(usage.get("output_tokens") or 0)
        return ModelResponse(
            output=Converter.message_to_output_items(message),
            usage=Usage(
                requests=1,
                input_tokens=prompt_tokens,
                output_tokens=completion_tokens,
                total_tokens=prompt_tokens + completion_tokens,
            ),
            response_id=None,
        )

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        """Not offered: the harness runs ``Runner.run``; tokens reach followers as
        ``message.delta`` events from inside the durable step instead."""
        raise AdapterError("run the agent with Runner.run: Stint streams tokens as events")

    def _request(
        self,
        system_instructions: str | None,
        input: Any,
        settings: ModelSettings,
        tools: list[Tool],
        output_schema: Any,
        handoffs: list[Handoff[Any, Any]],
    ) -> dict[str, Any]:
        """The SDK's request as a chat-completions request (JSON, for the step's digest)."""
        messages: list[Any] = Converter.items_to_messages(input, model=self._name)
        if system_instructions:
            messages.insert(0, {"role": "system", "content": system_instructions})
        request: dict[str, Any] = {"model": self._name, "messages": messages}
        schemas = [Converter.tool_to_openai(tool) for tool in tools]
        schemas += [Converter.convert_handoff_tool(handoff) for handoff in handoffs]
        if schemas:
            request["tools"] = schemas
            if settings.parallel_tool_calls is not None:
                request["parallel_tool_calls"] = settings.parallel_tool_calls
            choice = Converter.convert_tool_choice(settings.tool_choice)
            if choice is not omit:
                request["tool_choice"] = choice
        response_format = Converter.convert_response_format(output_schema)
        if response_format is not omit:
            request["response_format"] = response_format
        for name in ("temperature", "top_p", "max_tokens"):
            value = getattr(settings, name)
            if value is not None:
                request[name] = value
        canonical: dict[str, Any] = json.loads(json.dumps(request, default=str))
        return canonical


class StintModelProvider(ModelProvider):
    """Hands the SDK a durable ``StintModel`` for whatever model name an agent names."""

    def __init__(self, steps: ModelStep) -> None:
        self._steps = steps

    def get_model(self, model_name: str | None) -> Model:
        return StintModel(self._steps, model_name)


class OpenAIAgentsHarness:
    """Input ``{"message": "..."}``; output the final output, model calls, usage and tools."""

    def __init__(
        self, agent: Agent[Any], parts: AdapterParts, *, max_turns: int = _MAX_TURNS
    ) -> None:
        self._parts = parts
        self._journal = parts.journal
        self._idempotent = parts.idempotent
        self._given = agent
        self._mcp = parts.mcp
        wrapped = self._wrap(agent, {})  # refuses an agent it cannot run, at load
        self._agent: Agent[Any] | None = wrapped if parts.mcp is None else None
        self._lock = asyncio.Lock()
        self._config = RunConfig(
            model_provider=StintModelProvider(parts.steps), tracing_disabled=True
        )
        self._max_turns = max_turns

    async def close(self) -> None:
        await self._parts.close()

    async def run_turn(self, ctx: TurnContext) -> dict[str, Any]:
        text = turn_message(ctx)
        agent = await self._ready()
        with bind(DurableTurn(ctx)) as turn:
            result = await self._run(agent, text)
            while result.interruptions:
                state = result.to_state()
                for item in result.interruptions:
                    await self._decide(turn, state, item)
                result = await self._run(agent, state)
            output = turn.tally.output(jsonable(result.final_output))
        output["agent"] = result.last_agent.name
        return output

    async def _run(self, agent: Agent[Any], given: Any) -> RunResult:
        return await Runner.run(agent, given, run_config=self._config, max_turns=self._max_turns)

    async def _ready(self) -> Agent[Any]:
        """The wrapped agent; with MCP servers, their tools join the starting agent's
        once (the servers start on the first turn)."""
        async with self._lock:
            if self._agent is None:
                assert self._mcp is not None
                remote = await self._mcp.tools()
                self._idempotent = self._idempotent | {t.name for t in remote if t.idempotent}
                extra = [_mcp_function_tool(self._mcp, t) for t in remote]
                self._agent = self._wrap(self._given.clone(tools=[*self._given.tools, *extra]), {})
            return self._agent

    async def _decide(self, turn: DurableTurn, state: Any, item: Any) -> None:
        """Ask a human about one interrupted tool call (parks the turn until answered)."""
        raw = item.raw_item
        call_id = str(_field(raw, "call_id") or _field(raw, "id"))
        arguments = _field(raw, "arguments") or "{}"
        try:
            shown: Any = json.loads(arguments)
        except json.JSONDecodeError:
            shown = arguments
        answer = await turn.ctx.ask(
            turn.approval_key(call_id), {"tool": item.tool_name, "arguments": shown}
        )
        if approved(answer):
            state.approve(item)
        else:
            turn.tally.add_tool(str(item.tool_name), shown, "not approved")
            state.reject(item)

    def _wrap(self, agent: Agent[Any], seen: dict[int, Agent[Any]]) -> Agent[Any]:
        """A clone of ``agent`` (and of every agent it hands off to) with durable tools."""
        done = seen.get(id(agent))
        if done is not None:
            return done
        if isinstance(agent.model, Model):
            raise AdapterConfigError(
                f"agent {agent.name!r} carries a Model instance; give it a model name "
                "(or none): Stint supplies the model"
            )
        clone = agent.clone()
        seen[id(agent)] = clone
        clone.tools = [self._tool(tool) for tool in agent.tools]
        handoffs: list[Any] = []
        for target in agent.handoffs:
            if isinstance(target, Agent):
                handoffs.append(self._wrap(target, seen))
            elif isinstance(target, Handoff):
                handoffs.append(self._handoff(target, seen))
            else:
                raise AdapterConfigError(f"agent {agent.name!r}: unknown handoff {target!r}")
        clone.handoffs = handoffs
        return clone

    def _handoff(
        self, handoff: Handoff[Any, Any], seen: dict[int, Agent[Any]]
    ) -> Handoff[Any, Any]:
        invoke = handoff.on_invoke_handoff

        async def wrapped(context: Any, arguments: str) -> Agent[Any]:
            return self._wrap(await invoke(context, arguments), seen)

        return dataclasses.replace(handoff, on_invoke_handoff=wrapped)

    def _tool(self, tool: Tool) -> Tool:
        if not isinstance(tool, FunctionTool):
            return tool  # hosted tools run at the provider; nothing runs here
        invoke = tool.on_invoke_tool
        journal = self._journal
        idempotent = tool.name in self._idempotent

        async def durable_invoke(context: ToolContext[Any], arguments: str) -> Any:
            turn = current()

            async def effect(_: ToolCall) -> Any:
                return await invoke(context, arguments)

            step = JournaledTool(tool.name, effect, journal, idempotent=idempotent)
            result = await turn.ctx.call_tool(
                turn.tool_key(context.tool_call_id), step, {"arguments": arguments}
            )
            failpoint("after_tool_step")
            turn.tally.add_tool(tool.name, _parsed(arguments), tool_result_text(result))
            return result

        return dataclasses.replace(tool, on_invoke_tool=durable_invoke)


def durable(
    agent: Agent[Any], *, max_turns: int = _MAX_TURNS, idempotent: frozenset[str] = frozenset()
) -> Callable[..., OpenAIAgentsHarness]:
    """A harness factory for ``agent`` (name it in ``STINT_HARNESS``). The model and
    the provider come from Stint's settings (``STINT_MODEL``, ``STINT_MODEL_BASE_URL``,
    ...), and so do MCP servers (``STINT_MCP_SERVERS``: their tools join the starting
    agent's); ``idempotent`` names tools that may simply run again after a crash."""

    def factory(*, workspace: Path, settings: Settings) -> OpenAIAgentsHarness:
        parts = AdapterParts.from_settings(
            workspace=workspace, settings=settings, idempotent=idempotent
        )
        return OpenAIAgentsHarness(agent, parts, max_turns=max_turns)

    return factory


def _mcp_function_tool(servers: McpServers, tool: McpTool) -> FunctionTool:
    """An MCP server's tool as an SDK function tool (made durable like any other)."""

    async def invoke(context: ToolContext[Any], arguments: str) -> Any:
        return await servers.call(tool, json.loads(arguments or "{}"))

    return FunctionTool(
        name=tool.name,
        description=tool.description,
        params_json_schema=tool.input_schema,
        on_invoke_tool=invoke,
        strict_json_schema=False,
        needs_approval=tool.needs_approval,
    )


def _field(raw: Any, name: str) -> Any:
    return raw.get(name) if isinstance(raw, dict) else getattr(raw, name, None)


def _parsed(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return arguments
