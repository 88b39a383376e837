"""MCP clients of one worker process: one connection per configured server.

Each connection is owned by one task, which opens the transport (a stdio
child process, or streamable HTTP), initializes the session, lists the tools,
and then watches it: a failed ping, or a call that found the transport gone,
ends the connection and the task opens it again after a short backoff (a dead
stdio server is restarted). ``close`` ends every owner task, which closes its
session and stops its child process: the worker calls it when it drains. Calls
come from any slot's task; the SDK's session multiplexes them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stint.agents.errors import AgentError
from stint.agents.mcp.config import McpConfigError, McpServerConfig, read_headers
from stint.agents.tools import JournaledTool
from stint.worker.failpoints import failpoint
from stint.worker.journal import EffectJournal
from stint.worker.tools import Tool, ToolCall

try:
    import httpx2
    import mcp
    from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
    from mcp.client.streamable_http import streamable_http_client
except ImportError as exc:  # the optional dependency
    raise McpConfigError("MCP servers need the mcp package: pip install 'stint[mcp]'") from exc

__all__ = ["McpCallCutOff", "McpServers", "McpTool", "McpUnavailable"]

log = logging.getLogger("stint.agents.mcp")

_READY_SECONDS = 30.0
_PING_SECONDS = 2.0
_BACKOFF_SECONDS = (0.1, 5.0)
# The errors the SDK makes up for a request whose answer can never arrive.
_CUT_OFF = frozenset({mcp.types.CONNECTION_CLOSED, mcp.types.REQUEST_TIMEOUT})


class McpUnavailable(AgentError):
    """An MCP server could not be reached or started."""


class McpCallCutOff(AgentError):
    """An MCP tool call was cut off before its answer came: it may or may not have run."""


@dataclass(frozen=True)
class McpTool:
    """One tool a server offers, as the model is told of it."""

    server: str
    name: str
    description: str
    input_schema: dict[str, Any]
    idempotent: bool
    needs_approval: bool

    def schema(self) -> dict[str, Any]:
        """The chat-completions ``tools`` entry."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.input_schema,
            },
        }


