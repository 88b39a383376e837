"""The agents harness's tool registry: async functions the model may call.

A tool's JSON schema comes from its type hints (a pydantic model is built from
the signature), its description from its docstring. Arguments the model sends
are parsed and validated here; what fails goes back to the model as a tool
error instead of failing the turn.

Every tool runs as a durable step (``ctx.call_tool``) and its result is
appended to the session's fsync'd effect journal before the step commits, so a
crash between the two is reconciled from the journal instead of running the
tool again. A tool whose effect may have happened without reaching the journal
is reported as an unknown effect, unless it is declared ``idempotent`` (safe to
run again). The native journal tool's effect *is* the journal line.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import typing
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import to_jsonable_python

from stint.agents.errors import ToolArgumentsError
from stint.worker.journal import EffectJournal
from stint.worker.tools import JournalTool, Reconciled, Tool, ToolCall, Verdict

__all__ = [
    "AgentTool",
    "JournaledTool",
    "ToolRegistry",
    "arguments_of",
    "parse_object",
    "tool_result_text",
]

ToolFunction = Callable[..., Awaitable[Any]]


@dataclass(frozen=True)
class AgentTool:
    """One registered tool: what the model is told, and how a call is checked and run."""

    name: str
    description: str
    arguments: type[BaseModel]
    needs_approval: bool
    idempotent: bool
    function: ToolFunction | None  # None: the native journal tool

    def schema(self) -> dict[str, Any]:
        """The chat-completions ``tools`` entry."""
        parameters = self.arguments.model_json_schema()
        parameters.pop("title", None)
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": parameters,
            },
        }

    def parse(self, raw: str) -> dict[str, Any]:
        """The model's argument text as validated, normalised JSON arguments."""
        value = parse_object(self.name, raw)
        try:
            parsed = self.arguments.model_validate(value)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in e['loc']) or 'arguments'}: {e['msg']}"
                for e in exc.errors()
            )
            raise ToolArgumentsError(f"arguments for {self.name} do not fit: {problems}") from None
        dumped: dict[str, Any] = parsed.model_dump(mode="json")
        return dumped

    def durable(self, journal: EffectJournal) -> Tool:
        """The Stint tool that runs one call of this tool at most once."""
        if self.function is None:
            return _NamedJournalTool(self.name, journal)
        return JournaledTool(self.name, self._answer, journal, idempotent=self.idempotent)

    async def _answer(self, call: ToolCall) -> Any:
        """The function's result; its own failure is its answer, for the model."""
        assert self.function is not None
        try:
            return await self.function(**dict(call.args))
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}


