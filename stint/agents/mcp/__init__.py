"""MCP tools for Stint's agent loops: servers named in a settings file, each call a durable step.

``STINT_MCP_SERVERS`` names a JSON file of servers (``config``). Each worker
process starts one client per server (``servers``): a stdio server is one
child process per worker, restarted if it dies and stopped when the worker
drains; a streamable-HTTP server is reached at its URL with headers read from
a secret file. Every tool call is one durable tool step (``ctx.call_tool``)
with a digest of its arguments, its result journaled before the step commits:
a replay never calls a tool whose result was committed, and a call cut off
before its result was journaled is surfaced as an unknown effect, unless the
server marks the tool read-only or idempotent (then it simply runs again).

``config`` imports nothing of the ``mcp`` SDK (``stint status`` reads it);
``servers`` does, and only a harness that has servers configured loads it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from stint.config.settings import Settings

if TYPE_CHECKING:
    from stint.agents.mcp.servers import McpServers

__all__ = ["open_mcp"]


def open_mcp(settings: Settings) -> McpServers | None:
    """The worker's MCP servers from ``STINT_MCP_SERVERS`` (None: none configured).
    Nothing starts until a turn first asks for the tools."""
    if settings.mcp_servers is None:
        return None
    from stint.agents.mcp.config import load_servers
    from stint.agents.mcp.servers import McpServers

    return McpServers(load_servers(settings.mcp_servers))