class _Connection:
    """One server's session, kept open by its owner task."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.starts = 0
        self._session: mcp.ClientSession | None = None
        self._tools: list[McpTool] = []
        self._ready = asyncio.Event()
        self._broken = asyncio.Event()
        self._closing = False
        self._owner: asyncio.Task[None] | None = None
        self._error: str | None = None

    async def tools(self) -> list[McpTool]:
        await self._session_ready()
        return list(self._tools)

    async def call(self, name: str, arguments: Mapping[str, Any]) -> mcp.types.CallToolResult:
        session = await self._session_ready()
        try:
            return await session.call_tool(
                name, dict(arguments), read_timeout_seconds=self.config.timeout
            )
        except mcp.MCPError as exc:
            if exc.code not in _CUT_OFF:
                raise  # the server answered with an error: the connection is fine
            reason = exc.error.message
        except Exception as exc:
            reason = type(exc).__name__
        self._ready.clear()  # no call may use this session any more
        self._broken.set()  # the owner opens it again
        raise McpCallCutOff(
            f"MCP server {self.config.name}: the call to {name} was cut off "
            f"({reason}); it may or may not have run"
        )

    async def close(self) -> None:
        self._closing = True
        self._broken.set()
        if self._owner is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(self._owner, timeout=10)

    async def _session_ready(self) -> mcp.ClientSession:
        if self._owner is None or self._owner.done():
            self._owner = asyncio.create_task(self._own(), name=f"mcp-{self.config.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout=_READY_SECONDS)
        except TimeoutError:
            raise McpUnavailable(
                f"MCP server {self.config.name} is not ready after {_READY_SECONDS:g}s"
                + (f" (last error: {self._error})" if self._error else "")
            ) from None
        assert self._session is not None
        return self._session

    async def _own(self) -> None:
        """Open, watch, and reopen the connection until ``close``."""
        backoff = _BACKOFF_SECONDS[0]
        while not self._closing:
            try:
                async with (
                    self._transport() as (read, write),
                    mcp.ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    listed = await session.list_tools()
                    self._tools = [self._tool(t) for t in listed.tools]
                    self._session = session
                    self._broken.clear()
                    self._ready.set()
                    self.starts += 1
                    self._error = None
                    backoff = _BACKOFF_SECONDS[0]
                    log.info("MCP server %s ready: %d tools", self.config.name, len(self._tools))
                    await self._watch(session)
            except Exception as exc:
                self._error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("MCP server %s: connection ended (%s)", self.config.name, self._error)
            finally:
                self._ready.clear()
                self._session = None
            if not self._closing:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _BACKOFF_SECONDS[1])

    async def _watch(self, session: mcp.ClientSession) -> None:
        """Return when the connection is broken (a failed ping or call) or closing."""
        while not self._closing:
            try:
                await asyncio.wait_for(self._broken.wait(), timeout=_PING_SECONDS)
                return
            except TimeoutError:
                pass
            await asyncio.wait_for(session.send_ping(), timeout=_PING_SECONDS)

    @contextlib.asynccontextmanager
    async def _transport(self) -> AsyncIterator[Any]:
        config = self.config
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command,
                args=config.args,
                # Never the worker's own environment: it holds the database URL and the
                # model key. The SDK's safe few (PATH, HOME, ...) and what the file gives.
                env={**get_default_environment(), **config.env},
                cwd=config.cwd,
            )
            async with stdio_client(params) as streams:
                yield streams
            return
        assert config.url is not None
        client = httpx2.AsyncClient(
            headers=read_headers(config), timeout=httpx2.Timeout(30.0, read=300.0)
        )
        async with client, streamable_http_client(config.url, http_client=client) as streams:
            yield streams

    def _tool(self, tool: mcp.types.Tool) -> McpTool:
        hints = tool.annotations
        idempotent = tool.name in self.config.idempotent or bool(
            hints is not None and (hints.read_only_hint or hints.idempotent_hint)
        )
        return McpTool(
            server=self.config.name,
            name=tool.name,
            description=tool.description or tool.name,
            input_schema=tool.input_schema,
            idempotent=idempotent,
            needs_approval=tool.name in self.config.needs_approval,
        )


class McpServers:
    """The worker's MCP servers: their tools by name, calls, and ``close`` on drain."""

    def __init__(self, configs: Sequence[McpServerConfig]) -> None:
        self._connections = {c.name: _Connection(c) for c in configs}
        self._by_tool: dict[str, McpTool] | None = None
        self._lock = asyncio.Lock()

    @property
    def configs(self) -> list[McpServerConfig]:
        return [c.config for c in self._connections.values()]

    def starts(self, server: str) -> int:
        """How many times ``server``'s connection was opened (restarts + 1)."""
        return self._connections[server].starts

    async def tools(self) -> list[McpTool]:
        """Every server's tools (each server started on first use); names are unique."""
        async with self._lock:
            if self._by_tool is None:
                found: dict[str, McpTool] = {}
                for connection in self._connections.values():
                    for tool in await connection.tools():
                        if tool.name in found:
                            raise McpConfigError(
                                f"MCP tool {tool.name!r} is offered by both "
                                f"{found[tool.name].server} and {tool.server}"
                            )
                        found[tool.name] = tool
                self._by_tool = found
            return list(self._by_tool.values())

    async def get(self, name: str) -> McpTool | None:
        return {t.name: t for t in await self.tools()}.get(name)

    async def call(self, tool: McpTool, arguments: Mapping[str, Any]) -> Any:
        """Call ``tool`` once (twice when a read-only or idempotent call was cut off);
        its answer as the model reads it. Not durable by itself: see ``durable``."""
        connection = self._connections[tool.server]
        failpoint("mcp_before_call")
        try:
            result = await connection.call(tool.name, arguments)
        except McpCallCutOff:
            if not tool.idempotent:
                raise
            result = await connection.call(tool.name, arguments)  # safe to run again
        failpoint("mcp_after_call")
        return _answer(result)

    def durable(self, tool: McpTool, journal: EffectJournal) -> Tool:
        """The Stint tool for one call of ``tool``: journaled before its step commits."""

        async def effect(call: ToolCall) -> Any:
            return await self.call(tool, call.args)

        return JournaledTool(tool.name, effect, journal, idempotent=tool.idempotent)

    async def close(self) -> None:
        """Close every session and stop every stdio server (the worker drains)."""
        await asyncio.gather(*(c.close() for c in self._connections.values()))


def _answer(result: mcp.types.CallToolResult) -> Any:
    """The tool's answer as the model reads it: its text, or its structured content;
    an error result as ``{"error": text}``."""
    text = "".join(getattr(block, "text", "") for block in result.content)
    if result.is_error:
        return {"error": text or "the tool failed"}
    if result.structured_content is not None and not text:
        return result.structured_content
    return text