class ToolRegistry:
    """Tools by name, in registration order (the order the model sees).

    Each tool's schema is built once, when it is registered: pydantic builds a
    JSON schema anew on every ``model_json_schema()`` call, and every model call
    of every turn sends them all.
    """

    def __init__(self) -> None:
        self._tools: dict[str, AgentTool] = {}
        self._schemas: list[dict[str, Any]] = []

    @overload
    def tool(self, function: ToolFunction, /) -> ToolFunction: ...

    @overload
    def tool(
        self,
        function: None = None,
        /,
        *,
        name: str | None = None,
        needs_approval: bool = False,
        idempotent: bool = False,
    ) -> Callable[[ToolFunction], ToolFunction]: ...

    def tool(
        self,
        function: ToolFunction | None = None,
        /,
        *,
        name: str | None = None,
        needs_approval: bool = False,
        idempotent: bool = False,
    ) -> ToolFunction | Callable[[ToolFunction], ToolFunction]:
        """Register an async function: ``@tools.tool`` or ``@tools.tool(needs_approval=True)``.

        ``needs_approval``: each call waits for a human answer (``stint answer``)
        and the turn parks meanwhile. ``idempotent``: running it twice does no
        harm, so a call cut short by a crash may simply run again.
        """

        def register(fn: ToolFunction) -> ToolFunction:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(f"tool {fn.__name__} must be an async function")
            tool_name = name or fn.__name__
            self._add(
                AgentTool(
                    name=tool_name,
                    description=_description(fn),
                    arguments=_arguments_model(tool_name, fn),
                    needs_approval=needs_approval,
                    idempotent=idempotent,
                    function=fn,
                )
            )
            return fn

        return register(function) if function is not None else register

    def journal(
        self,
        name: str,
        arguments: type[BaseModel],
        *,
        description: str,
        needs_approval: bool = False,
    ) -> None:
        """Register the native journal tool under ``name``: a call appends its
        validated arguments to the session's fsync'd journal."""
        self._add(
            AgentTool(
                name=name,
                description=description,
                arguments=arguments,
                needs_approval=needs_approval,
                idempotent=False,
                function=None,
            )
        )

    def get(self, name: str) -> AgentTool | None:
        return self._tools.get(name)

    def __iter__(self) -> typing.Iterator[AgentTool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def schemas(self) -> list[dict[str, Any]]:
        """The ``tools`` entries, in order; shared by every request: read, never change them."""
        return list(self._schemas)

    def _add(self, tool: AgentTool) -> None:
        if not tool.name.replace("_", "").replace("-", "").isalnum() or len(tool.name) > 64:
            raise ValueError(f"tool name {tool.name!r}: letters, digits, _ and - only, <= 64")
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._schemas.append(tool.schema())
        self._tools[tool.name] = tool


def _description(fn: ToolFunction) -> str:
    doc = inspect.getdoc(fn) or ""
    first = doc.split("\n\n", 1)[0]
    return " ".join(first.split()) or fn.__name__


def _arguments_model(tool_name: str, fn: ToolFunction) -> type[BaseModel]:
    """A pydantic model of the function's parameters: the schema and the validator."""
    hints = typing.get_type_hints(fn, include_extras=True)
    fields: dict[str, Any] = {}
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD, param.POSITIONAL_ONLY):
            raise TypeError(f"tool {tool_name}: parameters must be plain named parameters")
        default = ... if param.default is param.empty else param.default
        fields[param.name] = (hints.get(param.name, Any), default)
    model: type[BaseModel] = create_model(
        f"{tool_name}_arguments", __config__=ConfigDict(extra="forbid"), **fields
    )
    return model


class JournaledTool:
    """Any async effect as a Stint tool: its JSON result is appended to the session's
    fsync'd journal under the step key before the step commits, so a crash between
    the two is reconciled from the journal instead of running the effect again.

    Used for the registry's functions here, and by the SDK adapters and MCP tools.
    A call found started with no journal line may or may not have had its effect:
    unknown, unless the tool is ``idempotent`` (then it simply runs again).
    """

    def __init__(
        self,
        name: str,
        effect: Callable[[ToolCall], Awaitable[Any]],
        journal: EffectJournal,
        *,
        idempotent: bool,
    ) -> None:
        self.name = name
        self._effect = effect
        self._journal = journal
        self._idempotent = idempotent

    async def run(self, call: ToolCall) -> Any:
        result = to_jsonable_python(await self._effect(call))
        record = {"turn_id": str(call.turn_id), "tool": self.name, "result": result}
        await asyncio.to_thread(self._journal.append, call.session_id, call.step_key, record)
        return result

    async def reconcile(self, call: ToolCall) -> Reconciled:
        found = await asyncio.to_thread(self._journal.lookup, call.session_id, call.step_key)
        if found is not None:
            return Reconciled(Verdict.DONE, found.get("result"))
        return Reconciled(Verdict.NOT_DONE if self._idempotent else Verdict.UNKNOWN)


class _NamedJournalTool(JournalTool):
    """The native journal tool under the name the model calls it by."""

    def __init__(self, name: str, journal: EffectJournal) -> None:
        super().__init__(journal)
        self.name = name


def parse_object(name: str, raw: str) -> dict[str, Any]:
    """The model's argument text for tool ``name`` as a JSON object (not yet validated)."""
    try:
        value = json.loads(raw or "{}")
    except json.JSONDecodeError as exc:
        raise ToolArgumentsError(f"arguments for {name} are not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ToolArgumentsError(f"arguments for {name} must be a JSON object")
    return value


def tool_result_text(result: Any) -> str:
    """A tool result as the model reads it: strings as they are, anything else as JSON."""
    return result if isinstance(result, str) else json.dumps(result, sort_keys=True)


def arguments_of(args: Mapping[str, Any]) -> str:
    return json.dumps(dict(args), sort_keys=True)
